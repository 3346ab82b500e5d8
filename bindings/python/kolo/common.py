# SPDX-License-Identifier: Apache-2.0
"""What every kolo front end shares: errors, reduction ops, op names and the handle table.

Error model (DESIGN.md "Errors"): a call that the runtime rejects on the calling thread raises
ValueError for bad arguments (INVALID_ARGUMENT, DUPLICATE_NAME, UNSUPPORTED), NotInitializedError
(both a ValueError and a KoloInternalError, with Horovod's message) before init(), and
KoloInternalError otherwise; an op that fails after it started (a mismatch between ranks, a
lost peer, a timeout, shutdown) raises KoloInternalError from synchronize() with the runtime's
message. KoloInternalError subclasses RuntimeError, as horovod.common.exceptions'
HorovodInternalError does, and is also exported under that name.

Handles: every async op returns a Python int handle. It maps to one or more C handles (a
composite for helpers such as the sparse allreduce) plus the Python objects that must stay
alive while the runtime reads or writes them, and a `finish` function that builds the result
once every C handle completed. Waiting happens in kolo_handle_wait, which releases the GIL, in
slices of WAIT_SLICE_SECONDS so that Ctrl-C is noticed; the runtime's own timeouts (stall
check, peer timeout) bound the total wait.
"""

import ctypes
import itertools
import threading
import warnings

from kolo import _lib

# Reduction ops, with horovod.common.basics' values so code that stored them keeps working.
Average = 0
"""Reduction op: the sum divided by the number of ranks (the default op)."""
Sum = 1
"""Reduction op: the element-wise sum."""
Adasum = 2
"""Reduction op: Adasum, a sum that scales down the parts of the inputs that point the same
way. reducescatter rejects it."""
Min = 3
"""Reduction op: the element-wise minimum."""
Max = 4
"""Reduction op: the element-wise maximum."""
Product = 5
"""Reduction op: the element-wise product."""

_TO_C_OP = {
    Average: _lib.C_AVERAGE,
    Sum: _lib.C_SUM,
    Min: _lib.C_MIN,
    Max: _lib.C_MAX,
    Product: _lib.C_PRODUCT,
    Adasum: _lib.C_ADASUM,
}
_OP_NAMES = {Average: "Average", Sum: "Sum", Adasum: "Adasum", Min: "Min", Max: "Max",
             Product: "Product"}

WAIT_SLICE_SECONDS = 0.5

_VALUE_ERRORS = (_lib.ERR_INVALID_ARGUMENT, _lib.ERR_DUPLICATE_NAME, _lib.ERR_UNSUPPORTED,
                 _lib.ERR_NOT_INITIALIZED)


class KoloInternalError(RuntimeError):
    """A collective failed in the runtime. `status` is the C status code, `status_name` its
    name ("MISMATCH", "PEER_LOST", ...); str(e) is the runtime's message."""

    def __init__(self, message, status=_lib.ERR_INTERNAL):
        super().__init__(message)
        self.status = status
        self.status_name = _lib.status_string(status)


HorovodInternalError = KoloInternalError
"""Horovod's name for KoloInternalError: the same class, so `except` clauses written for
Horovod catch kolo's errors."""

# Horovod's words for a call made before init() (horovod.common.basics raises ValueError with
# exactly this text from rank(), size(), ...); kept verbatim so code that matches it still works.
NOT_INITIALIZED_MESSAGE = "Horovod has not been initialized; use hvd.init()."


class NotInitializedError(ValueError, KoloInternalError):
    """A call made before init() (or after shutdown()). A ValueError, as horovod.common.basics
    raises from rank()/size(); also a HorovodInternalError, as horovod.torch's collectives raise
    when the runtime refuses an op before init, so `except` clauses written for either work."""

    def __init__(self, message):
        KoloInternalError.__init__(self, message, _lib.ERR_NOT_INITIALIZED)


def raise_for_call(rc, what):
    """Raises the exception for a C call rejected on this thread (rc != OK)."""
    if rc == _lib.OK:
        return
    msg = _lib.last_error() or _lib.status_string(rc)
    if rc == _lib.ERR_NOT_INITIALIZED:
        raise NotInitializedError("%s (%s: %s)" % (NOT_INITIALIZED_MESSAGE, what, msg))
    # `what` may name the op and this rank (_ops.Where); the runtime's message often does too.
    where = str(what)
    text = msg if where in msg else "%s: %s" % (where, msg)
    if rc in _VALUE_ERRORS:
        raise ValueError(text)
    raise KoloInternalError(text, rc)


def op_name(op):
    return _OP_NAMES.get(op, repr(op))


