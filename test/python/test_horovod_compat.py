# SPDX-License-Identifier: Apache-2.0
"""kolo.torch against horovod.torch 0.28's documented API: every public name, the signatures and
defaults, the reduction-op values, the exception types, and the documented results of each call
(checked with exact values on every rank). Runs under kolorun on 2 and 3 ranks."""

import inspect
import os
import subprocess
import sys
import warnings

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed for this interpreter")

# horovod/torch/__init__.py (0.28) exports, less `elastic` (kolo.torch.elastic, checked by
# test_elastic.py).
HOROVOD_TORCH_NAMES = """
Compression allgather_object broadcast_object broadcast_optimizer_state broadcast_parameters
allreduce allreduce_async allreduce_ allreduce_async_ grouped_allreduce grouped_allreduce_async
grouped_allreduce_ grouped_allreduce_async_ sparse_allreduce_async allgather allgather_async
grouped_allgather grouped_allgather_async broadcast broadcast_async broadcast_ broadcast_async_
alltoall alltoall_async reducescatter reducescatter_async grouped_reducescatter
grouped_reducescatter_async join barrier poll synchronize init shutdown is_initialized
start_timeline stop_timeline size local_size cross_size rank local_rank cross_rank
mpi_threads_supported mpi_enabled mpi_built gloo_enabled gloo_built nccl_built ddl_built ccl_built
cuda_built rocm_built ProcessSet global_process_set add_process_set remove_process_set Average Sum
Adasum Min Max Product HorovodInternalError DistributedOptimizer SyncBatchNorm
""".split()

# Names scripts import from horovod.torch.mpi_ops rather than from horovod.torch.
HOROVOD_MPI_OPS_NAMES = HOROVOD_TORCH_NAMES[5:] + ["is_homogeneous",
                                                   "handle_average_backwards_compatibility"]
HOROVOD_MPI_OPS_NAMES.remove("DistributedOptimizer")
HOROVOD_MPI_OPS_NAMES.remove("SyncBatchNorm")


def _sig(fn):
    out = []
    for p in inspect.signature(fn).parameters.values():
        if p.default is inspect.Parameter.empty:
            out.append(p.name)
        else:
            out.append((p.name, p.default))
    return out


def test_public_names(hvd):
    missing = [n for n in HOROVOD_TORCH_NAMES if not hasattr(hvd, n)]
    assert missing == []
    import kolo.torch.mpi_ops as mpi_ops
    missing = [n for n in HOROVOD_MPI_OPS_NAMES if not hasattr(mpi_ops, n)]
    assert missing == []
    from kolo.torch.compression import Compression  # noqa: F401
    from kolo.torch.functions import broadcast_object  # noqa: F401
    from kolo.torch.optimizer import DistributedOptimizer  # noqa: F401
    from kolo.torch.sync_batch_norm import SyncBatchNorm  # noqa: F401
    assert issubclass(hvd.HorovodInternalError, RuntimeError)


def test_reduce_op_values(hvd):
    # horovod.common.basics: Average 0, Sum 1, Adasum 2, Min 3, Max 4, Product 5.
    assert (hvd.Average, hvd.Sum, hvd.Adasum, hvd.Min, hvd.Max, hvd.Product) == (0, 1, 2, 3, 4, 5)


