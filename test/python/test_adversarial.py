# SPDX-License-Identifier: Apache-2.0
"""kolo.torch driven the way a Horovod user gets it wrong, at 2 and 3 ranks: process sets (ops on
a set this rank is not in, a set removed with an op in flight, registrations the ranks disagree
on, dynamic sets, one name in flight in overlapping sets), names (automatic names in a different
order per rank), join with every collective and inside sets, mismatches between ranks (dtype,
shape, op, scales, compression, root, splits, first and trailing dims), one rank's bad argument
(every rank fails at once, the bad one naming itself), empty and 0-dim tensors, in-place ops on
views, handles, broadcast_object / allgather_object with large and odd objects.

Every case here fails at once on every rank: none waits for the stall shutdown, so a regression
that makes one hang shows as a stall error (KOLO_STALL_SHUTDOWN_TIME_SECONDS, 60 s under CTest)
and a failed test, and each test ends by checking that the job still runs collectives."""

import re
import threading
import time

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed for this interpreter")


def _exact(a, b):
    assert a.dtype == b.dtype, (a.dtype, b.dtype)
    assert a.shape == b.shape, (a.shape, b.shape)
    assert torch.equal(a, b), (a, b)


def _still_works(hvd):
    """The job goes on: a collective over every rank gives the right answer."""
    n = hvd.size()
    assert hvd.allreduce(torch.ones(3), op=hvd.Sum).tolist() == [float(n)] * 3


# ---- process sets -------------------------------------------------------------------------------
def test_ops_on_a_set_this_rank_is_not_in_fail_here_and_run_there(hvd):
    """Every collective (and barrier) on a set without this rank raises ValueError at once on
    this rank, naming the op and the rank; the set's member gets its result."""
    r = hvd.rank()
    ps = hvd.add_process_set([0])
    try:
        calls = {
            "allreduce": lambda: hvd.allreduce(torch.ones(2), name="out", process_set=ps),
            "grouped_allreduce": lambda: hvd.grouped_allreduce([torch.ones(2)], name="out",
                                                               process_set=ps),
            "allgather": lambda: hvd.allgather(torch.ones(2), name="out", process_set=ps),
            "broadcast": lambda: hvd.broadcast(torch.ones(2), 0, name="out", process_set=ps),
            "alltoall": lambda: hvd.alltoall(torch.ones(2), name="out", process_set=ps),
            "reducescatter": lambda: hvd.reducescatter(torch.ones(2), name="out",
                                                       process_set=ps),
            "barrier": lambda: hvd.barrier(process_set=ps),
        }
        for op, call in calls.items():
            if r == 0:
                call()
            else:
                with pytest.raises(ValueError, match="on rank %d: this rank is not a member of "
                                   "process set %d" % (r, ps.process_set_id)):
                    call()
        assert (ps.size(), ps.rank(), ps.included()) == ((1, 0, True) if r == 0
                                                         else (1, -1, False))
    finally:
        assert hvd.remove_process_set(ps)
    _still_works(hvd)


def test_removing_a_set_fails_the_op_only_one_rank_started_in_it(hvd):
    """Rank 0 starts an op in a set, the others never do; every rank removes the set: rank 0's
    op fails at once saying the set was removed (it does not wait for the others until the
    stall shutdown), and the name is free again."""
    n, r = hvd.size(), hvd.rank()
    ps = hvd.add_process_set(list(range(n)))
    h = hvd.allreduce_async(torch.ones(2), name="orphan", process_set=ps) if r == 0 else None
    sid = ps.process_set_id
    assert hvd.remove_process_set(ps)
    if h is not None:
        with pytest.raises(hvd.HorovodInternalError,
                           match="'allreduce.orphan' in process set %d: process set %d was "
                                 "removed" % (sid, sid)):
            hvd.synchronize(h)
    with pytest.raises(ValueError, match="not registered"):
        hvd.allreduce(torch.ones(2), name="orphan", process_set=ps)
    assert hvd.allreduce(torch.ones(2), op=hvd.Sum, name="orphan").tolist() == [float(n)] * 2
    _still_works(hvd)


def test_removing_a_set_whose_op_every_rank_started(hvd):
    """Every member started the op before the removal: it completes with the right result or
    fails saying the set was removed; it never hangs."""
    n, r = hvd.size(), hvd.rank()
    ps = hvd.add_process_set(list(range(n)))
    h = hvd.allreduce_async(torch.full((2,), float(r)), op=hvd.Sum, name="late", process_set=ps)
    assert hvd.remove_process_set(ps)
    try:
        assert hvd.synchronize(h).tolist() == [float(sum(range(n)))] * 2
    except hvd.HorovodInternalError as e:
        assert "was removed" in str(e), e
    _still_works(hvd)


