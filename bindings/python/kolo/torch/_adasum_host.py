# SPDX-License-Identifier: Apache-2.0
"""op=Adasum on CUDA tensors: through host copies.

kolo's Adasum (ops/adasum.h) runs on host memory only, so kolo.torch copies device tensors to
the host (blocking on the producer's stream, as Tensor.to does), runs the host allreduce in
place, and copies each result back to its tensor's device when the op is synchronized (into the
tensor itself for the in-place variants). Horovod built without NCCL does the same, and like it
the result is not divided by anything (Adasum is not an average).
"""

import torch

from kolo import _ops, common
from kolo.common import Adasum
from kolo.torch._adapter import TorchAdapter as _A


def needs_host(tensors, op):
    """True when op is Adasum and a tensor is not on the CPU."""
    return op == Adasum and any(isinstance(t, torch.Tensor) and t.device.type != "cpu"
                                for t in tensors)


def allreduce(tensors, inplace, name, op, pre, post, process_set, grouped):
    """Starts the Adasum of device `tensors` through host copies; returns the handle, whose
    synchronize() gives a tensor (a list when grouped) on the tensors' devices."""
    hosts = [t.detach().to("cpu", copy=True) for t in tensors]
    if grouped:
        h = _ops.grouped_allreduce_async(_A, hosts, True, name, op, pre, post, process_set)
    else:
        h = _ops.allreduce_async(_A, hosts[0], True, name, op, pre, post, process_set)

    def back(results):
        res = results[0] if grouped else [results[0]]
        with torch.no_grad():  # an in-place result into a leaf that requires grad (a parameter)
            outs = [t.copy_(r) if inplace else r.to(t.device) for t, r in zip(tensors, res)]
        return outs if grouped else outs[0]

    return common.combine([h], back, "grouped_allreduce" if grouped else "allreduce")
