# SPDX-License-Identifier: Apache-2.0
"""kolo.torch collectives: every op and dtype with checked results, async and fused ops, errors
on every rank with the job continuing, duplicate names, join, barrier, process sets."""

import time

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed for this interpreter")

DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
          torch.bfloat16, torch.float32, torch.float64]


def _exact(a, b):
    assert a.dtype == b.dtype, (a.dtype, b.dtype)
    assert a.shape == b.shape, (a.shape, b.shape)
    assert torch.equal(a, b), (a, b)


@pytest.mark.parametrize("dtype", DTYPES)
def test_allreduce_every_op(hvd, dtype):
    n, r = hvd.size(), hvd.rank()
    base = torch.arange(24).reshape(2, 3, 4) % 5
    x = (base + r).to(dtype)
    total = sum(base + q for q in range(n))
    _exact(hvd.allreduce(x, op=hvd.Sum), total.to(dtype))
    _exact(hvd.allreduce(x, op=hvd.Min), base.to(dtype))
    _exact(hvd.allreduce(x, op=hvd.Max), (base + n - 1).to(dtype))
    two = torch.full((5,), 1 + (r % 2)).to(dtype)
    _exact(hvd.allreduce(two, op=hvd.Product), torch.full((5,), 2 ** (n // 2)).to(dtype))
    if dtype.is_floating_point:
        avg = hvd.allreduce(x)  # default op: Average
        assert avg.dtype == dtype
        torch.testing.assert_close(avg.double(), total.double() / n, rtol=1e-2, atol=1e-2)
        scaled = hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=4.0)
        torch.testing.assert_close(scaled.double(), total.double() * 2, rtol=1e-2, atol=1e-2)
    y = x.clone()
    out = hvd.allreduce_(y, op=hvd.Sum)
    assert out is y
    _exact(y, total.to(dtype))
    _exact(x, (base + r).to(dtype))  # the out-of-place op left its input alone


def test_consumer_stream_ordering(hvd):
    """synchronize() orders the consumer's stream after the op (kolo_handle_stream_wait): a
    no-op for a host op; for a CUDA op, torch's current stream (here a side stream), which is
    what makes KOLO_ASYNC_COMPLETION=1 safe. The CUDA part runs where each rank has a GPU."""
    import ctypes

    from kolo import _lib
    from kolo.torch._adapter import TorchAdapter

    n = hvd.size()
    x = torch.ones(3)
    d = TorchAdapter.describe(x, "x")
    h = _lib.Handle(0)
    assert _lib.lib.kolo_allreduce_async(b"stream_wait/host", ctypes.byref(d), None, _lib.C_SUM,
                                         1.0, 1.0, 0, _lib.NO_CALLBACK, None,
                                         ctypes.byref(h)) == _lib.OK
    assert _lib.lib.kolo_handle_wait(h, 60.0) == _lib.OK
    assert _lib.lib.kolo_handle_stream_wait(h, None) == _lib.OK
    TorchAdapter.consume([h.value], (x, d))
    assert _lib.lib.kolo_handle_release(h) == _lib.OK
    assert x.tolist() == [float(n)] * 3

    if not (hvd.nccl_built() and torch.cuda.is_available()
            and torch.cuda.device_count() >= hvd.local_size()):
        return
    dev = torch.device("cuda", hvd.local_rank())
    side = torch.cuda.Stream(dev)
    with torch.cuda.device(dev), torch.cuda.stream(side):
        y = torch.full((1 << 20,), float(hvd.rank() + 1), device=dev)
        out = hvd.allreduce(y, op=hvd.Sum)
        total = out.sum()  # queued on the side stream, after the op
    side.synchronize()
    assert total.item() == float(n * (n + 1) // 2) * (1 << 20)


def test_allreduce_bool_and_scalar(hvd):
    n, r = hvd.size(), hvd.rank()
    b = torch.tensor([r == 0, True, False])
    _exact(hvd.allreduce(b, op=hvd.Max), torch.tensor([True, True, False]))
    _exact(hvd.allreduce(b, op=hvd.Min), torch.tensor([n == 1, True, False]))
    s = torch.tensor(float(r))
    _exact(hvd.allreduce(s, op=hvd.Sum), torch.tensor(float(n * (n - 1) / 2)))
    e = torch.empty(0, 3)
    assert hvd.allreduce(e).shape == (0, 3)


def test_noncontiguous_inputs(hvd):
    n = hvd.size()
    base = torch.arange(48, dtype=torch.float32).reshape(6, 8)
    view = base.t()[::2]
    assert not view.is_contiguous()
    _exact(hvd.allreduce(view, op=hvd.Sum), view.contiguous() * n)
    work = base.clone()
    part = work[:, 1::2]
    hvd.allreduce_(part, op=hvd.Sum)
    _exact(work[:, 1::2], base[:, 1::2] * n)
    _exact(work[:, ::2], base[:, ::2])


def test_async_fused(hvd):
    n = hvd.size()
    tensors = [torch.full((3 + i,), float(i)) for i in range(40)]
    handles = [hvd.allreduce_async(t, op=hvd.Sum, name="fused.%d" % i)
               for i, t in enumerate(tensors)]
    inplace = [torch.full((2, i + 1), float(hvd.rank())) for i in range(10)]
    handles_ = [hvd.allreduce_async_(t, op=hvd.Sum) for t in inplace]
    for i, h in enumerate(handles):
        assert isinstance(h, int)
        _exact(hvd.synchronize(h), torch.full((3 + i,), float(i * n)))
    for i, h in enumerate(handles_):
        assert hvd.synchronize(h) is inplace[i]
        _exact(inplace[i], torch.full((2, i + 1), float(n * (n - 1) / 2)))
    h = hvd.allreduce_async(torch.ones(4))
    deadline = time.monotonic() + 60
    while not hvd.poll(h):
        assert time.monotonic() < deadline
        time.sleep(0.001)
    assert hvd.poll(h)
    _exact(hvd.synchronize(h), torch.ones(4))


def test_grouped_allreduce(hvd):
    n = hvd.size()
    ts = [torch.full((i + 1, 2), float(i)) for i in range(6)] + [torch.ones(3, dtype=torch.int32)]
    outs = hvd.grouped_allreduce(ts, op=hvd.Sum)
    for t, o in zip(ts, outs):
        _exact(o, t * n)
    h = hvd.grouped_allreduce_async(ts, op=hvd.Sum, name="grouped_async")
    for t, o in zip(ts, hvd.synchronize(h)):
        _exact(o, t * n)
    copies = [t.clone() for t in ts]
    hvd.grouped_allreduce_(copies, op=hvd.Sum)
    for t, o in zip(ts, copies):
        _exact(o, t * n)
    h = hvd.grouped_allreduce_async_(copies, op=hvd.Sum)
    assert hvd.synchronize(h)[0] is copies[0]


def test_grouped_allreduce_of_many_tensors(hvd):
    # 20000 names in one group: the negotiation walks each group's members once a round (it
    # walked the whole group once per member, and 8000 tensors outlasted the 30 s peer timeout).
    n, r = hvd.size(), hvd.rank()
    ts = [torch.full((1,), float(i % 11 + r)) for i in range(20000)]
    outs = hvd.grouped_allreduce(ts, op=hvd.Sum, name="many")
    for i, o in enumerate(outs):
        assert o.item() == sum(i % 11 + q for q in range(n)), i


@pytest.mark.parametrize("dtype", DTYPES + [torch.bool])
def test_allgather(hvd, dtype):
    n, r = hvd.size(), hvd.rank()
    x = torch.full((r + 1, 2, 3), r % 2 if dtype == torch.bool else r).to(dtype)
    g = hvd.allgather(x)
    assert g.shape == (n * (n + 1) // 2, 2, 3) and g.dtype == dtype
    row = 0
    for q in range(n):
        _exact(g[row:row + q + 1], torch.full((q + 1, 2, 3), q % 2 if dtype == torch.bool
                                              else q).to(dtype))
        row += q + 1
    h = hvd.allgather_async(torch.tensor([r], dtype=dtype if dtype != torch.bool else
                                         torch.int32))
    assert hvd.synchronize(h).tolist() == list(range(n))
    parts = hvd.grouped_allgather([torch.ones(1), torch.zeros(2)])
    assert parts[0].shape == (n,) and parts[1].shape == (2 * n,)


@pytest.mark.parametrize("dtype", DTYPES + [torch.bool])
def test_broadcast(hvd, dtype):
    n, r = hvd.size(), hvd.rank()
    for root in range(n):
        value = (lambda q: q % 2) if dtype == torch.bool else (lambda q: q * 3 + 1)
        x = torch.full((3, 2), value(r)).to(dtype)
        out = hvd.broadcast(x, root)
        _exact(out, torch.full((3, 2), value(root)).to(dtype))
        _exact(x, torch.full((3, 2), value(r)).to(dtype))
        assert hvd.broadcast_(x, root, name="bcast_.%d" % root) is x
        _exact(x, out)
    h = hvd.broadcast_async(torch.tensor([r]), n - 1)
    assert hvd.synchronize(h).item() == n - 1
    y = torch.tensor([r])
    hvd.synchronize(hvd.broadcast_async_(y, 0))
    assert y.item() == 0


@pytest.mark.parametrize("dtype", [torch.int32, torch.float16, torch.bfloat16, torch.float64])
def test_alltoall(hvd, dtype):
    n, r = hvd.size(), hvd.rank()
    x = torch.arange(n).repeat_interleave(3).to(dtype) + 100 * r  # 3 rows for each rank
    out = hvd.alltoall(x)
    assert isinstance(out, torch.Tensor)
    _exact(out, (torch.arange(n) * 100 + r).repeat_interleave(3).to(dtype))
    splits = [q + 1 for q in range(n)]  # q + 1 rows to rank q
    x = torch.cat([torch.full((q + 1, 2), r) for q in range(n)]).to(dtype)
    out, received = hvd.alltoall(x, splits=splits)
    _exact(received, torch.full((n,), r + 1, dtype=torch.int32))
    _exact(out, torch.arange(n).repeat_interleave(r + 1).unsqueeze(1).repeat(1, 2).to(dtype))
    out2, received2 = hvd.synchronize(hvd.alltoall_async(x, torch.tensor(splits)))
    _exact(out2, out)
    _exact(received2, received)
    # As Horovod: splits may cover fewer rows than dim 0; the trailing rows are not sent.
    padded = torch.cat([x, torch.full((2, 2), 99).to(dtype)])
    out3, received3 = hvd.alltoall(padded, splits=splits)
    _exact(out3, out)
    _exact(received3, received)
    with pytest.raises(ValueError, match="more than dimension 0"):
        hvd.alltoall(x, splits=[s + 1 for s in splits])
    with pytest.raises(ValueError, match="splits"):
        hvd.alltoall(x, splits=[-1] * n)
    with pytest.raises(ValueError, match="splits"):
        hvd.alltoall(x, splits=torch.ones(n))


def test_alltoall_result_outlives_its_process_set(hvd):
    # As allgather's and allreduce's: an alltoall that completed in a set stays readable after
    # the set was removed (its received splits were sized from the set at synchronize once).
    n, r = hvd.size(), hvd.rank()
    ps = hvd.add_process_set(list(range(n)))
    h = hvd.alltoall_async(torch.arange(n, dtype=torch.float32) + 10 * r, name="a2a_outlives",
                           process_set=ps)
    hvd.barrier()  # every rank's alltoall is in flight before the removal; it completes first
    hvd.synchronize(hvd.allreduce_async(torch.ones(1), name="a2a_outlives_after"))
    hvd.remove_process_set(ps)
    out, received = hvd.synchronize(h)
    _exact(out, torch.arange(n, dtype=torch.float32) * 10 + r)
    _exact(received, torch.ones(n, dtype=torch.int32))


@pytest.mark.parametrize("dtype", [torch.int64, torch.float16, torch.bfloat16, torch.float32])
def test_reducescatter(hvd, dtype):
    n, r = hvd.size(), hvd.rank()
    rows = 2 * n + 1
    base = torch.arange(rows * 2).reshape(rows, 2) % 7
    x = (base * (r + 1)).to(dtype)
    mine = hvd.reducescatter(x, op=hvd.Sum)
    start = 2 * r + min(r, 1)
    count = 3 if r == 0 else 2
    full = base * (n * (n + 1) // 2)
    _exact(mine, full[start:start + count].to(dtype))
    if dtype.is_floating_point:
        avg = hvd.reducescatter(x)  # default op: Average
        torch.testing.assert_close(avg.double(), full[start:start + count].double() / n,
                                   rtol=1e-2, atol=1e-2)
    h = hvd.reducescatter_async(x, op=hvd.Max)
    _exact(hvd.synchronize(h), (base * n).to(dtype)[start:start + count])
    parts = hvd.grouped_reducescatter([x, x], op=hvd.Sum)
    _exact(parts[1], mine)


def _scaled_ref(xs, pre, post, average, dtype):
    """Horovod's integer scaling: each rank's input times prescale in float64, truncated
    toward zero (a C conversion); the sum; times postscale (divided by the set size for
    Average) in float64, truncated again."""
    total = sum(torch.trunc(x.double() * pre) for x in xs)
    factor = post / len(xs) if average else post
    return torch.trunc(total * factor).to(dtype)


@pytest.mark.parametrize("dtype", [torch.int8, torch.int32, torch.int64, torch.uint8])
def test_integer_scaling_truncates_toward_zero(hvd, dtype):
    """Average and pre/postscale on integers truncate toward zero as Horovod does (rounding
    would give e.g. 2 for 3 * 0.5 and -2 for -3 * 0.5), for allreduce, reducescatter and
    grouped_reducescatter."""
    n, r = hvd.size(), hvd.rank()
    signed = dtype != torch.uint8
    base = torch.tensor([-7, -5, -3, -1, 0, 1, 2, 3, 5, 7, 9, 11]) if signed else \
        torch.tensor([0, 1, 2, 3, 5, 7, 9, 11, 13, 15, 17, 19])
    # Offsets q*q (+1) make every case below land between integers on 2 and 3 ranks, where
    # rounding and truncation differ.
    xs = [(base + q * q + 1 if signed else base + q * q).to(dtype).reshape(6, 2)
          for q in range(n)]
    x = xs[r]
    cases = [(hvd.Average, 1.0, 1.0), (hvd.Sum, 0.5, 1.0), (hvd.Sum, 1.0, 0.75),
             (hvd.Average, 0.5, 3.0), (hvd.Sum, 0.3, 1.5)]
    start = [0] + [6 // n * q + min(q, 6 % n) for q in range(1, n + 1)]
    mine = slice(start[r], start[r + 1])
    for op, pre, post in cases:
        want = _scaled_ref(xs, pre, post, op == hvd.Average, dtype)
        got = hvd.allreduce(x, op=op, prescale_factor=pre, postscale_factor=post)
        _exact(got, want)
        got = hvd.reducescatter(x, op=op, prescale_factor=pre, postscale_factor=post)
        _exact(got, want[mine])
        parts = hvd.grouped_reducescatter([x, x[:, :1].contiguous()], op=op,
                                          prescale_factor=pre, postscale_factor=post)
        _exact(parts[0], want[mine])
        _exact(parts[1], want[mine, :1])
    # Average's factor is postscale / size, as Horovod computes it, not postscale * (1 / size):
    # on 3 ranks 3c * (7 * (1/3)) is just below 7c and would truncate to 7c - 1.
    c = torch.arange(-6, 7).to(dtype) if signed else torch.arange(0, 13).to(dtype)
    _exact(hvd.allreduce(c, op=hvd.Average, postscale_factor=7.0), c * 7)
    _exact(hvd.reducescatter(c.repeat(n), op=hvd.Average, postscale_factor=7.0), c * 7)
    # The rule itself, independent of the reference above: 3 * 0.5 -> 1, -3 * 0.5 -> -1.
    if signed:
        got = hvd.allreduce(torch.tensor([3, -3], dtype=dtype), op=hvd.Sum,
                            prescale_factor=0.5, postscale_factor=1.0 / n)
        _exact(got, torch.tensor([1, -1], dtype=dtype))


def test_errors_on_every_rank_then_continue(hvd):
    n, r = hvd.size(), hvd.rank()
    if n > 1:
        with pytest.raises(hvd.KoloInternalError) as info:
            hvd.allreduce(torch.ones(2 + r), name="shape_mismatch")
        assert "shape_mismatch" in str(info.value)
        with pytest.raises(hvd.HorovodInternalError) as info:
            hvd.allreduce(torch.ones(3, dtype=torch.float32 if r == 0 else torch.float64),
                          name="dtype_mismatch")
        assert "dtype_mismatch" in str(info.value)
        with pytest.raises(RuntimeError) as info:
            hvd.broadcast(torch.ones(3), root_rank=r, name="root_mismatch")
        assert "root_mismatch" in str(info.value)
        with pytest.raises(hvd.KoloInternalError):
            hvd.allgather(torch.ones(2, 1 + r), name="gather_mismatch")
    # Bad arguments fail at call time with ValueError.
    with pytest.raises(ValueError, match="not supported"):
        hvd.allreduce(torch.ones(2, dtype=torch.complex64))
    with pytest.raises(ValueError, match="adasum"):  # Adasum: float tensors only
        hvd.allreduce(torch.ones(2, dtype=torch.int32), op=hvd.Adasum)
    with pytest.raises(ValueError, match="sparse"):
        hvd.allgather(torch.ones(2, 2).to_sparse())
    # The runtime keeps working.
    _exact(hvd.allreduce(torch.ones(3), op=hvd.Sum), torch.full((3,), float(n)))


def test_duplicate_name_in_flight(hvd):
    """Rank 0 submits 'dup' and submits it again; the other ranks submit it only after a
    broadcast that rank 0 sends after its second try, so the first op is still in flight when
    the second is checked, whatever the scheduling (a 0.3 s sleep on the others made it only
    likely). As in test_parity.py's _duplicate_is_refused."""
    n, r = hvd.size(), hvd.rank()
    if n == 1:
        pytest.skip("one rank: the first op may complete at once")  # same on every rank
    x = torch.ones(4)
    if r == 0:
        h = hvd.allreduce_async(x, name="dup", op=hvd.Sum)
        with pytest.raises(ValueError, match="dup"):
            hvd.allreduce_async(x, name="dup", op=hvd.Sum)
        hvd.broadcast(torch.zeros(1), 0, name="dup_go")
    else:
        hvd.broadcast(torch.zeros(1), 0, name="dup_go")
        h = hvd.allreduce_async(x, name="dup", op=hvd.Sum)
    _exact(hvd.synchronize(h), torch.full((4,), float(n)))
    # Once synchronized, the name is free again.
    _exact(hvd.allreduce(x, name="dup", op=hvd.Sum), torch.full((4,), float(n)))


def test_join_and_barrier(hvd):
    n, r = hvd.size(), hvd.rank()
    hvd.barrier()
    for i in range(r + 1):
        out = hvd.allreduce(torch.ones(5), op=hvd.Sum, name="join_torch.%d" % i)
        _exact(out, torch.full((5,), float(n - i)))
    assert hvd.join() == n - 1
    assert hvd.join(device=-1) in range(n)
    hvd.barrier()


def test_process_sets(hvd):
    n, r = hvd.size(), hvd.rank()
    evens = hvd.ProcessSet([q for q in range(n) if q % 2 == 0])
    odds = hvd.ProcessSet([q for q in range(n) if q % 2 == 1])
    hvd.add_process_set(evens)
    if odds.ranks:
        hvd.add_process_set(odds)
    mine = evens if r % 2 == 0 else odds
    assert mine.included() and mine.rank() == mine.ranks.index(r)
    total = hvd.allreduce(torch.tensor([float(r)]), op=hvd.Sum, process_set=mine)
    assert total.item() == sum(mine.ranks)
    g = hvd.allgather(torch.tensor([r]), process_set=mine)
    assert g.tolist() == mine.ranks
    for root in mine.ranks:  # roots are GLOBAL ranks, as in Horovod
        b = hvd.broadcast(torch.tensor([r * 10]), root, process_set=mine)
        assert b.item() == root * 10
    out = hvd.alltoall(torch.full((len(mine.ranks),), r), process_set=mine)
    assert out.tolist() == mine.ranks
    rs = hvd.reducescatter(torch.ones(len(mine.ranks), 2), op=hvd.Sum, process_set=mine)
    _exact(rs, torch.full((1, 2), float(len(mine.ranks))))
    hvd.barrier(process_set=mine)
    hvd.barrier()
    hvd.remove_process_set(evens)
    if odds.ranks:
        hvd.remove_process_set(odds)
    assert evens.process_set_id is None
    # Sets registered at init-time style: a list of sets, then the ids are fresh.
    again = hvd.add_process_set(list(range(n)))
    assert again.size() == n
    hvd.remove_process_set(again)


def test_a_name_with_a_lone_surrogate_works_on_every_rank(hvd):
    # os.fsdecode gives such names for undecodable bytes; encoding them failed on the submitting
    # rank only (UnicodeEncodeError), and the others waited for the op
    out = hvd.allreduce(torch.ones(2), name="file\udc80name", op=hvd.Sum)
    _exact(out, torch.full((2,), float(hvd.size())))