def test_set_registration_errors_are_raised_on_every_rank(hvd):
    n, r = hvd.size(), hvd.rank()
    # The ranks pass different lists: every rank is told what each sent; nothing is added.
    with pytest.raises(hvd.HorovodInternalError, match=r"rank 0 sent ranks \[0\], rank 1 sent "
                       r"\[0, 1\]"):
        hvd.add_process_set([0] if r == 0 else [0, 1])
    ps = hvd.add_process_set([0, 1])
    try:
        with pytest.raises(ValueError, match=r"ranks \[0, 1\] already exists"):
            hvd.add_process_set([1, 0])
        with pytest.raises(ValueError, match=r"rank %d is outside \[0, %d\)" % (n, n)):
            hvd.add_process_set([0, n])
        with pytest.raises(ValueError, match="already registered"):
            hvd.add_process_set(ps)
    finally:
        assert hvd.remove_process_set(ps)
    assert not hvd.remove_process_set(ps)  # already removed: False, as Horovod
    assert not hvd.remove_process_set(hvd.global_process_set)
    with pytest.raises(ValueError, match="not registered"):
        hvd.broadcast(torch.ones(1), 0, process_set=ps)
    _still_works(hvd)


def test_dynamic_sets_added_and_removed_in_a_loop(hvd):
    """HOROVOD_DYNAMIC_PROCESS_SETS style: sets come and go; ids are never reused, the same
    explicit name works in each new set, and automatic names count per set."""
    n, r = hvd.size(), hvd.rank()
    hvd.init(process_sets="dynamic")  # already initialized: a no-op, as in Horovod
    seen = []
    for round_ in range(4):
        ranks = [q for q in range(n) if q != round_ % n]
        ps = hvd.add_process_set(ranks)
        seen.append(ps.process_set_id)
        try:
            if r in ranks:
                out = hvd.allreduce(torch.tensor([float(r)]), op=hvd.Sum, name="dyn",
                                    process_set=ps)
                assert out.item() == float(sum(ranks))
                got = hvd.allgather(torch.tensor([r]), process_set=ps)  # automatic name
                assert got.tolist() == ranks
        finally:
            assert hvd.remove_process_set(ps)
    assert seen == sorted(set(seen)), seen
    _still_works(hvd)


def test_one_name_in_flight_in_overlapping_sets_and_the_global_set(hvd):
    """The same name at once in the global set and in two overlapping sets that share rank 1:
    three ops, three results."""
    n, r = hvd.size(), hvd.rank()
    a = hvd.add_process_set([0, 1])
    b = hvd.add_process_set(list(range(1, n)))
    try:
        hs = [("world", hvd.allreduce_async(torch.tensor([1.0]), op=hvd.Sum, name="same"))]
        if r in a.ranks:
            hs.append(("a", hvd.allreduce_async(torch.tensor([10.0]), op=hvd.Sum, name="same",
                                                process_set=a)))
        if r in b.ranks:
            hs.append(("b", hvd.allreduce_async(torch.tensor([100.0]), op=hvd.Sum, name="same",
                                                process_set=b)))
        want = {"world": float(n), "a": 20.0, "b": 100.0 * len(b.ranks)}
        for which, h in reversed(hs):
            assert hvd.synchronize(h).item() == want[which], which
    finally:
        hvd.remove_process_set(b)
        hvd.remove_process_set(a)
    _still_works(hvd)


# ---- names --------------------------------------------------------------------------------------
def test_automatic_names_issued_in_another_order_fail_at_once(hvd):
    """Async ops with automatic names pair up by issue order: shapes issued in another order
    on rank 0 are a mismatch named on every rank (not a hang), and the counters stay in step
    for the ops after."""
    r = hvd.rank()
    shapes = [(2,), (3,)] if r == 0 else [(3,), (2,)]
    hs = [hvd.allreduce_async(torch.ones(s)) for s in shapes]
    for h in hs:
        with pytest.raises(hvd.HorovodInternalError,
                           match=r"'allreduce\.noname\.\d+': rank 0 sent shape \[\d\], rank 1 "
                                 r"sent \[\d\]"):
            hvd.synchronize(h)
    hs = [hvd.allreduce_async(torch.full((2,), float(i)), op=hvd.Sum) for i in range(3)]
    assert [hvd.synchronize(h).tolist() for h in hs] == [[float(i * hvd.size())] * 2
                                                         for i in range(3)]


def test_bad_names_name_the_op_and_the_rank(hvd):
    n, r = hvd.size(), hvd.rank()
    h = hvd.allreduce_async(torch.ones(1), op=hvd.Sum, name="twice") if r == 0 else None
    if r == 0:  # the others have not submitted it: it is still in flight here
        with pytest.raises(ValueError, match="allreduce 'allreduce.twice' on rank 0: "
                                             "DUPLICATE_NAME: .*already in flight"):
            hvd.allreduce_async(torch.ones(1), op=hvd.Sum, name="twice")
    hvd.barrier()
    if r != 0:
        h = hvd.allreduce_async(torch.ones(1), op=hvd.Sum, name="twice")
    assert hvd.synchronize(h).item() == float(n)
    for bad, what in [("", "empty"), ("a\0b", "NUL"), ("x" * 1100, "longer than"),
                      (5, "str or None")]:
        with pytest.raises(ValueError, match="allreduce on rank %d: name .*%s" % (r, what)):
            hvd.allreduce(torch.ones(1), name=bad)
    _still_works(hvd)


