# SPDX-License-Identifier: Apache-2.0
"""Horovod parity, at 2 and 3 ranks: an op's name is scoped to its process set (the same name in
two sets is two ops, for every collective, through negotiation, the response cache and the
timeline); join with allreduce for every first-joining rank, with and without the names in the
response cache, for integer and floating dtypes; a barrier is an op of its own and does not wait
for the rank's other pending ops (global and per set), and a barrier a joined rank was excused
from does not shift that rank's later barriers."""

import json
import os
import tempfile

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed for this interpreter")


def _exact(a, b):
    assert a.dtype == b.dtype, (a.dtype, b.dtype)
    assert torch.equal(a, b), (a, b)


@pytest.fixture
def halves(hvd):
    """evens and odds as two process sets; this rank's own set first. Removed afterwards."""
    n, r = hvd.size(), hvd.rank()
    evens = hvd.add_process_set([q for q in range(n) if q % 2 == 0])
    odds = hvd.add_process_set([q for q in range(n) if q % 2 == 1])
    yield (evens, odds) if r % 2 == 0 else (odds, evens)
    hvd.remove_process_set(odds)
    hvd.remove_process_set(evens)


def test_same_name_in_two_sets_every_collective(hvd, halves):
    n, r = hvd.size(), hvd.rank()
    mine, _ = halves
    k = len(mine.ranks)
    for _ in range(3):  # the first round negotiates, the later ones go through the cache
        out = hvd.allreduce(torch.tensor([float(r)]), op=hvd.Sum, name="ps", process_set=mine)
        assert out.item() == sum(mine.ranks)
        g = hvd.grouped_allreduce([torch.tensor([float(r)]), torch.ones(2)], op=hvd.Sum,
                                  name="ps", process_set=mine)
        assert g[0].item() == sum(mine.ranks) and g[1].tolist() == [k, k]
        ag = hvd.allgather(torch.tensor([r]), name="ps", process_set=mine)
        assert ag.tolist() == mine.ranks
        b = hvd.broadcast(torch.tensor([r * 10]), mine.ranks[-1], name="ps", process_set=mine)
        assert b.item() == mine.ranks[-1] * 10
        a2a = hvd.alltoall(torch.full((k,), r), name="ps", process_set=mine)
        assert a2a.tolist() == mine.ranks
        rs = hvd.reducescatter(torch.ones(k, 2), op=hvd.Sum, name="ps", process_set=mine)
        _exact(rs, torch.full((1, 2), float(k)))
        hvd.barrier(process_set=mine)
    # The same name in flight at once in the global set and in this rank's set: two ops.
    h_world = hvd.allreduce_async(torch.tensor([1.0]), op=hvd.Sum, name="both")
    h_set = hvd.allreduce_async(torch.tensor([2.0]), op=hvd.Sum, name="both", process_set=mine)
    assert hvd.synchronize(h_set).item() == 2.0 * k
    assert hvd.synchronize(h_world).item() == float(n)
    # Within one set a name in flight twice is still a duplicate (the global set at every count;
    # this rank's set where it has a second member to hold the op pending).
    _duplicate_is_refused(hvd, None, list(range(n)), "already in flight on this rank")
    if k > 1:
        _duplicate_is_refused(hvd, mine, mine.ranks, "already in flight in process set")
    hvd.barrier()


def _duplicate_is_refused(hvd, process_set, ranks, message):
    """The set's first rank submits 'twice' and submits it again; the other members submit it
    only after a broadcast that the first rank sends after its second try. So the op is still
    pending when the second submission is checked, whatever the scheduling (an op of a
    one-rank set may complete at once, which made this check racy)."""
    kw = {} if process_set is None else {"process_set": process_set}
    first = ranks[0]
    if hvd.rank() == first:
        h = hvd.allreduce_async(torch.ones(1), op=hvd.Sum, name="twice", **kw)
        with pytest.raises(ValueError, match=message):
            hvd.allreduce_async(torch.ones(1), op=hvd.Sum, name="twice", **kw)
        hvd.broadcast(torch.zeros(1), first, name="twice_go", **kw)
    else:
        hvd.broadcast(torch.zeros(1), first, name="twice_go", **kw)
        h = hvd.allreduce_async(torch.ones(1), op=hvd.Sum, name="twice", **kw)
    assert hvd.synchronize(h).item() == float(len(ranks))


