# SPDX-License-Identifier: Apache-2.0
"""Bad input through the Python front ends (kolo with numpy arrays, kolo.torch), one process.

Every bad call must raise the documented exception (ValueError for arguments the runtime
rejects on the calling thread) with a message naming what is wrong, and the runtime must stay
usable: each test ends with a correct, checked allreduce. The number of bad inputs tried is
printed at the end of the session.

Run: /usr/bin/python3 -m pytest -q test/fault/test_python_bad_input.py
(KOLO_PYTHON_PACKAGE: the folder holding the kolo package, default bindings/python;
KOLO_LIBRARY: libkolo.so, found by the package itself when unset.)
"""

import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, os.pardir, os.pardir))
sys.path.insert(0, os.environ.get("KOLO_PYTHON_PACKAGE") or os.path.join(REPO, "bindings",
                                                                         "python"))
for name in list(os.environ):  # a job of one: no launcher settings leak in
    if name.startswith(("KOLO_", "HOROVOD_")) and name not in ("KOLO_LIBRARY",
                                                                "KOLO_PYTHON_PACKAGE"):
        del os.environ[name]

import faultlib as fl  # noqa: E402
import kolo  # noqa: E402


class _Counter:
    """Bad inputs tried, reported by conftest.py at the end of the session."""

    def __getitem__(self, _):
        return fl.BAD_INPUTS.get("python_bad_input", 0)

    def __setitem__(self, _, value):
        fl.BAD_INPUTS["python_bad_input"] = value


TRIED = _Counter()


@pytest.fixture
def session():
    kolo.init()
    yield
    usable()
    kolo.shutdown()


def bad(exc, needles, fn, *args, **kwargs):
    """One bad input: fn(*args, **kwargs) must raise `exc` with every needle in its message."""
    TRIED[0] += 1
    with pytest.raises(exc) as info:
        fn(*args, **kwargs)
    for n in needles:
        assert n in str(info.value), "%r not in %r" % (n, str(info.value))
    return info.value


def usable():
    """A correct op: in a job of one, the sum is the input itself."""
    x = np.array([3, -7, 11, 42], dtype=np.int32)
    out = kolo.allreduce(x, op=kolo.Sum, name="usable")
    assert out.dtype == np.int32 and out.tolist() == [3, -7, 11, 42]


def test_names(session):
    x = np.ones(4, dtype=np.float32)
    bad(ValueError, ["longer than 1024 bytes"], kolo.allreduce, x, name="n" * 1025)
    bad(ValueError, ["longer than 1024 bytes"], kolo.allreduce, x, name="n" * (1 << 20))
    # The front end prefixes the op type ("allreduce.<name>"), so the user's share of the
    # runtime's 1024 bytes is a little smaller.
    assert kolo.allreduce(x, name="n" * 1000, op=kolo.Sum).tolist() == [1.0] * 4
    bad((ValueError, TypeError), [], kolo.allreduce, x, name=12345)
    bad(ValueError, ["NUL"], kolo.allreduce, x, name="a\0b")
    usable()


def test_ops_dtypes_and_scales(session):
    x = np.ones(4, dtype=np.float32)
    for op in (42, -1, "sum", 7.5):
        bad(ValueError, ["op must be one of", repr(op)], kolo.allreduce, x, op=op)
    bad(ValueError, ["adasum", "int32"], kolo.allreduce, x.astype(np.int32), op=kolo.Adasum)
    bad(RuntimeError, ["reducescatter", "Adasum"], kolo.reducescatter, x, op=kolo.Adasum)
    for arr in (np.ones(3, dtype=np.complex64), np.array(["a", "b"]),
                np.array([object(), object()], dtype=object), np.ones(3, dtype=np.uint32)):
        bad(ValueError, [str(arr.dtype), "not supported"], kolo.allreduce, arr, op=kolo.Sum)
    for scale in (float("nan"), float("inf")):
        bad(ValueError, ["scale factors must be finite"], kolo.allreduce, x,
            prescale_factor=scale)
        bad(ValueError, ["scale factors must be finite"], kolo.allreduce, x,
            postscale_factor=scale)
    usable()