# ---- join ---------------------------------------------------------------------------------------
def test_join_with_every_collective(hvd):
    """Rank 0 joins. The others' allreduces count it as zeros (Min/Max/Product: the op's
    identity, so their result does not change); allgather, broadcast, alltoall and
    reducescatter fail at once naming the joined rank (Horovod supports allreduce only);
    join returns the same last rank everywhere."""
    n, r = hvd.size(), hvd.rank()
    if r == 0:
        last = hvd.join()
    else:
        x = torch.tensor([float(r), -float(r)])
        others = [float(q) for q in range(1, n)]
        assert hvd.allreduce(x, op=hvd.Sum, name="j.sum").tolist() == [sum(others),
                                                                        -sum(others)]
        assert hvd.allreduce(x, op=hvd.Average, name="j.avg").tolist() == [
            sum(others) / n, -sum(others) / n]
        assert hvd.allreduce(x, op=hvd.Min, name="j.min").tolist() == [1.0, -float(n - 1)]
        assert hvd.allreduce(x, op=hvd.Max, name="j.max").tolist() == [float(n - 1), -1.0]
        i8 = torch.tensor([-r, 2], dtype=torch.int8)
        _exact(hvd.allreduce(i8, op=hvd.Max, name="j.i8"), torch.tensor([-1, 2],
                                                                          dtype=torch.int8))
        _exact(hvd.allreduce(torch.full((2,), 2, dtype=torch.uint8), op=hvd.Product,
                             name="j.u8"), torch.full((2,), 2 ** (n - 1), dtype=torch.uint8))
        out = hvd.grouped_allreduce([torch.ones(2), torch.ones(1, dtype=torch.float64)],
                                    op=hvd.Sum, name="j.grp")
        assert [t.tolist() for t in out] == [[float(n - 1)] * 2, [float(n - 1)]]
        refused = {
            "allgather": lambda: hvd.allgather(torch.ones(1), name="j.ag"),
            "broadcast": lambda: hvd.broadcast(torch.ones(1), 1, name="j.bc"),
            "alltoall": lambda: hvd.alltoall(torch.ones(n), name="j.a2a"),
            "reducescatter": lambda: hvd.reducescatter(torch.ones(n), name="j.rs"),
        }
        for op, call in refused.items():
            with pytest.raises(hvd.HorovodInternalError,
                               match="%s '%s.j.*' is not allowed while rank 0 has joined"
                                     % (op, op)):
                call()
        hvd.barrier()
        last = hvd.join()
    assert last in range(1, n), last
    assert hvd.allgather(torch.tensor([last])).tolist() == [last] * n
    _still_works(hvd)


def test_join_returns_the_rank_that_joined_last(hvd):
    """The last rank waits, in an allreduce, until all the others joined (it completes only
    then: the others never submit it), then joins: join returns it on every rank."""
    n, r = hvd.size(), hvd.rank()
    for last in (n - 1, 0):
        if r == last:
            assert hvd.allreduce(torch.ones(1), op=hvd.Sum, name="wait.%d" % last).item() == 1.0
        assert hvd.join() == last
    _still_works(hvd)


def test_join_with_process_sets(hvd):
    """A set without the joined rank runs every collective; a set with it counts zeros in its
    allreduce and refuses allgather."""
    n, r = hvd.size(), hvd.rank()
    joined = n - 1
    rest = hvd.add_process_set(list(range(n - 1)))
    pair = hvd.add_process_set([0, joined])
    try:
        if r == joined:
            assert hvd.join() in range(n)
        else:
            k = len(rest.ranks)
            assert hvd.allgather(torch.tensor([r]), name="js", process_set=rest).tolist() == \
                rest.ranks
            assert hvd.broadcast(torch.tensor([r]), 0, name="js", process_set=rest).item() == 0
            assert hvd.alltoall(torch.full((k,), r), name="js",
                                process_set=rest).tolist() == rest.ranks
            if r == 0:
                out = hvd.allreduce(torch.tensor([4.0]), name="js", process_set=pair)
                assert out.item() == 2.0  # Average over both members: the joined one gave 0
                with pytest.raises(hvd.HorovodInternalError,
                                   match="not allowed while rank %d has joined" % joined):
                    hvd.allgather(torch.ones(1), name="js", process_set=pair)
            assert hvd.join() in range(n)
    finally:
        hvd.remove_process_set(pair)
        hvd.remove_process_set(rest)
    _still_works(hvd)


