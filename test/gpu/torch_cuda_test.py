#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""kolo.torch with CUDA tensors, as a user's training script runs it: every collective on CUDA
tensors (values checked exactly on every rank), asynchronous handles, allreduce with a joined
rank (hvd.join(device): its slots are zeros or the op's identity on the device), autograd through
allreduce, and DistributedOptimizer steps of a small CUDA model whose parameters must stay
identical across ranks and equal a single-process step on the averaged gradient.

    kolorun -np 1 python3 test/gpu/torch_cuda_test.py                      # NCCL, one GPU
    KOLO_GPU_OPERATIONS=host CUDA_VISIBLE_DEVICES=0 kolorun -np 2 python3 ...  # ranks share it
    CUDA_VISIBLE_DEVICES=0 kolorun -np 2 python3 ...                          # auto: host-staged
    KOLO_GPU_OPERATIONS=nccl kolorun -np 2 test/mp/fake_hosts.sh 1 python3 ... --allreduce-only
    KOLO_GPU_OPERATIONS=host kolorun -np 4 test/mp/fake_hosts.sh 2 python3 ...   # 2 hosts x 2

--allreduce-only runs only the allreduce cases and starts every rank from the same seed instead
of broadcasting: two fake hosts on one GPU have single-rank NCCL communicators per host for the
hierarchical allreduce, and any other collective would need a communicator of both ranks on one
device, which NCCL refuses.

Each rank uses device local_rank % device_count. Without torch, without CUDA, without a CUDA
build of kolo, or with KOLO_GPU_OPERATIONS=nccl and fewer devices than local ranks (NCCL refuses
two ranks of one communicator on one device; auto goes host-staged for them) every rank prints a
line starting "SKIPPED:" and exits 0, which CTest reports as skipped. Any failure exits 1 with
the rank and the reason.
"""

import os
import sys
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                                os.pardir, "bindings", "python"))


def skip(why):
    print("SKIPPED: %s" % why, flush=True)
    sys.exit(0)


try:
    import torch
except ImportError:
    skip("PyTorch is not installed for %s" % sys.executable)
# --cpu runs the same checks on CPU tensors: a check of this script itself on a machine without a GPU.
ON_CPU = "--cpu" in sys.argv[1:]
ALLREDUCE_ONLY = "--allreduce-only" in sys.argv[1:]
if not ON_CPU and not torch.cuda.is_available():
    skip("torch sees no CUDA device")

import kolo.torch as hvd  # noqa: E402


def gpu_operations():
    """'nccl' (forced: a device per local rank), 'host' (staged through host memory) or 'auto'
    (NCCL, host-staged for ranks sharing a GPU), as the job set it."""
    for name in ("KOLO_GPU_OPERATIONS", "HOROVOD_GPU_OPERATIONS"):
        v = os.environ.get(name, "").strip().lower()
        if v:
            return "host" if v in ("host", "mpi", "gloo") else v
    return "auto" if hvd.nccl_built() else "host"


def exact(got, want, what):
    got = got.cpu()
    want = want.cpu()
    if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
        raise AssertionError("%s on rank %d: got %s, want %s" % (what, hvd.rank(), got.tolist(),
                                                                 want.tolist()))


def collectives(dev):
    n, r = hvd.size(), hvd.rank()
    tri = float(n * (n + 1) // 2)
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32,
                  torch.int64):
        x = torch.full((1000,), r + 1, dtype=dtype, device=dev)
        exact(hvd.allreduce(x, op=hvd.Sum, name="sum.%s" % dtype),
              torch.full((1000,), tri, dtype=torch.float64).to(dtype), "allreduce %s" % dtype)
    avg = hvd.allreduce(torch.full((7, 3), float(2 * r), device=dev), name="avg")
    exact(avg, torch.full((7, 3), float(n - 1), device=dev), "average")
    y = torch.full((5,), float(r), device=dev)
    hvd.allreduce_(y, op=hvd.Max, name="max_")
    exact(y, torch.full((5,), float(n - 1), device=dev), "in-place max")
    # Fused: many small tensors in flight at once.
    hs = [hvd.allreduce_async(torch.full((3 + i,), float(i + r), device=dev), op=hvd.Sum,
                              name="fused.%d" % i) for i in range(64)]
    for i, h in enumerate(hs):
        exact(hvd.synchronize(h), torch.full((3 + i,), float(i * n + n * (n - 1) // 2),
                                             device=dev), "fused %d" % i)
    g = hvd.grouped_allreduce([torch.ones(4, device=dev), torch.full((2,), float(r), device=dev)],
                              op=hvd.Sum, name="grouped")
    exact(g[0], torch.full((4,), float(n), device=dev), "grouped[0]")
    exact(g[1], torch.full((2,), float(n * (n - 1) // 2), device=dev), "grouped[1]")
    if ALLREDUCE_ONLY:
        return
    # Uneven allgather: rank q contributes q + 1 rows.
    ag = hvd.allgather(torch.full((r + 1, 2), r, dtype=torch.int32, device=dev), name="ag")
    want = torch.cat([torch.full((q + 1, 2), q, dtype=torch.int32) for q in range(n)])
    exact(ag, want, "allgather")
    root = n - 1
    b = hvd.broadcast(torch.full((6,), float(r * 10), device=dev), root, name="bc")
    exact(b, torch.full((6,), float(root * 10), device=dev), "broadcast")
    # alltoall with splits: rank r sends q + 1 elements to rank q, valued 100 r + q.
    send = torch.cat([torch.full((q + 1,), 100 * r + q, dtype=torch.int64) for q in range(n)])
    got, splits = hvd.alltoall(send.to(dev), splits=torch.tensor([q + 1 for q in range(n)]),
                               name="a2a")
    exact(got, torch.cat([torch.full((r + 1,), 100 * q + r, dtype=torch.int64)
                          for q in range(n)]), "alltoall")
    exact(splits, torch.full((n,), r + 1, dtype=splits.dtype), "alltoall received splits")
    rs = hvd.reducescatter(torch.ones(2 * n, 3, device=dev), op=hvd.Sum, name="rs")
    exact(rs, torch.full((2, 3), float(n), device=dev), "reducescatter")


def spread(t, name):
    """The MIN and MAX of one-element tensor t over the ranks (equal where every rank agrees)."""
    return (hvd.allreduce(t, op=hvd.Min, name=name + ".min").item(),
            hvd.allreduce(t, op=hvd.Max, name=name + ".max").item())


def joined(dev):
    """The last rank joins at once (hvd.join with its device, as Horovod's join(device)); the
    others' allreduces of device tensors, one at a time and fused, count it as zeros (Min and
    Max: the op's identity, so negative values show a zero that slipped in); then they join,
    and join returns the same rank everywhere."""
    n, r = hvd.size(), hvd.rank()
    ordinal = -1 if dev.type == "cpu" else dev.index
    if n > 1 and r == n - 1:
        last = hvd.join(ordinal)
    else:
        live = n - 1 if n > 1 else 1
        total = float(live * (live + 1) // 2)  # ranks 0 .. live - 1 contribute r + 1
        x = torch.full((5,), float(r + 1), device=dev)
        exact(hvd.allreduce(x, op=hvd.Sum, name="join.sum"), torch.full((5,), total, device=dev),
              "allreduce with a joined rank, sum")
        exact(hvd.allreduce(torch.full((4,), float(2 * n * (r + 1)), device=dev),
                            name="join.avg"),
              torch.full((4,), 2 * total, device=dev), "allreduce with a joined rank, average")
        exact(hvd.allreduce(x, op=hvd.Min, name="join.min"), torch.full((5,), 1.0, device=dev),
              "allreduce with a joined rank, min")
        exact(hvd.allreduce(-x, op=hvd.Max, name="join.max"),
              torch.full((5,), -1.0, device=dev), "allreduce with a joined rank, max")
        hs = [hvd.allreduce_async(torch.full((3 + i,), float(r + 1), dtype=torch.float64,
                                             device=dev), op=hvd.Sum, name="join.fused.%d" % i)
              for i in range(8)]
        for i, h in enumerate(hs):
            exact(hvd.synchronize(h), torch.full((3 + i,), total, dtype=torch.float64,
                                                 device=dev), "fused allreduce %d with a joined "
                  "rank" % i)
        last = hvd.join(ordinal)
    if not 0 <= last < n or (n > 1 and last == n - 1):
        raise AssertionError("join returned %d on rank %d" % (last, r))
    lo, hi = spread(torch.full((1,), last, dtype=torch.int64, device=dev), "join.last")
    if lo != last or hi != last:
        raise AssertionError("join returned %d on rank %d, %d to %d elsewhere" % (last, r, lo, hi))


def autograd(dev):
    n = hvd.size()
    x = torch.full((4,), float(hvd.rank() + 1), device=dev, requires_grad=True)
    hvd.allreduce(x, op=hvd.Sum, name="ag_fwd").sum().backward()
    exact(x.grad, torch.full((4,), float(n), device=dev), "allreduce gradient")


def training(dev):
    """A DistributedOptimizer step is the step on the mean of the ranks' gradients."""
    n, r = hvd.size(), hvd.rank()
    # Ranks start apart, and broadcast_parameters must fix that (same seed without broadcasts).
    torch.manual_seed(1234 + (0 if ALLREDUCE_ONLY else r))
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 4)).to(dev)
    if not ALLREDUCE_ONLY:
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    if not ALLREDUCE_ONLY:
        hvd.broadcast_optimizer_state(opt, root_rank=0)
    g = torch.Generator().manual_seed(7)
    data = [(torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g))
            for _ in range(n)]
    first = last = None
    for step in range(20):
        before = [p.detach().cpu().double().clone() for p in model.parameters()]
        # Reference: the mean over all ranks' batches, computed locally in float64 on the CPU.
        ref = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                  torch.nn.Linear(32, 4)).double()
        with torch.no_grad():
            for p, b in zip(ref.parameters(), before):
                p.copy_(b)
        grads = [torch.zeros_like(b) for b in before]
        for xb, yb in data:
            ref.zero_grad()
            torch.nn.functional.cross_entropy(ref(xb.double()), yb).backward()
            for acc, p in zip(grads, ref.parameters()):
                acc += p.grad / n
        xb, yb = data[r]
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(xb.to(dev)), yb.to(dev))
        loss.backward()
        opt.step()
        for i, (p, b, gr) in enumerate(zip(model.parameters(), before, grads)):
            want = b - 0.1 * gr
            diff = (p.detach().cpu().double() - want).abs().max().item()
            if diff > 1e-4:
                raise AssertionError("step %d, parameter %d on rank %d: %g from the step on the "
                                     "averaged gradient" % (step, i, r, diff))
        mean_loss = hvd.allreduce(loss.detach(), name="loss").item()
        first = mean_loss if first is None else first
        last = mean_loss
    # Identical parameters everywhere: the checksum's MIN and MAX over the ranks agree bitwise.
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    check = flat.double().sum().reshape(1)
    lo, hi = spread(check, "checksum")
    if lo != hi:
        raise AssertionError("parameters differ across ranks: checksums %r to %r" % (lo, hi))
    if not last < first:
        raise AssertionError("loss did not fall: %g -> %g" % (first, last))
    return first, last


