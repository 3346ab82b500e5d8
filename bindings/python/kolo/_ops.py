# SPDX-License-Identifier: Apache-2.0
"""The collectives, written once over an array adapter (numpy arrays or torch tensors).

An adapter provides: describe(x, label) -> _lib.KoloTensor (validates dtype and device; x is
contiguous), contiguous(x), check_writable(x, label), empty_like(x), copy_(dst, src),
from_output(ptr, shape, like) -> a new array holding a copy of the runtime's owned output,
int32_vector(list) and to_int_list(splits).

Outputs whose size is known only after negotiation (allgather, alltoall, reducescatter) are
owned by the C handle (allocator NULL) and copied into a new array by the op's finish function,
before the handle is released. This costs one copy of the output but never calls Python from a
kolo thread (an allocator callback would have to take the GIL on the coordinator thread).

In-place ops on non-contiguous arrays run on a contiguous copy that is copied back when the op
is synchronized. Every array the runtime reads or writes is kept alive in the handle table
until synchronize().

A call whose arguments this rank rejects (an unsupported dtype, a sparse or expanded tensor,
bad splits, a root outside the set) still draws its name and sends the op to negotiation as
refused (kolo_refuse): the caller gets its exception at once, and the other ranks' copies of
the op fail at once too, naming this rank, instead of waiting for it until the stall shutdown.
The automatic name counters stay in step on every rank either way. Only a bad process set or
name, which leave nothing to refuse, raise without it.
"""

import ctypes

from kolo import _lib, common
from kolo import process_sets as _ps

_NO_CB = _lib.NO_CALLBACK
_NO_ALLOC = _lib.NO_ALLOC


def _process_set(process_set):
    ps = _ps.global_process_set if process_set is None else process_set
    return ps, _ps.resolve(ps)


def _encode(name):
    # A lone surrogate (a name made from undecodable bytes, os.fsdecode's) cannot be UTF-8:
    # "surrogatepass" still gives every rank the same bytes, so the op is submitted (or refused)
    # like any other instead of failing here, on this rank only, while the others wait for it.
    return name.encode("utf-8", "surrogatepass")


def _refuse(collective, full, ps_id, error, group_size=0):
    """This rank's own check failed (`error`, which the caller raises next): the op goes to
    negotiation refused, so the other ranks' copies fail at once naming this rank. When even
    that cannot be sent (the runtime is down, the name is in flight) the caller's error is
    still the one to raise, so kolo_refuse's return code is not checked."""
    _lib.lib.kolo_refuse(collective, _encode(full), group_size, ps_id,
                         str(error).encode("utf-8", "replace"))


class Where:
    """Names an op in this rank's errors: "<op> '<full name>' on rank <r>", with " (tensor <i>)"
    for a member of a group. The text (and the rank) is built only when an error is raised, so
    the hot path pays for one small object."""

    __slots__ = ("op", "full", "member")

    def __init__(self, op, full, member=None):
        self.op, self.full, self.member = op, full, member

    def at(self, member):
        return Where(self.op, self.full, member)

    def __str__(self):
        what = "%s %r" % (self.op, self.full)
        if self.member is not None:
            what += " (tensor %d)" % self.member
        rank = _lib.lib.kolo_rank()
        return what if rank < 0 else "%s on rank %d" % (what, rank)


def name_error(error, where):
    """Makes `error` (raised by this rank's own checks) start with `where`, so that it names
    the op, its tensor and this rank whichever check raised it. Returns the reason without
    that prefix (what the other ranks are told, after their own "rank R could not submit
    it")."""
    text = str(error)
    prefix = "%s: " % (where,)
    if text.startswith(prefix):
        return text[len(prefix):]
    if text.startswith("%s %r " % (where.op, where.full)):
        return text  # a group member's check: it names the member and the rank itself
    if len(error.args) == 1 and isinstance(error.args[0], str):
        error.args = (prefix + text,)
    return text


def fail(collective, full, ps_id, error, where, group_size=0):
    """This rank's check of the op's arguments raised `error` (the caller re-raises it): the
    op is refused (_refuse) and the error names the op and this rank (name_error)."""
    _refuse(collective, full, ps_id, name_error(error, where), group_size)


def refuse_rest(op_type, collective, names, process_set, reason):
    """Refuses the ops of one call that this rank will not submit because an earlier op of the
    same call failed here (the members of a grouped allgather or reducescatter after a bad
    tensor, the two allgathers of a sparse allreduce): `names` are their user names, or None
    for automatic names, drawn in order as the other ranks draw them. The other ranks' copies
    fail at once naming this rank instead of waiting for it until the stall shutdown (and a
    retry under the same names works), and the automatic name counters stay in step."""
    try:
        _, ps_id = _process_set(process_set)
    except Exception:  # noqa: BLE001 (a bad set: the caller's error says so, nothing to send)
        return
    for name in names:
        try:
            full = common.names.make(op_type, name, ps_id)
        except ValueError:
            continue  # a name no rank can submit
        _refuse(collective, full, ps_id, reason)