# ---- mismatches between ranks ----------------------------------------------------------------
_T = torch
MISMATCHES = [
    # (id, rank 0's call, the others' call, full name, what the error says)
    ("dtype", lambda h: h.allreduce(_T.ones(2), name="m"),
     lambda h: h.allreduce(_T.ones(2, dtype=_T.float64), name="m"), "allreduce.m",
     "rank 0 sent dtype float32, rank 1 sent float64"),
    ("int8_uint8", lambda h: h.allreduce(_T.ones(2, dtype=_T.int8), name="m"),
     lambda h: h.allreduce(_T.ones(2, dtype=_T.uint8), name="m"), "allreduce.m",
     "rank 0 sent dtype int8, rank 1 sent uint8"),
    ("bool_f16", lambda h: h.allreduce(_T.ones(2, dtype=_T.bool), name="m"),
     lambda h: h.allreduce(_T.ones(2, dtype=_T.float16), name="m"), "allreduce.m",
     "rank 0 sent dtype bool, rank 1 sent float16"),
    ("bf16_int64", lambda h: h.broadcast(_T.ones(2, dtype=_T.bfloat16), 0, name="m"),
     lambda h: h.broadcast(_T.ones(2, dtype=_T.int64), 0, name="m"), "broadcast.m",
     "rank 0 sent dtype bfloat16, rank 1 sent int64"),
    ("shape", lambda h: h.allreduce(_T.ones(2), name="m"),
     lambda h: h.allreduce(_T.ones(2, 1), name="m"), "allreduce.m",
     r"rank 0 sent shape \[2\], rank 1 sent \[2, 1\]"),
    ("scalar_vs_1", lambda h: h.allreduce(_T.tensor(1.0), name="m"),
     lambda h: h.allreduce(_T.ones(1), name="m"), "allreduce.m",
     r"rank 0 sent shape \[\], rank 1 sent \[1\]"),
    ("op", lambda h: h.allreduce(_T.ones(2), op=h.Sum, name="m"),
     lambda h: h.allreduce(_T.ones(2), op=h.Average, name="m"), "allreduce.m",
     "rank 0 sent reduce op sum, rank 1 sent average"),
    ("prescale", lambda h: h.allreduce(_T.ones(2), prescale_factor=2.0, name="m"),
     lambda h: h.allreduce(_T.ones(2), prescale_factor=3.0, name="m"), "allreduce.m",
     "rank 0 sent prescale 2, rank 1 sent prescale 3"),
    ("postscale", lambda h: h.reducescatter(_T.ones(6), postscale_factor=0.5, name="m"),
     lambda h: h.reducescatter(_T.ones(6), name="m"), "reducescatter.m",
     "rank 0 sent postscale 0.5, rank 1 sent postscale 1"),
    ("compression", lambda h: h.allreduce(_T.ones(2), compression=h.Compression.fp16, name="m"),
     lambda h: h.allreduce(_T.ones(2), name="m"), "allreduce.m",
     "rank 0 sent dtype float16, rank 1 sent float32"),
    ("root_rank", lambda h: h.broadcast(_T.ones(2), 0, name="m"),
     lambda h: h.broadcast(_T.ones(2), 1, name="m"), "broadcast.m",
     "rank 0 sent root 0, rank 1 sent root 1"),
    ("allgather_trailing", lambda h: h.allgather(_T.ones(2, 3), name="m"),
     lambda h: h.allgather(_T.ones(2, 4), name="m"), "allgather.m",
     r"rank 0 sent shape \[2, 3\], rank 1 sent \[2, 4\]"),
    ("allgather_ndim", lambda h: h.allgather(_T.ones(2, 3), name="m"),
     lambda h: h.allgather(_T.ones(2, 3, 1), name="m"), "allgather.m",
     r"rank 0 sent shape \[2, 3\], rank 1 sent \[2, 3, 1\]"),
    ("alltoall_trailing", lambda h: h.alltoall(_T.ones(h.size(), 2), name="m"),
     lambda h: h.alltoall(_T.ones(h.size(), 3), name="m"), "alltoall.m",
     r"rank 0 sent shape \[\d, 2\], rank 1 sent \[\d, 3\]"),
    ("alltoall_split_count", lambda h: h.alltoall(_T.ones(4), splits=[4] + [0] * h.size(),
                                                  name="m"),
     lambda h: h.alltoall(_T.ones(4), splits=[4] + [0] * (h.size() - 1), name="m"), "alltoall.m",
     r"(rank 0 could not submit it: )?.*splits for a (process )?set of \d ranks"),
    ("reducescatter_first_dim", lambda h: h.reducescatter(_T.ones(3, 2), name="m"),
     lambda h: h.reducescatter(_T.ones(4, 2), name="m"), "reducescatter.m",
     r"rank 0 sent shape \[3, 2\], rank 1 sent \[4, 2\]"),
    ("reducescatter_op", lambda h: h.reducescatter(_T.ones(6), op=h.Sum, name="m"),
     lambda h: h.reducescatter(_T.ones(6), op=h.Min, name="m"), "reducescatter.m",
     "rank 0 sent reduce op sum, rank 1 sent min"),
    ("grouped_count", lambda h: h.grouped_allreduce([_T.ones(1)], name="m"),
     lambda h: h.grouped_allreduce([_T.ones(1), _T.ones(1)], name="m"),
     "grouped_allreduce.m.0", "rank 0 sent group size 1, rank 1 sent group size 2"),
]