def test_shapes_and_splits(session):
    scalar = np.array(5.0, dtype=np.float32)
    bad(ValueError, ["scalar"], kolo.allgather, scalar)
    bad(ValueError, ["scalar"], kolo.alltoall, scalar)
    bad(ValueError, ["scalar"], kolo.reducescatter, scalar)
    assert kolo.allreduce(scalar, op=kolo.Max).tolist() == 5.0  # allowed
    x = np.arange(8, dtype=np.int64)
    bad(ValueError, ["splits sum to 9", "more than dimension 0 (8)"], kolo.alltoall, x, splits=[9])
    assert kolo.alltoall(x, splits=[5])[0].tolist() == [0, 1, 2, 3, 4]  # fewer rows: allowed
    bad(ValueError, ["got 2 splits"], kolo.alltoall, x, splits=[4, 4])
    bad(ValueError, [">= 0", "-1"], kolo.alltoall, x, splits=[-1])
    for root in (-1, 1, 2 ** 31):
        bad((ValueError, OverflowError), [], kolo.broadcast, x, root_rank=root)
    empty = np.zeros((0, 3), dtype=np.float32)
    assert kolo.allgather(empty).shape == (0, 3)  # allowed
    ro = np.ones(4, dtype=np.float32)
    ro.flags.writeable = False
    bad(ValueError, ["read-only"], kolo.allreduce_, ro)
    strided = np.arange(16, dtype=np.int32)[::2]  # not contiguous: must still be right
    assert kolo.allreduce(strided, op=kolo.Sum).tolist() == list(range(0, 16, 2))
    usable()


def test_handles(session):
    for h in (0, -1, 123456789, 2 ** 62):
        bad(ValueError, ["unknown handle %d" % h], kolo.poll, h)
    h = kolo.allreduce_async(np.ones(2, dtype=np.float64), op=kolo.Sum, name="once")
    assert kolo.synchronize(h).tolist() == [1.0, 1.0]
    bad(ValueError, ["unknown handle"], kolo.poll, h)  # already consumed
    usable()


def test_synchronize_unknown_handle(session):
    """As horovod.torch.synchronize (`if handle not in _handle_map: return`): an unknown, forged
    or already synchronized handle returns None without raising (poll raises, above), and the
    runtime stays usable."""
    for h in (0, -1, 123456789, 2 ** 62):
        TRIED[0] += 1
        assert kolo.synchronize(h) is None
    h = kolo.allreduce_async(np.ones(2, dtype=np.float64), op=kolo.Sum, name="twice")
    assert kolo.synchronize(h).tolist() == [1.0, 1.0]
    TRIED[0] += 1
    assert kolo.synchronize(h) is None  # already consumed
    usable()


def test_process_sets(session):
    bad(ValueError, ["outside"], kolo.add_process_set, [5])
    bad(ValueError, [], kolo.add_process_set, [0, 0])
    bad(ValueError, [], kolo.add_process_set, [])
    assert kolo.remove_process_set(kolo.global_process_set) is False  # as Horovod
    usable()


def test_lifecycle_and_environment():
    x = np.ones(2, dtype=np.float32)
    bad(ValueError, ["not been initialized"], kolo.allreduce, x)
    kolo.init()
    kolo.init()  # twice: a no-op
    TRIED[0] += 1
    usable()
    kolo.shutdown()
    kolo.shutdown()
    TRIED[0] += 1
    bad(ValueError, ["not been initialized"], kolo.allreduce, x)
    for var, value in (("KOLO_FUSION_THRESHOLD", "lots"), ("KOLO_CYCLE_TIME", "-1"),
                       ("KOLO_TIMEOUT_SECONDS", "0"), ("KOLO_CONTROLLER", "pigeon"),
                       ("HOROVOD_CACHE_CAPACITY", "x"), ("KOLO_LOG_LEVEL", "loud")):
        os.environ[var] = value
        try:
            err = bad(Exception, [var, value], kolo.init)
        finally:
            del os.environ[var]
        assert not kolo.is_initialized(), err
    kolo.init()
    usable()
    kolo.shutdown()


def test_torch_front_end(session):
    torch = pytest.importorskip("torch")
    import kolo.torch as hvd
    t = torch.ones(4)
    bad(ValueError, ["longer than 1024 bytes"], hvd.allreduce, t, name="t" * 2000)
    bad((ValueError, TypeError), ["complex"], hvd.allreduce, torch.ones(3, dtype=torch.complex64))
    bad(ValueError, ["scalar"], hvd.allgather, torch.tensor(3.0))
    bad(ValueError, ["splits sum to 9"], hvd.alltoall, torch.arange(8), splits=torch.tensor([9]))
    bad((ValueError, TypeError), [], hvd.allreduce, t, op=99)
    bad((ValueError, OverflowError), [], hvd.broadcast, t, root_rank=3)
    bad(ValueError, ["allreduce", "expanded view"], hvd.allreduce_, torch.ones(1).expand(4))
    assert hvd.allreduce(torch.ones(1).expand(4), op=hvd.Sum).tolist() == [1.0] * 4  # allowed
    nc = torch.arange(12, dtype=torch.float32).reshape(3, 4).t()  # not contiguous
    assert torch.equal(hvd.allreduce(nc, op=hvd.Sum), nc)
    usable()