def owned_output(h):
    """(data pointer, shape tuple) of a completed handle's owned output."""
    data = ctypes.c_void_p()
    ndim = ctypes.c_int32(0)
    shape = (ctypes.c_int64 * _lib.MAX_DIMS)()
    rc = _lib.lib.kolo_handle_output(h, ctypes.byref(data), ctypes.byref(ndim), shape)
    common.raise_for_call(rc, "reading the op's output")
    return data.value, tuple(int(shape[i]) for i in range(ndim.value))


def _set_size(ps_id):
    n = ctypes.c_int32(0)
    common.raise_for_call(_lib.lib.kolo_process_set_size(ps_id, ctypes.byref(n)), "process set")
    return n.value


def _start(A, label, submit, finish, keep):
    """common.start, plus the consumer side of device ops: once the op completed, and before
    finish reads or copies anything, A.consume orders the framework's current stream (of the
    op's device) after the op's device work, and marks the arrays in `keep` as used on that
    stream (their memory is not reused before it passes this point). The host does not block
    on the device."""

    def consumed(hs):
        A.consume(hs, keep)
        return finish(hs)

    return common.start(label, submit, consumed, keep)


def _inplace_work(A, tensor, label):
    A.check_writable(tensor, label)
    return A.contiguous(tensor)


def _copy_back(A, tensor, work):
    if work is not tensor:
        A.copy_(tensor, work)
    return tensor


def allreduce_async(A, tensor, inplace, name, op, prescale_factor, postscale_factor,
                    process_set):
    _, ps_id = _process_set(process_set)
    full = common.names.make("allreduce", name, ps_id)
    label = Where("allreduce", full)
    try:
        c_op = common.to_c_op(op)
        pre = common.check_scale(prescale_factor, "prescale_factor")
        post = common.check_scale(postscale_factor, "postscale_factor")
        work = _inplace_work(A, tensor, label) if inplace else A.contiguous(tensor)
        d_in = A.describe(work, label)
        output = None if inplace else A.empty_like(work)
        d_out = A.describe(output, label) if output is not None else None
    except Exception as e:
        fail(_lib.COLL_ALLREDUCE, full, ps_id, e, label)
        raise

    out_ref = ctypes.byref(d_out) if d_out is not None else None

    def submit(hp):
        return _lib.lib.kolo_allreduce_async(_encode(full), ctypes.byref(d_in), out_ref, c_op,
                                             pre, post, ps_id, _NO_CB, None, hp)

    if inplace:
        finish = lambda hs: _copy_back(A, tensor, work)  # noqa: E731
    else:
        finish = lambda hs: output  # noqa: E731
    return _start(A, label, submit, finish, (tensor, work, output, d_in, d_out))


def grouped_allreduce_async(A, tensors, inplace, name, op, prescale_factor, postscale_factor,
                            process_set):
    tensors = list(tensors)
    _, ps_id = _process_set(process_set)
    full = common.names.make("grouped_allreduce", name, ps_id)
    if not tensors:
        # Refused as a group of one: the others' groups fail at once (the group sizes differ),
        # and the name counters stay in step.
        e = ValueError("grouped_allreduce needs at least one tensor")
        fail(_lib.COLL_GROUPED_ALLREDUCE, full, ps_id, e, Where("grouped_allreduce", full), 1)
        raise e
    label = Where("grouped_allreduce", full)
    n = len(tensors)
    try:
        c_op = common.to_c_op(op)
        pre = common.check_scale(prescale_factor, "prescale_factor")
        post = common.check_scale(postscale_factor, "postscale_factor")
        if inplace:
            works = [_inplace_work(A, t, label.at(i)) for i, t in enumerate(tensors)]
        else:
            works = [A.contiguous(t) for t in tensors]
        d_in = [A.describe(w, label.at(i)) for i, w in enumerate(works)]
        c_in = (_lib.KoloTensor * n)(*d_in)
        outputs, d_out, c_out = None, None, None
        if not inplace:
            outputs = [A.empty_like(w) for w in works]
            d_out = [A.describe(o, label.at(i)) for i, o in enumerate(outputs)]
            c_out = (_lib.KoloTensor * n)(*d_out)
    except Exception as e:
        fail(_lib.COLL_GROUPED_ALLREDUCE, full, ps_id, e, label, n)
        raise

    def submit(hp):
        return _lib.lib.kolo_grouped_allreduce_async(
            _encode(full), n, c_in, c_out, c_op, pre, post, ps_id, _NO_CB, None, hp)

    def finish(hs):
        if outputs is not None:
            return outputs
        return [_copy_back(A, t, w) for t, w in zip(tensors, works)]

    keep = (tensors, works, outputs, d_in, d_out, c_in, c_out)
    return _start(A, label, submit, finish, keep)