@pytest.mark.parametrize("case", MISMATCHES, ids=[c[0] for c in MISMATCHES])
def test_mismatch_between_ranks_fails_at_once_on_every_rank(hvd, case):
    """Rank 0 passes something the others do not: every rank raises at once, and the message
    names the op, the ranks and what differs; the same name then works again."""
    _, mine, theirs, full, text = case
    with pytest.raises((hvd.HorovodInternalError, ValueError)) as info:
        (mine if hvd.rank() == 0 else theirs)(hvd)
    msg = str(info.value)
    assert "'%s'" % full in msg, msg
    assert re.search(text, msg), msg
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum, name="m").item() == float(hvd.size())


def test_different_op_types_under_one_user_name_are_different_ops(hvd):
    """An allreduce and an allgather may share a user name (Horovod prefixes the op type)."""
    n, r = hvd.size(), hvd.rank()
    h1 = hvd.allreduce_async(torch.ones(1), op=hvd.Sum, name="both")
    h2 = hvd.allgather_async(torch.tensor([r]), name="both")
    h3 = hvd.broadcast_async(torch.tensor([r]), n - 1, name="both")
    assert hvd.synchronize(h3).item() == n - 1
    assert hvd.synchronize(h2).tolist() == list(range(n))
    assert hvd.synchronize(h1).item() == float(n)


# ---- one rank's bad argument ------------------------------------------------------------------
def _sparse(h, op):
    return h.synchronize(h.sparse_allreduce_async(_T.ones(2).to_sparse(), name="b", op=op))