def test_grouped_allreduce_of_different_lengths_fails_on_every_rank_at_once(hvd):
    """Rank r groups 2 + r tensors: the members the others never send fail with the mismatch
    (before, the longer ranks waited for the stall shutdown, 60 s here: the bound below is that
    hang's detector, not a speed check), and the runtime stays usable."""
    import time
    r = hvd.rank()
    if hvd.size() == 1:
        pytest.skip("one rank: no other group length")  # same on every rank
    start = time.monotonic()
    with pytest.raises(hvd.HorovodInternalError, match="group size 2, rank 1 sent group size 3"):
        hvd.grouped_allreduce([torch.ones(2)] * (2 + r), name="uneven")
    assert time.monotonic() - start < 30
    assert hvd.allreduce(torch.ones(1), name="after_uneven", op=hvd.Sum).item() == hvd.size()


def test_a_repeated_grouped_allreduce_takes_the_response_cache(hvd):
    """Horovod caches grouped responses too: after the first step a grouped allreduce is ready
    from every rank's cache bits, with no requests to rank 0 (it went through full negotiation
    every step, which made grouped_allreduce slower than the same tensors submitted one by
    one). Seen in rank 0's timeline: the per-rank ready ticks of a negotiation appear for the
    first step only. Results stay exact."""
    n, r = hvd.size(), hvd.rank()
    path = os.path.join(tempfile.gettempdir(), "kolo_parity_grp_%d_%d.json" % (os.getppid(), r))
    hvd.barrier()
    hvd.start_timeline(path)
    steps = 4
    for step in range(steps):
        outs = hvd.grouped_allreduce([torch.full((3,), float(r + step)), torch.ones(5)],
                                     op=hvd.Sum, name="cached_group")
        assert outs[0].tolist() == [float(sum(range(n)) + n * step)] * 3
        assert outs[1].tolist() == [float(n)] * 5
    hvd.barrier()
    hvd.stop_timeline()
    hvd.barrier()
    if r == 0:
        with open(path) as f:
            events = json.load(f)["traceEvents"]
        os.remove(path)
        rows = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
        for member in ("grouped_allreduce.cached_group.0", "grouped_allreduce.cached_group.1"):
            tids = [tid for tid, name in rows.items() if name == member]
            assert tids, (member, sorted(rows.values()))
            ticks = [e for e in events if e.get("tid") in tids and e.get("ph") == "X"
                     and e.get("name", "").isdigit()]
            ops = [e for e in events if e.get("tid") in tids and e.get("ph") == "B"
                   and e.get("name") == "ALLREDUCE"]
            assert len(ops) == steps, (member, len(ops))
            # One negotiation (a tick per rank); the later steps came from the cache.
            assert len(ticks) == n, (member, len(ticks))
    elif os.path.exists(path):
        os.remove(path)


def test_set_ops_never_wait_for_ranks_outside_the_set(hvd, halves):
    r = hvd.rank()
    mine, other = halves
    if not other.ranks:
        pytest.skip("one rank: no second set")  # same decision on every rank
    # The other set's ranks are busy elsewhere (they never submit this name): ours completes.
    out = hvd.allreduce(torch.tensor([1.0]), op=hvd.Sum, name="only_mine", process_set=mine)
    assert out.item() == len(mine.ranks)
    hvd.barrier()


def test_timeline_rows_per_set(hvd, halves):
    mine, _ = halves
    path = os.path.join(tempfile.gettempdir(), "kolo_parity_tl_%d_%d.json" % (os.getppid(),
                                                                             hvd.rank()))
    hvd.barrier()
    hvd.start_timeline(path)
    hvd.allreduce(torch.ones(2), name="row", process_set=mine)
    hvd.allreduce(torch.ones(2), name="row")
    hvd.barrier()
    hvd.stop_timeline()
    hvd.barrier()
    if hvd.rank() == 0:
        with open(path) as f:
            events = json.load(f)["traceEvents"]
        rows = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
        assert "allreduce.row" in rows
        assert "allreduce.row@ps%d" % mine.process_set_id in rows
        os.remove(path)


