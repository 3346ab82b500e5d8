# SPDX-License-Identifier: Apache-2.0
"""The torch array adapter of kolo._ops: dtype and device mapping, copies of owned outputs.

dtypes: uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64, bool (uint16
only through kolo's numpy API). Devices: CPU, and CUDA when libkolo.so was built with CUDA; the
op then runs on the tensor's device after the work already queued on torch's current stream of
that device (the stream is handed to the runtime). Sparse and other layouts are rejected.
"""

import ctypes
import operator

import torch

from kolo import _lib, common

_DTYPES = {
    torch.uint8: _lib.UINT8,
    torch.int8: _lib.INT8,
    torch.int16: _lib.INT16,
    torch.int32: _lib.INT32,
    torch.int64: _lib.INT64,
    torch.float16: _lib.FLOAT16,
    torch.bfloat16: _lib.BFLOAT16,
    torch.float32: _lib.FLOAT32,
    torch.float64: _lib.FLOAT64,
    torch.bool: _lib.BOOL,
}


def dtype_code(dtype):
    """The kolo_dtype_t of a torch dtype, or None when kolo does not support it."""
    return _DTYPES.get(dtype)


def _tensors_in(keep):
    """The tensors in `keep` (items, or lists/tuples of items), in order, lazily."""
    for item in keep or ():
        for t in (item if isinstance(item, (list, tuple)) else (item,)):
            if isinstance(t, torch.Tensor):
                yield t


class _DeviceBytes:
    """Exposes nbytes of CUDA memory at ptr to torch.as_tensor (no copy)."""

    def __init__(self, ptr, nbytes):
        self.__cuda_array_interface__ = {
            "shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 2,
            "strides": None}


class TorchAdapter:
    @staticmethod
    def describe(x, label):
        # Once per tensor per op: kept to cheap attribute reads (a CPU tensor never builds a
        # torch.device), as it is on every gradient's path.
        if not isinstance(x, torch.Tensor):
            raise ValueError("%s: expected a torch.Tensor; got %s" % (label, type(x).__name__))
        if x.layout != torch.strided:
            raise ValueError("%s: %s tensors are not supported (use a dense tensor)"
                             % (label, x.layout))
        code = _DTYPES.get(x.dtype)
        if code is None:
            raise ValueError("%s: tensor type %s is not supported by kolo" % (label, x.dtype))
        ndim = x.dim()
        if ndim > _lib.MAX_DIMS:
            raise ValueError("%s: %d dimensions (kolo supports up to %d)"
                             % (label, ndim, _lib.MAX_DIMS))
        if x.is_cpu:
            device, stream = _lib.CPU_DEVICE, None
        elif x.is_cuda:
            dev = x.device
            if not _lib.lib.kolo_cuda_built():
                raise ValueError("%s: the tensor is on %s but this libkolo.so (%s) was built "
                                 "without CUDA; move it to the CPU" % (label, dev, _lib.path))
            device = dev.index if dev.index is not None else torch.cuda.current_device()
            stream = torch.cuda.current_stream(device).cuda_stream or None
        else:
            raise ValueError("%s: tensors on %s are not supported (CPU or CUDA only)"
                             % (label, x.device))
        # The struct keeps the shape array alive (ctypes stores what a pointer field was given).
        return _lib.KoloTensor(x.data_ptr() if x.numel() else None, code, ndim,
                               _lib.shape_array(x.shape), device, stream)

    @staticmethod
    def consume(c_handles, keep):
        """CUDA ops: makes torch's current stream of the op's device (that of the first tensor
        in `keep`) wait for the ops' device work (kolo_handle_stream_wait on their completion
        events); the host does not block. Needed with KOLO_ASYNC_COMPLETION (the handle
        completes when the work is queued); a cheap no-op ordering otherwise. The CUDA tensors
        in `keep` (inputs, staging copies, outputs) are recorded on that stream, so torch's
        caching allocator does not hand their memory out again, on the stream they were made
        on, before kolo's work is done. CPU tensors: nothing to do."""
        first = next(_tensors_in(keep), None)
        if first is None or not first.is_cuda:
            return  # the CPU ops' path: stops at the first tensor
        tensors = list(_tensors_in(keep))
        device = first.device
        current = torch.cuda.current_stream(device)
        for h in c_handles:
            common.raise_for_call(_lib.lib.kolo_handle_stream_wait(h, current.cuda_stream or None),
                                  "ordering torch's current stream on %s after the op" % device)
        for t in tensors:
            if t.device == device:
                t.record_stream(current)

    @staticmethod
    def contiguous(x):
        if not isinstance(x, torch.Tensor):
            raise ValueError("expected a torch.Tensor; got %s" % type(x).__name__)
        # A sparse (or other non-strided) tensor goes on as it is, to describe(), which refuses
        # it with the op's label: torch 2.x raises a bare "unsupported memory format" here.
        if x.layout != torch.strided or x.is_contiguous():
            return x
        with torch.no_grad():
            return x.contiguous()

    @staticmethod
    def check_writable(x, label):
        if not isinstance(x, torch.Tensor):
            raise ValueError("%s: expected a torch.Tensor; got %s" % (label, type(x).__name__))
        if x.layout == torch.strided and 0 in x.stride():
            for d, (size, stride) in enumerate(zip(x.shape, x.stride())):
                if stride == 0 and size > 1:  # an expand()ed view: one element, many places
                    raise ValueError(
                        "%s: the tensor repeats its memory along dimension %d (stride 0, an "
                        "expanded view), so an in-place op cannot write its result into it; "
                        "pass a .clone() or use the out-of-place op" % (label, d))

    @staticmethod
    def empty_like(x):
        return torch.empty_like(x, memory_format=torch.contiguous_format)

    @staticmethod
    def copy_(dst, src):
        with torch.no_grad():
            dst.copy_(src)

    @staticmethod
    def from_output(ptr, shape, like):
        out = torch.empty(shape, dtype=like.dtype, device=like.device)
        nbytes = out.numel() * out.element_size()
        if nbytes == 0:
            return out
        if out.device.type == "cpu":
            ctypes.memmove(out.data_ptr(), ptr, nbytes)
        else:
            src = torch.as_tensor(_DeviceBytes(ptr, nbytes), device=out.device)
            out.view(-1).view(torch.uint8).copy_(src)
        return out

    @staticmethod
    def int32_vector(values):
        return torch.tensor(values, dtype=torch.int32)

    @staticmethod
    def to_int_list(splits):
        if isinstance(splits, torch.Tensor):
            if splits.dim() != 1 or splits.dtype.is_floating_point or splits.is_complex():
                raise ValueError("splits must be a 1-D integer tensor; got %s of %s"
                                 % (tuple(splits.shape), splits.dtype))
            return [int(v) for v in splits.tolist()]
        try:
            return [operator.index(v) for v in splits]
        except TypeError:
            raise ValueError("splits must be a sequence of ints; got %r" % (splits,)) from None