def to_c_op(op):
    """Maps a Python reduction op to kolo_reduce_op_t; ValueError for anything else. Adasum is
    accepted here; the runtime allows it for allreduce of float host tensors only."""
    if isinstance(op, _ConflictingOp):
        raise ValueError(op.message)
    if isinstance(op, bool) or op not in _TO_C_OP:
        raise ValueError("op must be one of Average, Sum, Adasum, Min, Max, Product; got %r"
                         % (op,))
    return _TO_C_OP[op]


def reject_adasum(op, what):
    """Horovod's reducescatter refuses Adasum with a RuntimeError (HorovodInternalError)."""
    if op == Adasum:
        raise KoloInternalError("%s does not support op=Adasum (allreduce only)" % what,
                                _lib.ERR_INVALID_ARGUMENT)


class _ConflictingOp:
    """What resolve_op returns for op= together with average=: the op's own argument check
    (to_c_op) raises Horovod's ValueError for it, inside the op's refusal path, so the other
    ranks' copies of the op fail at once too instead of waiting for this rank until the stall
    shutdown."""

    message = "The op parameter supersedes average. Please provide only one of them."

    def __repr__(self):
        return "<op= together with average=>"


def resolve_op(op, average):
    """The collectives' reading of op= and the deprecated average=: Horovod's rule (op wins,
    both is an error), with the error left to the op itself (see _ConflictingOp)."""
    if op is not None and average is not None:
        return _ConflictingOp()
    return handle_average_backwards_compatibility(op, average, stacklevel=4)


def handle_average_backwards_compatibility(op, average, stacklevel=3):
    """Horovod's rule for the deprecated `average=` argument: op wins, both is an error."""
    if op is not None:
        if average is not None:
            raise ValueError(_ConflictingOp.message)
        return op
    if average is not None:
        warnings.warn("Parameter `average` has been replaced with `op` and will be removed",
                      DeprecationWarning, stacklevel=stacklevel)
        return Average if average else Sum
    return Average


def check_scale(value, what):
    if isinstance(value, (bool, str, bytes)):
        raise ValueError("%s must be a number; got %r" % (what, value))
    try:
        return float(value)  # ints, floats, numpy scalars, 0-d tensors
    except OverflowError:  # an int beyond float's range
        raise ValueError("%s is too large for a float: %.40r..." % (what, value)) from None
    except (TypeError, ValueError, RuntimeError):  # RuntimeError: a tensor of several elements
        raise ValueError("%s must be a number; got %r" % (what, value)) from None


# ---- op names ---------------------------------------------------------------------------------
MAX_NAME_BYTES = 1024