REFUSALS = [
    # (id, rank 0's call, the others' call, the op's full name, rank 0's error type and text)
    ("complex", lambda h: h.allreduce(_T.ones(2, dtype=_T.complex64), name="b"),
     lambda h: h.allreduce(_T.ones(2), name="b"), "allreduce.b", ValueError,
     "complex64 is not supported"),
    ("not_a_tensor", lambda h: h.allreduce([1.0, 2.0], name="b"),
     lambda h: h.allreduce(_T.ones(2), name="b"), "allreduce.b", ValueError,
     "expected a torch.Tensor; got list"),
    ("fp16_not_a_tensor", lambda h: h.allreduce([1.0], name="b",
                                                compression=h.Compression.fp16),
     lambda h: h.allreduce(_T.ones(1), name="b", compression=h.Compression.fp16),
     "allreduce.b", ValueError, "expected a torch.Tensor"),
    ("allgather_not_a_tensor", lambda h: h.allgather((1, 2), name="b"),
     lambda h: h.allgather(_T.ones(2), name="b"), "allgather.b", ValueError,
     "expected a torch.Tensor; got tuple"),
    ("op", lambda h: h.allreduce(_T.ones(2), op=99, name="b"),
     lambda h: h.allreduce(_T.ones(2), name="b"), "allreduce.b", ValueError, "op must be one of"),
    ("op_and_average", lambda h: h.allreduce(_T.ones(2), op=h.Sum, average=True, name="b"),
     lambda h: h.allreduce(_T.ones(2), name="b"), "allreduce.b", ValueError,
     "op parameter supersedes average"),
    ("scale_str", lambda h: h.allreduce(_T.ones(2), prescale_factor="2", name="b"),
     lambda h: h.allreduce(_T.ones(2), prescale_factor=2, name="b"), "allreduce.b", ValueError,
     "prescale_factor must be a number"),
    ("scale_huge", lambda h: h.allreduce(_T.ones(2), postscale_factor=10 ** 400, name="b"),
     lambda h: h.allreduce(_T.ones(2), name="b"), "allreduce.b", ValueError,
     "postscale_factor is too large for a float"),
    ("scale_nan", lambda h: h.allreduce(_T.ones(2), prescale_factor=float("nan"), name="b"),
     lambda h: h.allreduce(_T.ones(2), name="b"), "allreduce.b", ValueError, "finite"),
    ("inplace_expanded", lambda h: h.allreduce_(_T.ones(1).expand(3), name="b"),
     lambda h: h.allreduce_(_T.ones(3), name="b"), "allreduce.b", ValueError,
     "expanded view"),
    ("int_adasum", lambda h: h.allreduce(_T.ones(2, dtype=_T.int32), op=h.Adasum, name="b"),
     lambda h: h.allreduce(_T.ones(2, dtype=_T.int32), op=h.Sum, name="b"), "allreduce.b",
     ValueError, "op adasum needs a float"),
    ("reducescatter_adasum", lambda h: h.reducescatter(_T.ones(6), op=h.Adasum, name="b"),
     lambda h: h.reducescatter(_T.ones(6), name="b"), "reducescatter.b", RuntimeError,
     "does not support op=Adasum"),
    ("root_float", lambda h: h.broadcast(_T.ones(2), 0.7, name="b"),
     lambda h: h.broadcast(_T.ones(2), 0, name="b"), "broadcast.b", ValueError,
     "root_rank must be an int; got 0.7"),
    ("root_beyond_int32", lambda h: h.broadcast(_T.ones(2), 2 ** 32, name="b"),
     lambda h: h.broadcast(_T.ones(2), 0, name="b"), "broadcast.b", ValueError,
     "root_rank 4294967296 is outside"),
    ("root_out_of_range", lambda h: h.broadcast_(_T.ones(2), h.size(), name="b"),
     lambda h: h.broadcast_(_T.ones(2), 0, name="b"), "broadcast.b", ValueError,
     "root .* is outside"),
    ("splits_negative", lambda h: h.alltoall(_T.ones(2), splits=[-1, 3] + [0] * (h.size() - 2),
                                             name="b"),
     lambda h: h.alltoall(_T.ones(2), splits=[2] + [0] * (h.size() - 1), name="b"),
     "alltoall.b", ValueError, "splits must be >= 0"),
    ("splits_float", lambda h: h.alltoall(_T.ones(2), splits=_T.ones(h.size()), name="b"),
     lambda h: h.alltoall(_T.ones(2), splits=[2] + [0] * (h.size() - 1), name="b"),
     "alltoall.b", ValueError, "splits must be a 1-D integer tensor"),
    ("splits_too_many_rows", lambda h: h.alltoall(_T.ones(2), splits=[3] + [0] * (h.size() - 1),
                                                  name="b"),
     lambda h: h.alltoall(_T.ones(2), splits=[2] + [0] * (h.size() - 1), name="b"),
     "alltoall.b", ValueError, "more than dimension 0"),
    ("alltoall_uneven", lambda h: h.alltoall(_T.ones(h.size() + 1), name="b"),
     lambda h: h.alltoall(_T.ones(h.size()), name="b"), "alltoall.b", ValueError,
     "not divisible"),
    ("allgather_scalar", lambda h: h.allgather(_T.tensor(1.0), name="b"),
     lambda h: h.allgather(_T.ones(1), name="b"), "allgather.b", ValueError, "scalar"),
    ("grouped_empty", lambda h: h.grouped_allreduce([], name="b"),
     lambda h: h.grouped_allreduce([_T.ones(1)], name="b"), "grouped_allreduce.b.0", ValueError,
     "needs at least one tensor"),
    ("grouped_member", lambda h: h.grouped_allreduce([_T.ones(1), "x"], name="b"),
     lambda h: h.grouped_allreduce([_T.ones(1), _T.ones(1)], name="b"), "grouped_allreduce.b.0",
     ValueError, "expected a torch.Tensor; got str"),
    ("grouped_allgather_member",
     lambda h: h.synchronize(h.grouped_allgather_async(
         [_T.ones(1), _T.ones(1, dtype=_T.complex64), _T.ones(1)], name="b")),
     lambda h: h.synchronize(h.grouped_allgather_async([_T.ones(1)] * 3, name="b")),
     "allgather.b.1", ValueError, "complex64"),
    ("grouped_reducescatter_member",
     lambda h: h.synchronize(h.grouped_reducescatter_async(
         [_T.ones(6), [1], _T.ones(6)], name="b")),
     lambda h: h.synchronize(h.grouped_reducescatter_async([_T.ones(6)] * 3, name="b")),
     "reducescatter.b.1", ValueError, "expected a torch.Tensor; got list"),
    ("sparse_op", lambda h: _sparse(h, h.Max), lambda h: _sparse(h, h.Sum),
     "allgather.b.indices", ValueError, "supports op=Average or Sum"),
]


@pytest.mark.parametrize("case", REFUSALS, ids=[c[0] for c in REFUSALS])
def test_one_ranks_bad_argument_fails_every_rank_at_once(hvd, case):
    """Only rank 0's argument is bad: rank 0 raises at once naming the op, itself and the
    fault; the others' copies fail at once naming rank 0 (not after the stall shutdown); the
    same call then works on every rank (nothing of the failed op is left in flight)."""
    cid, mine, theirs, full, bad_type, text = case
    if cid == "sparse_op":
        bad_full = "sparse_allreduce 'b'"
    else:
        bad_full = None
    r = hvd.rank()
    with pytest.raises(Exception) as info:
        (mine if r == 0 else theirs)(hvd)
    msg = str(info.value)
    if r == 0:
        assert isinstance(info.value, bad_type), (type(info.value), msg)
        where = bad_full or "'%s" % full.split(".")[0]
        assert where in msg and "on rank 0" in msg, msg
        assert re.search(text, msg), msg
    else:
        assert isinstance(info.value, hvd.HorovodInternalError), (type(info.value), msg)
        # refused by rank 0, or (a scalar, a root out of range) a mismatch the negotiation names
        assert re.search(r"'%s': rank 0 (could not submit it|sent )" % re.escape(full),
                         msg), msg
    # Once every rank is past the failed op (a refusal is settled when the others submit their
    # copies, so a retry straight away may still find it pending on rank 0: kolo.h), the same
    # names work everywhere: nothing of the failed op is left in flight.
    hvd.barrier()
    theirs(hvd)
    _still_works(hvd)


