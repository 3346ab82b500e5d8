# SPDX-License-Identifier: Apache-2.0
"""Collectives on numpy arrays (CPU), with the same names and arguments as kolo.torch.

Supported dtypes: uint8, int8, uint16, int16, int32, int64, float16, float32, float64, bool,
and bfloat16 when an extension dtype named "bfloat16" (ml_dtypes) is used. Out-of-place ops
accept anything np.asarray() accepts; in-place ops (the trailing-underscore ones) need a
writeable ndarray. Handles are shared with kolo.torch: kolo.synchronize() works on either.
"""

import ctypes

import numpy as np

from kolo import _lib, _ops, common
from kolo.common import Average
from kolo.process_sets import global_process_set

_DTYPES = {
    np.dtype(np.uint8): _lib.UINT8,
    np.dtype(np.int8): _lib.INT8,
    np.dtype(np.uint16): _lib.UINT16,
    np.dtype(np.int16): _lib.INT16,
    np.dtype(np.int32): _lib.INT32,
    np.dtype(np.int64): _lib.INT64,
    np.dtype(np.float16): _lib.FLOAT16,
    np.dtype(np.float32): _lib.FLOAT32,
    np.dtype(np.float64): _lib.FLOAT64,
    np.dtype(np.bool_): _lib.BOOL,
}


def _dtype_code(dtype, label):
    dtype = np.dtype(dtype)
    if not dtype.isnative:
        raise ValueError("%s: non-native byte order %s is not supported" % (label, dtype))
    code = _DTYPES.get(dtype)
    if code is None and dtype.name == "bfloat16" and dtype.itemsize == 2:
        code = _lib.BFLOAT16
    if code is None:
        raise ValueError("%s: numpy dtype %s is not supported by kolo" % (label, dtype))
    return code


class NumpyAdapter:
    """The array adapter of kolo._ops for numpy arrays."""

    @staticmethod
    def describe(x, label):
        code = _dtype_code(x.dtype, label)
        if x.ndim > _lib.MAX_DIMS:
            raise ValueError("%s: %d dimensions (kolo supports up to %d)"
                             % (label, x.ndim, _lib.MAX_DIMS))
        t = _lib.KoloTensor()
        t.data = x.ctypes.data if x.size else None
        t.dtype = code
        t.ndim = x.ndim
        t.shape = _lib.shape_array(x.shape)
        t.device = _lib.CPU_DEVICE
        t.stream = None
        return t

    @staticmethod
    def consume(c_handles, keep):
        """Host arrays: the data is ready once the op completed."""

    @staticmethod
    def contiguous(x):
        if not isinstance(x, np.ndarray):
            x = np.asarray(x)
        return x if x.flags.c_contiguous else np.ascontiguousarray(x)

    @staticmethod
    def check_writable(x, label):
        if not isinstance(x, np.ndarray):
            raise ValueError("%s: in-place ops need a numpy.ndarray; got %s" % (label, type(x)))
        if not x.flags.writeable:
            raise ValueError("%s: the array is read-only" % label)

    @staticmethod
    def empty_like(x):
        return np.empty(np.shape(x), dtype=np.asarray(x).dtype)

    @staticmethod
    def copy_(dst, src):
        np.copyto(dst, src)

    @staticmethod
    def from_output(ptr, shape, like):
        out = np.empty(shape, dtype=like.dtype)
        if out.nbytes:
            ctypes.memmove(out.ctypes.data, ptr, out.nbytes)
        return out

    @staticmethod
    def int32_vector(values):
        return np.asarray(values, dtype=np.int32)

    @staticmethod
    def to_int_list(splits):
        arr = np.asarray(splits)
        if arr.ndim != 1 or not (arr.size == 0 or np.issubdtype(arr.dtype, np.integer)):
            raise ValueError("splits must be a 1-D sequence of ints; got %r" % (splits,))
        return [int(s) for s in arr]