def _trunc_avg(s, n, dtype):
    """Horovod's integer average: the sum times 1/n in float64, truncated toward zero."""
    return (s.double() * (1.0 / n)).trunc().to(dtype)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.float32, torch.float64])
@pytest.mark.parametrize("caching", [False, True])
def test_join_with_allreduce(hvd, dtype, caching):
    n, r = hvd.size(), hvd.rank()
    for dim in (1, 2, 3):
        for first in range(n):
            torch.manual_seed(1234)
            a = torch.randint(-100, 100, [5] * dim).to(dtype)
            b = torch.randint(-100, 100, [17] * dim).to(dtype)
            if caching:  # the names are in the response cache before the join
                ha = hvd.allreduce_async(a, name="tensor_a", op=hvd.Average)
                hb = hvd.allreduce_async(b, name="tensor_b", op=hvd.Average)
                hvd.synchronize(ha)
                hvd.synchronize(hb)
            if r == first:
                last = hvd.join()
            else:
                ha = hvd.allreduce_async(a, name="tensor_a", op=hvd.Average)
                hb = hvd.allreduce_async(b, name="tensor_b", op=hvd.Average)
                avg_a, avg_b = hvd.synchronize(ha), hvd.synchronize(hb)
                last = hvd.join()
                # The joined rank stands in with zeros: the others get sum / size.
                for got, t in ((avg_a, a), (avg_b, b)):
                    if dtype.is_floating_point:
                        torch.testing.assert_close(got, t * (n - 1) / n)
                    else:
                        _exact(got, _trunc_avg(t * (n - 1), n, dtype))
            everyone = hvd.allgather(torch.tensor([last]), name="join_last")
            assert everyone.tolist() == [last] * n  # the same answer on every rank
            if n > 1:
                assert last != first  # the first to join is never the last
            assert 0 <= last < n


@pytest.mark.parametrize("dtype", [torch.int32, torch.float32, torch.float16, torch.bool])
def test_join_min_max_product_ignore_the_joined_rank(hvd, dtype):
    """A joined rank stands in with the op's identity for Min, Max and Product (with zeros, the
    max of negative values was 0 and every product 0), also under a prescale; fused (two
    tensors) and alone."""
    n, r = hvd.size(), hvd.rank()
    if n < 2:
        return
    for first in range(n):
        others = [q for q in range(n) if q != first]
        if r == first:
            hvd.join()
            continue
        values = {q: torch.tensor([-9.0 + q, -3.0 - q, 1.0 + q, 2.0]) for q in others}
        if dtype == torch.bool:
            values = {q: torch.tensor([True, q % 2 == 0, False, True]) for q in others}
        mine = values[r].to(dtype)
        for op, fold in ((hvd.Min, torch.minimum), (hvd.Max, torch.maximum),
                         (hvd.Product, torch.mul)):
            if dtype == torch.bool and op == hvd.Product:
                continue  # torch has no bool product to compare with; Min is the same AND
            expect = values[others[0]].to(dtype)
            for q in others[1:]:
                expect = fold(expect, values[q].to(dtype))
            pre = 2.0 if dtype != torch.bool else 1.0
            hs = [hvd.allreduce_async(mine, name="join_op.%d.%d" % (op, i), op=op,
                                      prescale_factor=pre) for i in range(2)]
            hs.append(hvd.allreduce_async(mine, name="join_op_alone.%d" % op, op=op))
            scale = pre ** (len(others) if op == hvd.Product else 1)
            scaled = (expect.double() * scale).to(dtype) if dtype != torch.bool else expect
            for h, want in zip(hs, (scaled, scaled, expect)):
                _exact(hvd.synchronize(h), want)
        hvd.join()


