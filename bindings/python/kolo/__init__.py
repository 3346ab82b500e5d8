# SPDX-License-Identifier: Apache-2.0
"""kolo: collective communication for data-parallel training (a Horovod replacement).

Pure Python over the C API of libkolo.so (ctypes): nothing here is compiled against Python,
numpy or torch. `import kolo.torch as hvd` is the drop-in for `import horovod.torch as hvd`;
this top-level package holds the lifecycle and topology calls, process sets, the numpy-array
collectives, kolo.run (run a function on N ranks, local or on hosts) and KoloRunner
(HorovodRunner's interface).
"""

from kolo.basics import (ccl_built, cross_rank, cross_size, cuda_built, ddl_built,
                         gloo_built, gloo_enabled, init, is_homogeneous, is_initialized,
                         local_rank, local_size, mpi_built, mpi_enabled, mpi_threads_supported,
                         nccl_built, nccl_enabled, rank, rocm_built, shutdown, size,
                         start_timeline, stop_timeline, transport_name, version)
from kolo.common import (Adasum, Average, HorovodInternalError, KoloInternalError, Max, Min,
                         Product, Sum)
from kolo.numpy_ops import (allgather, allgather_async, allreduce, allreduce_,
                            allreduce_async, allreduce_async_, alltoall, alltoall_async,
                            barrier, broadcast, broadcast_, broadcast_async, broadcast_async_,
                            grouped_allreduce, grouped_allreduce_, grouped_allreduce_async,
                            grouped_allreduce_async_, join, poll, reducescatter,
                            reducescatter_async, synchronize)
from kolo.process_sets import (ProcessSet, add_process_set, global_process_set,
                               remove_process_set)
from kolo.runner import KoloRunner, run
from kolo import elastic  # noqa: E402 - kolo.elastic: Horovod's elastic API (uses the above)

__version__ = "0.1.0"

__all__ = [
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
    "cross_rank", "cross_size", "is_homogeneous", "mpi_built", "gloo_built", "nccl_built",
    "cuda_built", "rocm_built", "ddl_built", "ccl_built", "mpi_enabled", "gloo_enabled",
    "nccl_enabled", "mpi_threads_supported", "transport_name", "version", "start_timeline",
    "stop_timeline", "Average", "Sum", "Adasum", "Min", "Max", "Product", "KoloInternalError",
    "HorovodInternalError", "ProcessSet", "add_process_set", "remove_process_set",
    "global_process_set", "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async",
    "grouped_allreduce_async_", "allgather", "allgather_async", "broadcast", "broadcast_",
    "broadcast_async", "broadcast_async_", "alltoall", "alltoall_async", "reducescatter",
    "reducescatter_async", "barrier", "join", "poll", "synchronize", "run", "KoloRunner",
    "elastic",
]
