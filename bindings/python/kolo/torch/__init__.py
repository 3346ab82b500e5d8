# SPDX-License-Identifier: Apache-2.0
"""kolo.torch: a drop-in for horovod.torch (`import kolo.torch as hvd`).

Pure Python over libkolo.so's C API; works with any torch version that has the tensor API used
here (data_ptr, autograd.Function, grad-accumulator hooks), with no rebuild of kolo.
"""

try:
    import torch as _torch  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("kolo.torch needs PyTorch (Debian: apt install python3-torch): %s" % e)

from kolo.basics import (ccl_built, cross_rank, cross_size, cuda_built, ddl_built,
                         gloo_built, gloo_enabled, init, is_homogeneous, is_initialized,
                         local_rank, local_size, mpi_built, mpi_enabled, mpi_threads_supported,
                         nccl_built, nccl_enabled, rank, rocm_built, shutdown, size,
                         start_timeline, stop_timeline)
from kolo.common import (Adasum, Average, HorovodInternalError, KoloInternalError, Max, Min,
                         Product, Sum)
from kolo.process_sets import (ProcessSet, add_process_set, global_process_set,
                               remove_process_set)
from kolo.torch.compression import Compression
from kolo.torch.functions import (allgather_object, broadcast_object,
                                  broadcast_optimizer_state, broadcast_parameters)
from kolo.torch.mpi_ops import (allgather, allgather_async, allreduce, allreduce_,
                                allreduce_async, allreduce_async_, alltoall, alltoall_async,
                                barrier, broadcast, broadcast_, broadcast_async,
                                broadcast_async_, grouped_allgather, grouped_allgather_async,
                                grouped_allreduce, grouped_allreduce_, grouped_allreduce_async,
                                grouped_allreduce_async_, grouped_reducescatter,
                                grouped_reducescatter_async, join, poll, reducescatter,
                                reducescatter_async, sparse_allreduce_async, synchronize)
from kolo.torch.optimizer import DistributedOptimizer
from kolo.torch.sync_batch_norm import SyncBatchNorm
from kolo.torch.trainer import KoloModule, Trainer  # the Trainer adapter (trainer.py)
from kolo.torch import elastic  # hvd.elastic: run, TorchState, ElasticSampler, ...

__all__ = [
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
    "cross_rank", "cross_size", "is_homogeneous", "mpi_built", "gloo_built", "nccl_built",
    "cuda_built", "rocm_built", "ddl_built", "ccl_built", "mpi_enabled", "gloo_enabled",
    "nccl_enabled", "mpi_threads_supported", "start_timeline", "stop_timeline",
    "Average", "Sum", "Adasum", "Min", "Max", "Product", "KoloInternalError",
    "HorovodInternalError", "ProcessSet", "add_process_set", "remove_process_set",
    "global_process_set", "Compression", "allreduce", "allreduce_", "allreduce_async",
    "allreduce_async_", "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async",
    "grouped_allreduce_async_", "allgather", "allgather_async", "grouped_allgather",
    "grouped_allgather_async", "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
    "alltoall", "alltoall_async", "reducescatter", "reducescatter_async",
    "grouped_reducescatter", "grouped_reducescatter_async", "sparse_allreduce_async", "join",
    "barrier", "poll", "synchronize", "DistributedOptimizer", "broadcast_parameters",
    "broadcast_optimizer_state", "broadcast_object", "allgather_object", "SyncBatchNorm",
    "elastic",
]