def test_signatures_and_defaults(hvd):
    gps = hvd.global_process_set
    none = hvd.Compression.none
    scale = [("prescale_factor", 1.0), ("postscale_factor", 1.0), ("process_set", gps)]
    assert _sig(hvd.allreduce) == ["tensor", ("average", None), ("name", None),
                                   ("compression", none), ("op", None)] + scale
    for fn in (hvd.allreduce_async, hvd.allreduce_, hvd.allreduce_async_):
        assert _sig(fn) == ["tensor", ("average", None), ("name", None), ("op", None)] + scale
    assert _sig(hvd.grouped_allreduce) == ["tensors", ("average", None), ("name", None),
                                           ("compression", none), ("op", None)] + scale
    for fn in (hvd.grouped_allreduce_async, hvd.grouped_allreduce_,
               hvd.grouped_allreduce_async_):
        assert _sig(fn) == ["tensors", ("average", None), ("name", None), ("op", None)] + scale
    for fn in (hvd.allgather, hvd.allgather_async):
        assert _sig(fn) == ["tensor", ("name", None), ("process_set", gps)]
    for fn in (hvd.grouped_allgather, hvd.grouped_allgather_async):
        assert _sig(fn) == ["tensors", ("name", None), ("process_set", gps)]
    for fn in (hvd.broadcast, hvd.broadcast_async, hvd.broadcast_, hvd.broadcast_async_):
        assert _sig(fn) == ["tensor", "root_rank", ("name", None), ("process_set", gps)]
    for fn in (hvd.alltoall, hvd.alltoall_async):
        assert _sig(fn) == ["tensor", ("splits", None), ("name", None), ("process_set", gps)]
    tail = [("op", hvd.Average), ("process_set", gps), ("prescale_factor", 1.0),
            ("postscale_factor", 1.0)]
    assert _sig(hvd.reducescatter) == ["tensor", ("name", None), ("compression", none)] + tail
    assert _sig(hvd.reducescatter_async) == ["tensor", ("name", None)] + tail
    assert _sig(hvd.grouped_reducescatter) == ["tensors", ("name", None),
                                               ("compression", none)] + tail
    assert _sig(hvd.sparse_allreduce_async) == ["tensor", "name", "op", ("process_set", gps)]
    assert _sig(hvd.join) == [("device", -1)]
    assert _sig(hvd.barrier) == [("process_set", gps)]
    assert _sig(hvd.poll) == ["handle"] and _sig(hvd.synchronize) == ["handle"]
    assert _sig(hvd.init) == [("comm", None), ("process_sets", None)]
    assert _sig(hvd.start_timeline) == ["file_path", ("mark_cycles", False)]
    assert _sig(hvd.broadcast_parameters) == ["params", "root_rank", ("process_set", gps)]
    assert _sig(hvd.broadcast_optimizer_state) == ["optimizer", "root_rank", ("model", None),
                                                   ("process_set", gps)]
    assert _sig(hvd.broadcast_object) == ["obj", ("root_rank", 0), ("name", None),
                                          ("process_set", gps)]
    assert _sig(hvd.allgather_object) == ["obj", ("name", None), ("process_set", gps)]
    assert _sig(hvd.DistributedOptimizer) == [
        "optimizer", ("named_parameters", None), ("compression", none),
        ("backward_passes_per_step", 1), ("op", hvd.Average),
        ("gradient_predivide_factor", 1.0), ("num_groups", 0), ("groups", None),
        ("sparse_as_dense", False), ("process_set", gps)]
    bn = _sig(hvd.SyncBatchNorm.__init__)
    assert bn[:6] == ["self", "num_features", ("eps", 1e-5), ("momentum", 0.1),
                      ("affine", True), ("track_running_stats", True)]


_BEFORE_INIT = r"""
import kolo.torch as hvd, torch
for fn in (hvd.rank, hvd.size, hvd.local_rank, hvd.local_size, hvd.cross_rank, hvd.cross_size):
    try:
        fn()
    except ValueError as e:
        assert str(e) == "Horovod has not been initialized; use hvd.init().", str(e)
    else:
        raise SystemExit("no error from %s" % fn.__name__)
try:
    hvd.allreduce(torch.ones(2))
except ValueError as e:
    assert isinstance(e, hvd.HorovodInternalError)
    assert str(e).startswith("Horovod has not been initialized; use hvd.init()."), str(e)
else:
    raise SystemExit("no error from allreduce")
assert hvd.is_initialized() is False
print("BEFORE-INIT-OK")
"""


