# SPDX-License-Identifier: Apache-2.0
"""Lifecycle, topology, build information and timeline (horovod.common.basics' names)."""

import atexit
import threading

from kolo import _lib, common
from kolo import process_sets as _ps

_atexit_lock = threading.Lock()
_atexit_registered = False


def init(comm=None, process_sets=None):
    """Starts the runtime; blocks until every rank joined the rendezvous (KOLO_START_TIMEOUT).

    `comm` is accepted for Horovod compatibility and must be None (kolo takes its world from
    kolorun / mpirun / the KOLO_* environment). `process_sets` is a list of ProcessSet objects
    to register at once (collective: same list on every rank), or "dynamic" (always allowed in
    kolo). Calling init twice is a no-op; init after shutdown starts a new runtime. When the
    sets cannot be registered (the ranks passed different lists), init raises and the runtime
    it started is shut down again, so init can be retried. Under
    kolorun's elastic mode, init joins the driver's newest rendezvous round (kolo.elastic).
    """
    global _atexit_registered
    if comm is not None:
        raise ValueError("kolo.init(comm=...) is not supported: kolo reads its world from "
                         "kolorun, mpirun or the KOLO_* environment")
    if process_sets is not None and not isinstance(process_sets, str):
        process_sets = list(process_sets)
        for ps in process_sets:
            if not isinstance(ps, _ps.ProcessSet):
                raise ValueError("init(process_sets=...) takes ProcessSet objects; got %r"
                                 % (ps,))
            if ps.process_set_id is None:
                _ps._check_not_empty(ps, "init(process_sets=...)")
    elif isinstance(process_sets, str) and process_sets != "dynamic":
        raise ValueError("process_sets must be a list of ProcessSet or 'dynamic'; got %r"
                         % process_sets)
    was_initialized = is_initialized()
    from kolo.elastic import _worker as elastic_worker  # here: kolo.elastic imports kolo
    if not was_initialized and elastic_worker.enabled():
        # A worker of kolorun's elastic mode takes its rank and size from the newest round.
        elastic_worker.init_in_round(_c_init, _lib.lib.kolo_shutdown)
    else:
        _c_init()
    if not was_initialized:
        common.names.reset()
    _ps._refresh_global()
    with _atexit_lock:
        if not _atexit_registered:
            atexit.register(shutdown)
            _atexit_registered = True
    if isinstance(process_sets, list):
        try:
            for ps in process_sets:
                if ps.process_set_id is None:
                    _ps.add_process_set(ps)
        except BaseException:
            # A set the ranks disagree on fails init as a whole: the runtime this call started
            # stops again, so that init() can be retried (it was left running, and a second
            # init() returned at once without the sets).
            if not was_initialized:
                try:
                    shutdown()
                except Exception:  # noqa: BLE001 (the registration error is the one to raise)
                    pass
            raise


def _c_init():
    common.raise_for_call(_lib.lib.kolo_init(), "init")


def shutdown():
    """Stops the runtime (idempotent); pending ops fail with the cause."""
    rc = _lib.lib.kolo_shutdown()
    _ps._forget_all()
    common.raise_for_call(rc, "shutdown")


def is_initialized():
    """Whether init() ran and shutdown() has not run since.

    Returns:
        running (bool): True while the runtime is running.
    """
    return bool(_lib.lib.kolo_is_initialized())


def _topology(fn):
    value = fn()
    if value < 0:
        raise common.NotInitializedError(common.NOT_INITIALIZED_MESSAGE)
    return value


def rank():
    """This process's global rank."""
    return _topology(_lib.lib.kolo_rank)


def size():
    """The number of processes."""
    return _topology(_lib.lib.kolo_size)


def local_rank():
    """This process's rank among the processes on its host."""
    return _topology(_lib.lib.kolo_local_rank)


def local_size():
    """The number of processes on this host."""
    return _topology(_lib.lib.kolo_local_size)


def cross_rank():
    """The index of this host among the hosts (for processes of the same local rank)."""
    return _topology(_lib.lib.kolo_cross_rank)


def cross_size():
    """The number of hosts (processes with this local rank)."""
    return _topology(_lib.lib.kolo_cross_size)


def is_homogeneous():
    """True when every host runs the same number of processes."""
    return local_size() * cross_size() == size()


def mpi_built():
    """Whether libkolo.so was built with its MPI transport."""
    return bool(_lib.lib.kolo_mpi_built())


def gloo_built():
    """Whether libkolo.so was built with its Gloo transport."""
    return bool(_lib.lib.kolo_gloo_built())


def nccl_built():
    """NCCL_VERSION_CODE kolo was built against (e.g. 22809 for 2.28.9), or 0, as Horovod."""
    return int(_lib.lib.kolo_nccl_built())


def cuda_built():
    """Whether libkolo.so was built with CUDA support (GPU tensors)."""
    return bool(_lib.lib.kolo_cuda_built())


def rocm_built():
    """Always False: kolo has no ROCm build."""
    return False


def ddl_built():
    """Always False: kolo has no IBM DDL support."""
    return False


def ccl_built():
    """Always False: kolo has no oneCCL support."""
    return False


def mpi_enabled():
    """Whether the running job communicates over MPI."""
    return bool(_lib.lib.kolo_mpi_enabled())


def gloo_enabled():
    """Whether the running job communicates over Gloo."""
    return bool(_lib.lib.kolo_gloo_enabled())


def nccl_enabled():
    """Whether NCCL carries CUDA tensors in this job (False on the host-staged path:
    KOLO_GPU_OPERATIONS=host, or a build without NCCL)."""
    return bool(_lib.lib.kolo_nccl_enabled())


def mpi_threads_supported():
    """Horovod raises ValueError when MPI is not in use; so does kolo. kolo only ever calls MPI
    from its coordinator thread, so user threads never need MPI_THREAD_MULTIPLE."""
    if not mpi_enabled():
        raise ValueError("MPI is not in use in this job")
    return True


def transport_name():
    """The transport the job runs on ("gloo", "mpi", "shm", "loopback"; "" before init)."""
    name = _lib.lib.kolo_transport_name()
    return name.decode() if name else ""


def version():
    """The version of the loaded libkolo.so, such as "0.1.0"."""
    v = _lib.lib.kolo_version()
    return v.decode() if v else ""


def start_timeline(file_path, mark_cycles=False):
    """Starts writing a Chrome-trace timeline to file_path (as KOLO_TIMELINE does)."""
    if not isinstance(file_path, str) or not file_path:
        raise ValueError("start_timeline needs a non-empty file path; got %r" % (file_path,))
    rc = _lib.lib.kolo_start_timeline(file_path.encode("utf-8"), 1 if mark_cycles else 0)
    if rc == _lib.ERR_IO:  # a file it cannot write: an OSError, not an op failure to recover from
        raise OSError("start_timeline: %s" % (_lib.last_error() or _lib.status_string(rc)))
    common.raise_for_call(rc, "start_timeline")


def stop_timeline():
    """Stops the timeline and flushes the file."""
    common.raise_for_call(_lib.lib.kolo_stop_timeline(), "stop_timeline")