_A = NumpyAdapter


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Starts allreduce() and returns at once.

    Takes the same arguments as allreduce().

    Returns:
        handle (int): synchronize(handle) waits and returns the new array; poll(handle) tells
            whether it is done.
    """
    op = common.resolve_op(op, average)
    return _ops.allreduce_async(_A, tensor, False, name, op, prescale_factor, postscale_factor,
                                process_set)


def allreduce(tensor, average=None, name=None, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set):
    """Reduces an array over the ranks of a process set.

    Args:
        tensor (numpy.ndarray): the array (anything np.asarray() accepts).
        average (bool): deprecated. True means op=Average, False means op=Sum. Passing
            both average and op raises ValueError, as in Horovod.
        name (str): a name that matches the op across ranks. None draws an automatic name
            from a counter per op type and process set, so ranks issue unnamed ops in the
            same order.
        op (int): Average (the default), Sum, Adasum, Min, Max or Product.
        prescale_factor (float): multiplies the input before the reduction.
        postscale_factor (float): multiplies the result after the reduction.
        process_set (ProcessSet): the ranks to reduce over (default: every rank).

    Returns:
        result (numpy.ndarray): a new array; `tensor` is left unchanged.

    Raises:
        ValueError: a bad argument, such as an unsupported dtype or op.
        KoloInternalError: the op failed in the runtime, such as when a rank passed another
            shape or a peer was lost.
    """
    return synchronize(allreduce_async(tensor, average, name, op, prescale_factor,
                                       postscale_factor, process_set))


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """Starts allreduce_() and returns at once.

    Takes the same arguments as allreduce_().

    Returns:
        handle (int): synchronize(handle) waits and returns `tensor`, which then holds the result;
            poll(handle) tells whether it is done.
    """
    op = common.resolve_op(op, average)
    return _ops.allreduce_async(_A, tensor, True, name, op, prescale_factor, postscale_factor,
                                process_set)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """Reduces a writeable ndarray in place over the ranks of a process set.

    Takes the same arguments as allreduce(). `tensor` must be a writeable numpy.ndarray.

    Returns:
        tensor (numpy.ndarray): the input array, which now holds the result.
    """
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor, process_set))


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Starts grouped_allreduce() and returns at once.

    Takes the same arguments as grouped_allreduce().

    Returns:
        handle (int): synchronize(handle) waits and returns the list of new arrays; poll(handle)
            tells whether it is done.
    """
    op = common.resolve_op(op, average)
    return _ops.grouped_allreduce_async(_A, tensors, False, name, op, prescale_factor,
                                        postscale_factor, process_set)


