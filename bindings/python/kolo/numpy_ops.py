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
    op = common.resolve_op(op, average)
    return _ops.allreduce_async(_A, tensor, False, name, op, prescale_factor, postscale_factor,
                                process_set)


def allreduce(tensor, average=None, name=None, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set):
    """Reduces `tensor` over all ranks of the set (default op Average); returns a new array."""
    return synchronize(allreduce_async(tensor, average, name, op, prescale_factor,
                                       postscale_factor, process_set))


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    op = common.resolve_op(op, average)
    return _ops.allreduce_async(_A, tensor, True, name, op, prescale_factor, postscale_factor,
                                process_set)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """In-place allreduce; returns `tensor`."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor, process_set))


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    op = common.resolve_op(op, average)
    return _ops.grouped_allreduce_async(_A, tensors, False, name, op, prescale_factor,
                                        postscale_factor, process_set)


def grouped_allreduce(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set):
    return synchronize(grouped_allreduce_async(tensors, average, name, op, prescale_factor,
                                               postscale_factor, process_set))


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    op = common.resolve_op(op, average)
    return _ops.grouped_allreduce_async(_A, tensors, True, name, op, prescale_factor,
                                        postscale_factor, process_set)


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


def allgather_async(tensor, name=None, process_set=global_process_set):
    return _ops.allgather_async(_A, tensor, name, process_set)


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenates every rank's array along dimension 0 (dim 0 may differ per rank)."""
    return synchronize(allgather_async(tensor, name, process_set))


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    return _ops.broadcast_async(_A, tensor, root_rank, False, name, process_set)


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Returns a new array holding the value of `tensor` on global rank root_rank."""
    return synchronize(broadcast_async(tensor, root_rank, name, process_set))


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    return _ops.broadcast_async(_A, tensor, root_rank, True, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """synchronize() returns (output, received_splits)."""
    return _ops.alltoall_async(_A, tensor, splits, name, process_set)


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends splits[i] rows of dim 0 to rank i (even split when None). Returns the received
    rows, and also the received splits when `splits` was given (as horovod.torch does)."""
    output, received = synchronize(alltoall_async(tensor, splits, name, process_set))
    return output if splits is None else (output, received)


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    return _ops.reducescatter_async(_A, tensor, name, op, prescale_factor, postscale_factor,
                                    process_set)


def reducescatter(tensor, name=None, op=Average, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reduces over the set, then this rank keeps its block of dim 0 (the first dim0 % size
    ranks get one extra row)."""
    return synchronize(reducescatter_async(tensor, name, op, process_set, prescale_factor,
                                           postscale_factor))


def barrier(process_set=global_process_set):
    _ops.barrier(process_set)


def join():
    """Returns the last rank to join."""
    return _ops.join()


poll = common.poll
synchronize = common.synchronize