def allgather_async(A, tensor, name, process_set):
    _, ps_id = _process_set(process_set)
    full = common.names.make("allgather", name, ps_id)
    label = Where("allgather", full)
    try:
        work = A.contiguous(tensor)
        d_in = A.describe(work, label)
    except Exception as e:
        fail(_lib.COLL_ALLGATHER, full, ps_id, e, label)
        raise

    def submit(hp):
        return _lib.lib.kolo_allgather_async(_encode(full), ctypes.byref(d_in), _NO_ALLOC, None,
                                             ps_id, _NO_CB, None, hp)

    def finish(hs):
        ptr, shape = owned_output(hs[0])
        return A.from_output(ptr, shape, work)

    return _start(A, label, submit, finish, (tensor, work, d_in))


def broadcast_async(A, tensor, root_rank, inplace, name, process_set):
    ps, ps_id = _process_set(process_set)
    full = common.names.make("broadcast", name, ps_id)
    label = Where("broadcast", full)
    try:
        root = ps.root_index(root_rank)
        if inplace:
            work = _inplace_work(A, tensor, label)
            result = tensor
        else:
            A.describe(tensor, label)  # its dtype and layout, before the copy
            work = A.empty_like(tensor)
            A.copy_(work, tensor)
            result = work
        d = A.describe(work, label)
    except Exception as e:
        fail(_lib.COLL_BROADCAST, full, ps_id, e, label)
        raise

    def submit(hp):
        return _lib.lib.kolo_broadcast_async(_encode(full), ctypes.byref(d), root, ps_id, _NO_CB,
                                             None, hp)

    def finish(hs):
        return _copy_back(A, tensor, work) if inplace else result

    return _start(A, label, submit, finish, (tensor, work, d))


def alltoall_async(A, tensor, splits, name, process_set):
    """synchronize() of the returned handle gives (output, received_splits)."""
    _, ps_id = _process_set(process_set)
    full = common.names.make("alltoall", name, ps_id)
    label = Where("alltoall", full)
    try:
        split_list = None
        if splits is not None:
            split_list = A.to_int_list(splits)
            if any(s < 0 for s in split_list):
                raise ValueError("%s: splits must be >= 0; got %r" % (label, split_list))
            if any(s > 0x7FFFFFFF for s in split_list):
                raise ValueError("%s: a split does not fit in int32: %r" % (label, split_list))
        work = A.contiguous(tensor)
        d_in = A.describe(work, label)
        c_splits = None
        n_splits = 0
        if split_list is not None:
            n_splits = len(split_list)
            c_splits = (ctypes.c_int32 * max(1, n_splits))(*split_list)
        # the set's size now: its result stays readable once the set is removed or kolo shut
        # down (as allgather's and allreduce's)
        n_set = _set_size(ps_id)
    except Exception as e:
        fail(_lib.COLL_ALLTOALL, full, ps_id, e, label)
        raise

    def submit(hp):
        return _lib.lib.kolo_alltoall_async(_encode(full), ctypes.byref(d_in), c_splits, n_splits,
                                            _NO_ALLOC, None, ps_id, _NO_CB, None, hp)

    def finish(hs):
        ptr, shape = owned_output(hs[0])
        out = A.from_output(ptr, shape, work)
        received = (ctypes.c_int32 * max(1, n_set))()
        rc = _lib.lib.kolo_handle_received_splits(hs[0], received, n_set)
        common.raise_for_call(rc, "alltoall received splits")
        return out, A.int32_vector([received[i] for i in range(n_set)])

    return _start(A, label, submit, finish, (tensor, work, d_in, c_splits))


def reducescatter_async(A, tensor, name, op, prescale_factor, postscale_factor, process_set):
    _, ps_id = _process_set(process_set)
    full = common.names.make("reducescatter", name, ps_id)
    label = Where("reducescatter", full)
    try:
        common.reject_adasum(op, "reducescatter")
        c_op = common.to_c_op(op)
        pre = common.check_scale(prescale_factor, "prescale_factor")
        post = common.check_scale(postscale_factor, "postscale_factor")
        work = A.contiguous(tensor)
        d_in = A.describe(work, label)
    except Exception as e:
        fail(_lib.COLL_REDUCESCATTER, full, ps_id, e, label)
        raise

    def submit(hp):
        return _lib.lib.kolo_reducescatter_async(_encode(full), ctypes.byref(d_in), c_op, pre,
                                                 post, _NO_ALLOC, None, ps_id, _NO_CB, None, hp)

    def finish(hs):
        ptr, shape = owned_output(hs[0])
        return A.from_output(ptr, shape, work)

    return _start(A, label, submit, finish, (tensor, work, d_in))


def barrier(process_set=None):
    """Blocks until every rank of the set called barrier()."""
    _, ps_id = _process_set(process_set)

    def submit(hp):
        return _lib.lib.kolo_barrier_async(ps_id, _NO_CB, None, hp)

    common.synchronize(common.start("barrier", submit))


def join():
    """Blocks until every rank joined; returns the last rank to join (the same everywhere)."""

    def submit(hp):
        return _lib.lib.kolo_join_async(_NO_CB, None, hp)

    def finish(hs):
        last = ctypes.c_int32(-1)
        common.raise_for_call(_lib.lib.kolo_handle_join_result(hs[0], ctypes.byref(last)),
                              "join result")
        return last.value

    return common.synchronize(common.start("join", submit, finish))