def test_abandoned_members_are_released(hvd):
    """The members a grouped allgather had started before its bad member are not leaked: once
    done, the next op releases them."""
    from kolo import common

    r = hvd.rank()
    before = common.pending_count()
    for i in range(3):
        members = [torch.ones(1), torch.ones(1, dtype=torch.complex64) if r == 0
                   else torch.ones(1)]
        with pytest.raises((ValueError, hvd.HorovodInternalError), match="leak%d.1" % i):
            hvd.synchronize(hvd.grouped_allgather_async(members, name="leak%d" % i))
    _still_works(hvd)  # an op's start releases the abandoned members that are done
    assert common.pending_count() == before
    deadline = time.monotonic() + 30  # a member still running on a loaded machine: wait for it
    while common._abandoned and time.monotonic() < deadline:
        time.sleep(0.01)
        common._sweep_abandoned()
    assert not common._abandoned, common._abandoned


# ---- tensors: empty, 0-dim, views, dtypes ------------------------------------------------------
def test_empty_and_scalar_tensors(hvd):
    n, r = hvd.size(), hvd.rank()
    assert hvd.allreduce(torch.ones(0, 3), name="e").shape == (0, 3)
    assert hvd.allreduce_(torch.ones(0), name="e_").shape == (0,)
    assert hvd.allgather(torch.ones(0, 3), name="e").shape == (0, 3)
    assert hvd.broadcast(torch.ones(0), 0, name="e").shape == (0,)
    assert hvd.alltoall(torch.ones(0), name="e").shape == (0,)
    assert hvd.reducescatter(torch.ones(0, 2), name="e").shape == (0, 2)
    out = hvd.grouped_allreduce([torch.ones(0), torch.ones(2)], op=hvd.Sum, name="e")
    assert out[0].shape == (0,) and out[1].tolist() == [float(n)] * 2
    _exact(hvd.allreduce(torch.tensor(float(r)), op=hvd.Sum, name="s"),
           torch.tensor(float(sum(range(n)))))
    _exact(hvd.broadcast(torch.tensor(r), n - 1, name="s"), torch.tensor(n - 1))
    # only rank 0 has rows: the gather is its rows; the empty ranks' rows are none
    rows = torch.full((2, 3), float(r)) if r == 0 else torch.ones(0, 3)
    _exact(hvd.allgather(rows, name="e0"), torch.zeros(2, 3))
    for op, call in [("allgather", lambda: hvd.allgather(torch.tensor(1.0), name="s")),
                     ("alltoall", lambda: hvd.alltoall(torch.tensor(1.0), name="s")),
                     ("reducescatter", lambda: hvd.reducescatter(torch.tensor(1.0), name="s"))]:
        with pytest.raises(ValueError, match="%s '%s.s' on rank %d: a scalar" % (op, op, r)):
            call()
    _still_works(hvd)


def test_uneven_first_dims(hvd):
    n, r = hvd.size(), hvd.rank()
    got = hvd.allgather(torch.full((r + 1, 2), r, dtype=torch.int64), name="u")
    _exact(got, torch.cat([torch.full((q + 1, 2), q, dtype=torch.int64) for q in range(n)]))
    # reducescatter of n + 1 rows: rank 0 gets two, the others one
    rows = n + 1
    got = hvd.reducescatter(torch.arange(rows * 2, dtype=torch.float32).reshape(rows, 2),
                            op=hvd.Sum, name="u")
    start = 0 if r == 0 else r + 1
    stop = 2 if r == 0 else r + 2
    _exact(got, n * torch.arange(rows * 2, dtype=torch.float32).reshape(rows, 2)[start:stop])
    # alltoall with splits summing to less than dim 0: the trailing rows are not sent
    out, recv = hvd.alltoall(torch.full((n + 2,), r), splits=[1] * n, name="u")
    assert out.tolist() == list(range(n)) and recv.tolist() == [1] * n