@pytest.mark.parametrize("in_set", [False, True])
def test_barrier_does_not_wait_for_pending_ops(hvd, in_set):
    n, r = hvd.size(), hvd.rank()
    ps = hvd.add_process_set(list(range(n))) if in_set else None
    kw = {"process_set": ps} if in_set else {}
    if r == 0:
        h = hvd.allreduce_async(torch.ones(3), op=hvd.Sum, name="dup", **kw)
        hvd.barrier(**kw)  # rank 1 submits "dup" only after its barrier
        out = hvd.synchronize(h)
    else:
        hvd.barrier(**kw)
        out = hvd.allreduce(torch.ones(3), op=hvd.Sum, name="dup", **kw)
    _exact(out, torch.full((3,), float(n)))
    hvd.barrier()
    if in_set:
        hvd.remove_process_set(ps)


@pytest.mark.parametrize("in_set", [False, True])
def test_barrier_after_one_a_joined_rank_was_excused_from(hvd, in_set):
    # Rank 0 joins at once; the others pass a barrier without it, then join. Every rank's next
    # barrier must meet the others' (with barriers numbered per rank, rank 0's next one was
    # number 0 and the others' number 1: a hang).
    n, r = hvd.size(), hvd.rank()
    ps = hvd.add_process_set(list(range(n))) if in_set else None
    kw = {"process_set": ps} if in_set else {}
    if r != 0:
        hvd.barrier(**kw)
    hvd.join()
    for _ in range(3):
        hvd.barrier(**kw)
    out = hvd.allreduce(torch.ones(2), op=hvd.Sum, name="after_join_barriers", **kw)
    _exact(out, torch.full((2,), float(n)))
    if in_set:
        hvd.remove_process_set(ps)



def test_process_set_changes_after_one_refused_while_a_rank_had_joined(hvd):
    # Rank 0 joins at once; the others' add_process_set is refused (a joined rank cannot take
    # part), then they join too. The next add and remove on every rank must meet: numbered per
    # rank, the others' next add was number k+1 and rank 0's number k, a hang.
    n, r = hvd.size(), hvd.rank()
    if r != 0:
        with pytest.raises(Exception, match="joined"):
            hvd.add_process_set(list(range(n)))
    hvd.join()
    ps = hvd.add_process_set(list(range(n)))
    out = hvd.allreduce(torch.ones(2), op=hvd.Sum, name="after_refused_add", process_set=ps)
    _exact(out, torch.full((2,), float(n)))
    hvd.remove_process_set(ps)


def test_input_refused_on_one_rank_fails_the_op_on_every_rank(hvd):
    # The last rank passes values only it has wrong (a scalar, bad splits, a root out of range);
    # it gets a ValueError at once, and the op fails on the others too, naming that rank, within
    # the negotiation instead of after the stall timeout (30 minutes by default). Automatic names
    # stay in step: the refused call used one on every rank.
    n, r = hvd.size(), hvd.rank()
    bad = r == n - 1
    cases = [
        (lambda: hvd.allgather(torch.tensor(1.0) if bad else torch.ones(1)), "scalar"),
        (lambda: hvd.reducescatter(torch.tensor(1.0) if bad else torch.ones(n)), "scalar"),
        (lambda: hvd.alltoall(torch.ones(n), splits=[1] * (n + 1) if bad else None), "splits"),
        (lambda: hvd.alltoall(torch.ones(n + 1 if bad else n)), "divisible"),
        (lambda: hvd.broadcast(torch.ones(1), n if bad else 0, name="refused"), "root"),
    ]
    for call, word in cases:
        with pytest.raises((ValueError, RuntimeError)) as info:
            call()
        text = str(info.value)
        if bad:
            assert isinstance(info.value, ValueError) and word in text, text
        else:  # the negotiation's message: a mismatch, or the rank's bad value
            assert "rank %d sent" % (n - 1) in text, text
    assert hvd.allgather(torch.tensor([r])).tolist() == list(range(n))
    assert hvd.alltoall(torch.arange(n)).tolist() == [r] * n
    # A refused call frees its name before it returns (once the others have the op too), so a
    # retry under the same name works on every rank: after every rank refused, and after one did.
    for who in (range(n), [n - 1]):
        with pytest.raises((ValueError, RuntimeError)):
            hvd.allgather(torch.tensor(1.0) if r in who else torch.ones(1), name="retried")
        if len(who) == 1:
            # The others may submit more than the refusal's second later on a loaded machine:
            # once every rank passed this barrier, the agreed error has reached every rank.
            hvd.barrier()
        assert hvd.allgather(torch.tensor([r]), name="retried").tolist() == list(range(n))