def grouped_allreduce(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set):
    """Reduces a list of arrays as one op, so that they all complete together.

    Takes the arguments of allreduce(), with `tensors` for `tensor`. The other arguments
    apply to every array.

    Args:
        tensors (list): a non-empty list of arrays. Each rank passes as many, in the same
            order.

    Returns:
        results (list): a new array per input, in order.
    """
    return synchronize(grouped_allreduce_async(tensors, average, name, op, prescale_factor,
                                               postscale_factor, process_set))


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    """Starts grouped_allreduce_() and returns at once.

    Takes the same arguments as grouped_allreduce_().

    Returns:
        handle (int): synchronize(handle) waits and returns the input arrays, which then hold the
            results; poll(handle) tells whether it is done.
    """
    op = common.resolve_op(op, average)
    return _ops.grouped_allreduce_async(_A, tensors, True, name, op, prescale_factor,
                                        postscale_factor, process_set)


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    """Reduces a list of writeable ndarrays in place, as one op.

    Takes the same arguments as grouped_allreduce().

    Returns:
        tensors (list): the input arrays, which now hold the results.
    """
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts allgather() and returns at once.

    Takes the same arguments as allgather().

    Returns:
        handle (int): synchronize(handle) waits and returns the gathered array; poll(handle) tells
            whether it is done.
    """
    return _ops.allgather_async(_A, tensor, name, process_set)


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenates every rank's array along dimension 0, in rank order.

    Dimension 0 may differ between ranks. The other dimensions and the dtype must match.

    Args:
        tensor (numpy.ndarray): this rank's array.
        name (str): a name that matches the op across ranks (None: automatic, as for
            allreduce()).
        process_set (ProcessSet): the ranks to gather from (default: every rank).

    Returns:
        result (numpy.ndarray): a new array.
    """
    return synchronize(allgather_async(tensor, name, process_set))


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts broadcast() and returns at once.

    Takes the same arguments as broadcast().

    Returns:
        handle (int): synchronize(handle) waits and returns the new array; poll(handle) tells
            whether it is done.
    """
    return _ops.broadcast_async(_A, tensor, root_rank, False, name, process_set)


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Returns the value that one rank holds, on every rank.

    Args:
        tensor (numpy.ndarray): this rank's array. Every rank passes the same shape and
            dtype.
        root_rank (int): the global rank whose value is sent. It must belong to the process
            set.
        name (str): a name that matches the op across ranks (None: automatic, as for
            allreduce()).
        process_set (ProcessSet): the ranks to broadcast to (default: every rank).

    Returns:
        result (numpy.ndarray): a new array holding root_rank's value.

    Raises:
        ValueError: root_rank is not a member of the process set.
    """
    return synchronize(broadcast_async(tensor, root_rank, name, process_set))


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts broadcast_() and returns at once.

    Takes the same arguments as broadcast_().

    Returns:
        handle (int): synchronize(handle) waits and returns `tensor`, which then holds the value;
            poll(handle) tells whether it is done.
    """
    return _ops.broadcast_async(_A, tensor, root_rank, True, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """Overwrites a writeable ndarray with its value on root_rank.

    Takes the same arguments as broadcast(). `tensor` must be a writeable numpy.ndarray.

    Returns:
        tensor (numpy.ndarray): the input array, which now holds root_rank's value.
    """
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Starts alltoall() and returns at once.

    Takes the same arguments as alltoall().

    Returns:
        handle (int): synchronize(handle) returns the tuple (rows, received_splits),
            whether or not `splits` was given.
    """
    return _ops.alltoall_async(_A, tensor, splits, name, process_set)


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends a block of rows to each rank and receives a block from each.

    Args:
        tensor (numpy.ndarray): the array to split along dimension 0.
        splits (list): the number of rows of dimension 0 that go to each rank of the set,
            in order (1-D ints, one per rank). None splits the rows evenly.
        name (str): a name that matches the op across ranks (None: automatic, as for
            allreduce()).
        process_set (ProcessSet): the ranks to exchange with (default: every rank).

    Returns:
        result (numpy.ndarray): the received rows, in rank order. When `splits` is given,
            the tuple (rows, received_splits) instead, as horovod.torch returns.
    """
    output, received = synchronize(alltoall_async(tensor, splits, name, process_set))
    return output if splits is None else (output, received)


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Starts reducescatter() and returns at once.

    Takes the same arguments as reducescatter().

    Returns:
        handle (int): synchronize(handle) waits and returns this rank's block; poll(handle) tells
            whether it is done.
    """
    return _ops.reducescatter_async(_A, tensor, name, op, prescale_factor, postscale_factor,
                                    process_set)


def reducescatter(tensor, name=None, op=Average, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reduces an array over the set, then keeps this rank's block of dimension 0.

    Blocks follow rank order. When dimension 0 does not divide evenly, the first
    dim0 % size ranks get one extra row.

    Args:
        tensor (numpy.ndarray): the array. Every rank passes the same shape.
        name (str): a name that matches the op across ranks (None: automatic, as for
            allreduce()).
        op (int): Average (the default), Sum, Min, Max or Product.
        process_set (ProcessSet): the ranks to reduce over (default: every rank).
        prescale_factor (float): multiplies the input before the reduction.
        postscale_factor (float): multiplies the result after the reduction.

    Returns:
        result (numpy.ndarray): a new array with this rank's block.

    Raises:
        KoloInternalError: op is Adasum, as in Horovod.
    """
    return synchronize(reducescatter_async(tensor, name, op, process_set, prescale_factor,
                                           postscale_factor))


def barrier(process_set=global_process_set):
    """Blocks until every rank of the process set called barrier().

    Args:
        process_set (ProcessSet): the ranks to wait for (default: every rank).
    """
    _ops.barrier(process_set)


def join():
    """Blocks until every rank called join(); returns the last rank that joined.

    Returns:
        rank (int): a global rank, the same on every rank.
    """
    return _ops.join()


from kolo.common import poll, synchronize  # noqa: E402,F401 - re-exported (documented there)
