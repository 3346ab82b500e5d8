# SPDX-License-Identifier: Apache-2.0
"""Gradient compression for allreduce, as horovod.torch.compression: Compression.none and
Compression.fp16 (floating-point tensors travel as float16 and come back in their own dtype)."""

import torch


class Compressor:
    """compress(tensor) -> (compressed, ctx); decompress(tensor, ctx) -> tensor."""

    @staticmethod
    def compress(tensor):
        raise NotImplementedError("Compressor subclasses implement compress()")

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError("Compressor subclasses implement decompress()")


class NoneCompressor(Compressor):
    """Sends tensors as they are."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class FP16Compressor(Compressor):
    """Casts floating-point tensors to float16 for the wire; other dtypes pass unchanged."""

    @staticmethod
    def compress(tensor):
        if not isinstance(tensor, torch.Tensor):
            return tensor, None  # the op refuses it, on every rank, naming this one
        if tensor.dtype.is_floating_point and tensor.dtype != torch.float16:
            return tensor.type(torch.float16), tensor.dtype
        return tensor, tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        if ctx is not None and ctx.is_floating_point and tensor.dtype != ctx:
            return tensor.type(ctx)
        return tensor


class Compression:
    """The compressors, by Horovod's names."""

    none = NoneCompressor
    """Sends tensors as they are (the default)."""
    fp16 = FP16Compressor
    """Sends floating-point tensors as float16 and returns them in their own dtype."""