def test_calls_before_init_raise_horovods_error(hvd):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KOLO_", "HOROVOD_"))}
    env["KOLO_LIBRARY"] = os.environ.get("KOLO_LIBRARY", "")
    if not env["KOLO_LIBRARY"]:
        import kolo._lib
        env["KOLO_LIBRARY"] = kolo._lib.path
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    r = subprocess.run([sys.executable, "-c", _BEFORE_INIT], env=env, timeout=120,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert r.returncode == 0 and "BEFORE-INIT-OK" in r.stdout, r.stdout


def test_average_and_op_arguments(hvd):
    n, r = hvd.size(), hvd.rank()
    x = torch.full((3,), float(r + 1))
    with pytest.raises(ValueError, match="op parameter supersedes average"):
        hvd.allreduce(x, average=True, op=hvd.Sum)
    with pytest.warns(DeprecationWarning):
        summed = hvd.allreduce(x, average=False)
    assert torch.equal(summed, torch.full((3,), n * (n + 1) / 2.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        avg = hvd.allreduce(x)  # op=None means Average, no warning
    assert torch.equal(avg, torch.full((3,), (n + 1) / 2.0))
    assert torch.equal(x, torch.full((3,), float(r + 1)))  # the input is not modified


def test_allreduce_ops_and_scaling(hvd):
    n, r = hvd.size(), hvd.rank()
    x = torch.tensor([r + 1, -(r + 1), 2], dtype=torch.int64)
    assert hvd.allreduce(x, op=hvd.Sum).tolist() == [n * (n + 1) // 2, -n * (n + 1) // 2, 2 * n]
    assert hvd.allreduce(x, op=hvd.Min).tolist() == [1, -n, 2]
    assert hvd.allreduce(x, op=hvd.Max).tolist() == [n, -1, 2]
    assert hvd.allreduce(x, op=hvd.Product).tolist()[2] == 2 ** n
    y = torch.full((4,), float(r))
    out = hvd.allreduce(y, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5)
    assert torch.equal(out, torch.full((4,), n * (n - 1) / 2.0))
    t = torch.full((2,), float(r))
    assert hvd.allreduce_(t, op=hvd.Sum) is t
    assert torch.equal(t, torch.full((2,), n * (n - 1) / 2.0))


def test_async_handles_poll_synchronize(hvd):
    n, r = hvd.size(), hvd.rank()
    h = hvd.allreduce_async(torch.full((5,), float(r)), op=hvd.Sum, name="compat.async")
    assert isinstance(h, int)
    out = hvd.synchronize(h)
    assert torch.equal(out, torch.full((5,), n * (n - 1) / 2.0))
    assert hvd.synchronize(h) is None  # unknown (already synchronized) handle, as Horovod
    h = hvd.allgather_async(torch.tensor([r]))
    while not hvd.poll(h):
        pass
    assert hvd.synchronize(h).tolist() == list(range(n))
    g = hvd.grouped_allreduce_async([torch.ones(2), torch.full((3,), float(r))], op=hvd.Sum)
    a, b = hvd.synchronize(g)
    assert a.tolist() == [n, n] and b.tolist() == [n * (n - 1) / 2.0] * 3


def test_mismatch_raises_horovod_internal_error(hvd):
    r = hvd.rank()
    if hvd.size() == 1:
        pytest.skip("a mismatch needs two ranks")
    h = hvd.allreduce_async(torch.ones(2 + r), name="compat.mismatch")
    with pytest.raises(hvd.HorovodInternalError):
        hvd.synchronize(h)
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == hvd.size()  # still working


def test_allgather_broadcast_alltoall_reducescatter(hvd):
    n, r = hvd.size(), hvd.rank()
    g = hvd.allgather(torch.full((r + 1, 2), r, dtype=torch.int32))
    assert g[:, 0].tolist() == [q for q in range(n) for _ in range(q + 1)]
    for root in range(n):
        b = hvd.broadcast(torch.tensor([r * 10]), root)
        assert b.tolist() == [root * 10]
    t = torch.tensor([r, r])
    assert hvd.broadcast_(t, n - 1) is t and t.tolist() == [n - 1, n - 1]
    out = hvd.alltoall(torch.arange(n, dtype=torch.int64) + 100 * r)
    assert isinstance(out, torch.Tensor) and out.tolist() == [100 * q + r for q in range(n)]
    splits = [1] * n
    out, received = hvd.alltoall(torch.arange(n) + 100 * r, splits=splits)
    assert out.tolist() == [100 * q + r for q in range(n)] and received.tolist() == [1] * n
    rs = hvd.reducescatter(torch.ones(2 * n, dtype=torch.float32) * (r + 1), op=hvd.Sum)
    assert rs.tolist() == [n * (n + 1) / 2.0] * 2
    rs = hvd.reducescatter(torch.ones(2 * n, dtype=torch.float32) * (r + 1))  # default Average
    assert rs.tolist() == [(n + 1) / 2.0] * 2


def test_process_sets_take_global_root_ranks(hvd):
    n, r = hvd.size(), hvd.rank()
    ps = hvd.add_process_set(list(range(1, n)))
    try:
        assert ps.process_set_id is not None and ps.ranks == list(range(1, n))
        assert ps.size() == n - 1 and ps.included() == (r >= 1)
        if r >= 1:
            b = hvd.broadcast(torch.tensor([r]), n - 1, process_set=ps)
            assert b.tolist() == [n - 1]
            s = hvd.allreduce(torch.tensor([r]), op=hvd.Sum, process_set=ps)
            assert s.tolist() == [n * (n - 1) // 2]
    finally:
        assert hvd.remove_process_set(ps) is True
    assert ps.process_set_id is None
    assert hvd.remove_process_set(ps) is False  # Horovod: False for a set that is gone
    assert hvd.remove_process_set(hvd.global_process_set) is False


def test_objects_and_parameters(hvd):
    n, r = hvd.size(), hvd.rank()
    assert hvd.allgather_object({"r": r}) == [{"r": q} for q in range(n)]
    assert hvd.broadcast_object(("x", r), root_rank=n - 1) == ("x", n - 1)
    assert hvd.broadcast_object([r]) == [0]  # root_rank defaults to 0
    torch.manual_seed(r)
    model = torch.nn.Linear(3, 2)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    w = hvd.allgather(model.weight.detach().reshape(1, -1))
    assert all(torch.equal(w[0], w[q]) for q in range(n))
    opt = torch.optim.SGD(model.parameters(), lr=0.1 * (r + 1), momentum=0.9)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1)
    with pytest.raises(ValueError):
        hvd.broadcast_parameters(42, root_rank=0)


def test_distributed_optimizer_averages_gradients(hvd):
    n, r = hvd.size(), hvd.rank()
    w = torch.nn.Parameter(torch.zeros(3))
    opt = hvd.DistributedOptimizer(torch.optim.SGD([w], lr=1.0),
                                   named_parameters=[("w", w)])
    assert isinstance(opt, torch.optim.SGD)
    (w * float(r + 1)).sum().backward()
    opt.step()
    assert torch.allclose(w.detach(), torch.full((3,), -(n + 1) / 2.0))
    opt.zero_grad()
    # backward_passes_per_step=2: two local passes are summed, then averaged over the ranks.
    v = torch.nn.Parameter(torch.zeros(2))
    opt2 = hvd.DistributedOptimizer(torch.optim.SGD([v], lr=1.0), named_parameters=[("v", v)],
                                    backward_passes_per_step=2, op=hvd.Sum)
    for _ in range(2):
        (v * float(r + 1)).sum().backward()
    opt2.step()
    assert torch.allclose(v.detach(), torch.full((2,), -float(n * (n + 1))))
    with pytest.raises(ValueError, match="unique"):
        hvd.DistributedOptimizer(torch.optim.SGD([v], lr=1.0),
                                 named_parameters=[("a", v), ("a", v)])
    with pytest.raises(ValueError, match="gradient_predivide_factor"):
        hvd.DistributedOptimizer(torch.optim.SGD([v], lr=1.0), op=hvd.Sum,
                                 gradient_predivide_factor=2.0)


def test_sparse_allreduce_handle_is_callable(hvd):
    n, r = hvd.size(), hvd.rank()
    sp = torch.sparse_coo_tensor(torch.tensor([[r]]), torch.tensor([float(r + 1)]), (n,))
    h = hvd.sparse_allreduce_async(sp, "compat.sparse", hvd.Sum)
    dense = h().to_dense()  # horovod.torch returns a function that waits for the result
    assert dense.tolist() == [float(q + 1) for q in range(n)]


def test_join_barrier_topology_and_build_info(hvd):
    n, r = hvd.size(), hvd.rank()
    hvd.barrier()
    last = hvd.join()
    assert isinstance(last, int) and 0 <= last < n
    assert hvd.allgather(torch.tensor([last])).tolist() == [last] * n
    assert hvd.is_initialized() is True
    assert (hvd.local_rank(), hvd.cross_rank(), hvd.cross_size()) == (r, 0, 1)
    assert hvd.local_size() == n
    assert isinstance(hvd.nccl_built(), int)
    assert hvd.gloo_enabled() and hvd.gloo_built() and not hvd.mpi_enabled()
    with pytest.raises(ValueError):
        hvd.mpi_threads_supported()  # Horovod: ValueError when MPI is not in use
    for fn in (hvd.rocm_built, hvd.ddl_built, hvd.ccl_built):
        assert fn() is False


def test_timeline(hvd, rank_dir):
    path = os.path.join(rank_dir, "timeline.json")  # rank 0 writes its file
    hvd.start_timeline(path, mark_cycles=True)
    hvd.allreduce(torch.ones(4), name="compat.timeline")
    hvd.stop_timeline()
    if hvd.rank() == 0:
        with open(path) as f:
            text = f.read()
        assert "compat.timeline" in text