class _NameMaker:
    """Builds the runtime name of an op: "<op type>.<name>" (as Horovod does), or
    "<op type>.noname.<n>" with a counter per (op type, process set) when name is None, so
    that ranks issuing the same ops in the same order agree on the names whatever other sets
    they belong to. Counters restart at init(). Thread safe (gradient hooks may run on
    autograd's device threads)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._counters = {}

    def reset(self):
        with self._lock:
            self._counters.clear()

    def make(self, op_type, name, process_set_id=0):
        if name is None:
            with self._lock:
                key = (op_type, process_set_id)
                n = self._counters.get(key, 0)
                self._counters[key] = n + 1
            if process_set_id:
                return "%s.noname.ps%d.%d" % (op_type, process_set_id, n)
            return "%s.noname.%d" % (op_type, n)
        if not isinstance(name, str):
            raise ValueError("%s: name must be a str or None; got %r" % (_where(op_type), name))
        if not name:
            raise ValueError("%s: name must not be empty (use None for an automatic name)"
                             % _where(op_type))
        if "\0" in name:
            raise ValueError("%s: name must not contain NUL characters: %r"
                             % (_where(op_type), name))
        full = "%s.%s" % (op_type, name)
        if len(full.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:  # as _ops._encode
            raise ValueError("%s: name %r is longer than %d bytes"
                             % (_where(op_type), name[:64] + "...", MAX_NAME_BYTES))
        return full


def _where(op_type):
    return "%s on rank %d" % (op_type, _lib.lib.kolo_rank())


names = _NameMaker()


# ---- handles ----------------------------------------------------------------------------------
class _Entry:
    __slots__ = ("c_handles", "finish", "keep", "label")

    def __init__(self, c_handles, finish, keep, label):
        self.c_handles = c_handles
        self.finish = finish
        self.keep = keep
        self.label = label


_table_lock = threading.Lock()
_table = {}
_next_handle = itertools.count(1)
# Entries whose synchronize() was interrupted (Ctrl-C) before the runtime finished with their
# memory: kept alive forever rather than freed under the runtime's feet.
_orphans = []


def start(label, submit, finish=None, keep=None):
    """Runs submit(pointer_to_c_handle) -> rc; on success registers the op and returns its
    Python handle. `finish(c_handles)` builds synchronize()'s result; `keep` holds whatever
    must outlive the op."""
    h = _lib.Handle(0)
    rc = submit(ctypes.byref(h))
    raise_for_call(rc, label)
    return register([h.value], finish, keep, label)


def register(c_handles, finish, keep, label):
    entry = _Entry(list(c_handles), finish, keep, label)
    if _abandoned:
        _sweep_abandoned()
    with _table_lock:
        handle = next(_next_handle)
        _table[handle] = entry
    return handle


def poll(handle):
    """True when the op behind `handle` has completed (successfully or not)."""
    with _table_lock:
        entry = _table.get(handle)
    if entry is None:
        raise ValueError("poll: unknown handle %r (already synchronized?)" % (handle,))
    done = ctypes.c_int(0)
    for h in entry.c_handles:
        raise_for_call(_lib.lib.kolo_handle_poll(h, ctypes.byref(done)), "poll")
        if not done.value:
            return False
    return True


def _status(h):
    """(status, error text) of a C handle; status -1 while running."""
    status = ctypes.c_int(-1)
    text = ctypes.c_char_p()
    rc = _lib.lib.kolo_handle_status(h, ctypes.byref(status), ctypes.byref(text))
    if rc != _lib.OK:
        return rc, _lib.last_error()
    msg = text.value.decode("utf-8", "replace") if text.value else ""
    return status.value, msg


def wait_c_handle(h):
    """Blocks (GIL released) until C handle h completed; returns (status, message)."""
    while True:
        rc = _lib.lib.kolo_handle_wait(h, WAIT_SLICE_SECONDS)
        if rc == _lib.ERR_TIMEOUT:
            status, msg = _status(h)
            if status == -1:
                continue  # still running: wait again (Python signals get a chance here)
            return status, msg
        if rc == _lib.OK:
            return rc, ""
        status, msg = _status(h)
        if status in (-1, _lib.OK):  # the wait itself failed (e.g. an unknown handle)
            return rc, _lib.last_error() or msg
        return status, msg


def synchronize(handle):
    """Waits for the op, releases its C handles and returns its result. Raises
    KoloInternalError with the runtime's message if the op failed. An unknown handle returns
    None, as horovod.torch.synchronize does."""
    with _table_lock:
        entry = _table.pop(handle, None)
    if entry is None:
        return None
    completed = 0
    error = None
    try:
        for h in entry.c_handles:
            status, msg = wait_c_handle(h)
            completed += 1
            if status != _lib.OK and error is None:
                error = KoloInternalError(msg or _lib.status_string(status), status)
        if error is not None:
            raise error
        return entry.finish(entry.c_handles) if entry.finish is not None else None
    finally:
        if completed == len(entry.c_handles):
            for h in entry.c_handles:
                _lib.lib.kolo_handle_release(h)
        else:
            _orphans.append(entry)


# Entries of ops that no caller will synchronize (the members a grouped call had already started
# when a later member failed on this rank): their memory stays alive until the runtime is done
# with them, then register() releases them.
_abandoned = []


def abandon(handles):
    """Forgets started ops whose results nobody will read. Their C handles are released, and
    the objects they keep alive dropped, once they completed (at a later op's start)."""
    with _table_lock:
        for h in handles:
            entry = _table.pop(h, None)
            if entry is not None:
                _abandoned.append(entry)


def _sweep_abandoned():
    with _table_lock:
        entries = list(_abandoned)
    done = ctypes.c_int(0)
    finished = []
    for entry in entries:
        for h in entry.c_handles:
            rc = _lib.lib.kolo_handle_poll(h, ctypes.byref(done))
            if rc == _lib.OK and not done.value:
                break  # still running (an unknown handle, after a shutdown, counts as done)
        else:
            finished.append(entry)
    if not finished:
        return
    for entry in finished:
        for h in entry.c_handles:
            _lib.lib.kolo_handle_release(h)
    with _table_lock:
        _abandoned[:] = [e for e in _abandoned if all(e is not f for f in finished)]


def combine(handles, finish, label):
    """Merges already started ops into one handle whose result is finish(list of results)."""
    with _table_lock:
        entries = [_table.pop(h, None) for h in handles]
        missing = [h for h, e in zip(handles, entries) if e is None]
        if missing:
            for h, e in zip(handles, entries):
                if e is not None:
                    _table[h] = e
            raise ValueError("%s: unknown handles %r" % (label, missing))

    def finish_all(c_handles):
        results = [e.finish(e.c_handles) if e.finish is not None else None for e in entries]
        return finish(results)

    c_handles = [h for e in entries for h in e.c_handles]
    return register(c_handles, finish_all, entries, label)


def pending_count():
    with _table_lock:
        return len(_table)