def test_inplace_ops_on_views_write_back(hvd):
    n, r = hvd.size(), hvd.rank()
    base = torch.arange(12.0).reshape(3, 4) + r
    view = base.t()  # not contiguous
    assert hvd.allreduce_(view, op=hvd.Sum, name="v") is view
    total = sum(torch.arange(12.0).reshape(3, 4) + q for q in range(n))
    _exact(base, total)
    strided = torch.zeros(3, 4)
    cols = strided[:, ::2]
    cols.fill_(float(r))
    hvd.broadcast_(cols, n - 1, name="v")
    _exact(strided[:, ::2], torch.full((3, 2), float(n - 1)))
    _exact(strided[:, 1::2], torch.zeros(3, 2))  # the other columns untouched
    a, b = torch.ones(2) * r, (torch.ones(4) * r).reshape(2, 2).t()
    out = hvd.grouped_allreduce_([a, b], op=hvd.Max, name="v")
    assert out[0] is a and out[1] is b
    assert a.tolist() == [float(n - 1)] * 2 and b.flatten().tolist() == [float(n - 1)] * 4
    leaf = torch.ones(3, requires_grad=True)  # a parameter: in place, without autograd
    hvd.allreduce_(leaf, op=hvd.Sum, name="leaf")
    assert leaf.requires_grad and leaf.detach().tolist() == [float(n)] * 3
    y = hvd.allreduce(torch.ones(2, requires_grad=True) * 2, op=hvd.Sum, name="rg")
    assert y.requires_grad
    y.sum().backward()


# ---- handles ------------------------------------------------------------------------------------
def test_handles_after_use_and_after_failure(hvd):
    r = hvd.rank()
    h = hvd.allreduce_async(torch.ones(1), op=hvd.Sum, name="h")
    assert hvd.synchronize(h).item() == float(hvd.size())
    assert hvd.synchronize(h) is None  # consumed: None, as horovod.torch
    with pytest.raises(ValueError, match="unknown handle"):
        hvd.poll(h)
    with pytest.raises(ValueError, match="unknown handle"):
        hvd.poll(10 ** 9)
    # a failed op: poll says done, synchronize raises, once
    h = hvd.allreduce_async(torch.ones(2 + (r == 0)), name="hf")
    while not hvd.poll(h):
        time.sleep(0.01)
    with pytest.raises(hvd.HorovodInternalError, match="'allreduce.hf': rank 0 sent shape"):
        hvd.synchronize(h)
    assert hvd.synchronize(h) is None
    # two threads synchronize one handle: one gets the tensor, the other None
    h = hvd.allreduce_async(torch.ones(1), op=hvd.Sum, name="h2")
    got = []
    threads = [threading.Thread(target=lambda: got.append(hvd.synchronize(h)))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(g is None for g in got) == [False, True], got
    _still_works(hvd)


# ---- objects ------------------------------------------------------------------------------------
class _Unpicklable:
    def __reduce__(self):
        raise TypeError("this object refuses to be pickled")


def test_broadcast_object_and_allgather_object_odd_objects(hvd):
    n, r = hvd.size(), hvd.rank()
    big = {"blob": bytes(range(256)) * 40000, "rank": r}  # ~10 MB
    got = hvd.broadcast_object(big if r == n - 1 else None, n - 1)
    assert got["rank"] == n - 1 and got["blob"] == big["blob"]
    assert hvd.broadcast_object(lambda x: x + r, 0)(10) == 10  # cloudpickle: by value
    assert hvd.broadcast_object(None, 0) is None
    assert hvd.allgather_object(None) == [None] * n
    sizes = [len(s) for s in hvd.allgather_object("y" * (100000 * r))]
    assert sizes == [100000 * q for q in range(n)]
    with pytest.raises((TypeError, hvd.HorovodInternalError)) as info:
        hvd.broadcast_object(_Unpicklable() if r == 0 else 1, 0)
    if r == 0:
        assert "refuses to be pickled" in str(info.value)
    else:
        assert "root rank 0 could not serialize its object" in str(info.value)
    with pytest.raises((TypeError, hvd.HorovodInternalError)) as info:
        hvd.allgather_object(_Unpicklable() if r == n - 1 else r)
    if r != n - 1:
        assert r"rank(s) [%d] could not serialize" % (n - 1) in str(info.value)
    _still_works(hvd)


def test_object_calls_on_a_removed_set_leave_the_name_counters_alone(hvd):
    """broadcast_object / allgather_object on a removed set raise ValueError before drawing an
    automatic name: only rank 0 makes the mistake here, and the ranks' next automatic names
    still agree (they did not: rank 0 drew a global name, and the next call stalled)."""
    n, r = hvd.size(), hvd.rank()
    ps = hvd.add_process_set(list(range(n)))
    assert hvd.remove_process_set(ps)
    if r == 0:
        with pytest.raises(ValueError, match="not registered"):
            hvd.broadcast_object("x", 0, process_set=ps)
        with pytest.raises(ValueError, match="not registered"):
            hvd.allgather_object("x", process_set=ps)
    assert hvd.broadcast_object("root %d" % r, 0) == "root 0"
    assert hvd.allgather_object(r) == list(range(n))