def main():
    hvd.init()
    if ON_CPU:
        dev = torch.device("cpu")
    else:
        if not hvd.cuda_built():
            skip("kolo was built without CUDA")
        count = torch.cuda.device_count()
        if gpu_operations() == "nccl" and count < hvd.local_size():
            skip("%d CUDA device(s) for %d local ranks with KOLO_GPU_OPERATIONS=nccl"
                 % (count, hvd.local_size()))
        dev = torch.device("cuda", hvd.local_rank() % count)
        torch.cuda.set_device(dev)
    try:
        collectives(dev)
        joined(dev)
        autograd(dev)
        first, last = training(dev)
        if not ALLREDUCE_ONLY:
            hvd.barrier()
    except Exception:  # noqa: BLE001 -- every failure is reported with the rank, then exit 1
        print("rank %d FAILED:\n%s" % (hvd.rank(), traceback.format_exc()), file=sys.stderr,
              flush=True)
        os._exit(1)
    if hvd.rank() == 0:
        where = "the CPU" if ON_CPU else "%s, KOLO_GPU_OPERATIONS %s" % (
            torch.cuda.get_device_name(dev), gpu_operations())
        print("torch %s test passed: %d rank(s) on %s, loss %.4f -> %.4f" % (
            dev.type, hvd.size(), where, first, last), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