def test_input_refused_by_the_bindings_on_one_rank_fails_the_op_on_every_rank(hvd):
    # Checks that kolo.torch makes before the C call (dtype, layout, an expanded in-place view,
    # splits, a root outside the set, Adasum for reducescatter, op= with average=, an empty
    # group) and the C layer's own (a non-finite scale): the last rank gets its exception at
    # once; the op still goes to negotiation refused, so the others fail at once naming that
    # rank (they waited for the stall shutdown before), and the automatic names stay in step.
    n, r = hvd.size(), hvd.rank()
    bad = r == n - 1
    c64 = torch.complex64
    others = hvd.add_process_set([q for q in range(n) if q != 0]) if n > 2 else None
    cases = [
        lambda: hvd.allreduce(torch.ones(2, dtype=c64) if bad else torch.ones(2)),
        lambda: hvd.allreduce(torch.ones(2).to_sparse() if bad else torch.ones(2), name="sp"),
        lambda: hvd.allreduce_(torch.ones(1).expand(4) if bad else torch.ones(4), name="ex"),
        lambda: hvd.allreduce(torch.ones(2), prescale_factor=float("nan") if bad else 1.0),
        lambda: hvd.grouped_allreduce([torch.ones(2), torch.ones(2, dtype=c64 if bad else None)]),
        lambda: hvd.allgather(torch.ones(1, dtype=c64) if bad else torch.ones(1)),
        lambda: hvd.broadcast(torch.ones(2, dtype=c64) if bad else torch.ones(2), 0),
        lambda: hvd.alltoall(torch.ones(n), splits=[-1] + [1] * (n - 1) if bad else None),
        lambda: hvd.reducescatter(torch.ones(n), op=hvd.Adasum if bad else hvd.Sum),
        lambda: hvd.allreduce(torch.ones(2), average=True if bad else None, op=hvd.Sum),
        lambda: hvd.grouped_allreduce([] if bad else [torch.ones(2), torch.ones(3)]),
    ]
    if others is not None:  # rank 0 is not in the set: only a bad rank names it as the root
        cases.append(lambda: hvd.broadcast(torch.ones(1), 0 if bad else 1, name="root",
                                           process_set=others))
    for i, call in enumerate(cases):
        if others is not None and i == len(cases) - 1 and r == 0:
            continue
        with pytest.raises((ValueError, RuntimeError)) as info:
            call()
        text = str(info.value)
        if not bad:
            assert isinstance(info.value, hvd.HorovodInternalError), (i, text)
            assert "rank %d could not submit it" % (n - 1) in text, (i, text)
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == n  # unnamed: still in step
    assert hvd.allgather(torch.tensor([r])).tolist() == list(range(n))
    if others is not None:
        hvd.remove_process_set(others)


def test_an_object_one_rank_cannot_serialize_fails_on_every_rank(hvd):
    import threading
    n, r = hvd.size(), hvd.rank()
    lock = threading.Lock()  # cannot be pickled
    with pytest.raises(Exception) as info:
        hvd.broadcast_object(lock if r == 0 else None, root_rank=0)
    if r != 0:
        assert "root rank 0 could not serialize" in str(info.value)
    with pytest.raises(Exception) as info:
        hvd.allgather_object(lock if r == n - 1 else r)
    if r != n - 1:
        assert "rank(s) [%d] could not serialize" % (n - 1) in str(info.value)
    assert hvd.broadcast_object({"k": r}, root_rank=0) == {"k": 0}
    assert hvd.allgather_object(r) == list(range(n))
