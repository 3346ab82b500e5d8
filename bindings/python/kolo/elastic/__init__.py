# SPDX-License-Identifier: Apache-2.0
"""kolo.elastic: Horovod's elastic training API (horovod.common.elastic), framework-free.

    import kolo
    kolo.init()
    state = kolo.elastic.ObjectState(epoch=0, weights=w)

    @kolo.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            ...                     # collectives; a lost peer raises KoloInternalError
            state.commit()          # saves, and raises HostsUpdatedInterrupt on new hosts

    train(state)

Under `kolorun --host-discovery-script S` (or --min-np/--max-np) each worker takes its rank and
size from kolorun's newest rendezvous round (kolo.init does so by itself). @run catches a lost
peer (KoloInternalError: restore the last commit) and HostsUpdatedInterrupt (the commit is kept),
shuts the runtime down, joins the next round (new rank and size), runs the reset callbacks, syncs
the state from the new rank 0 and calls the function again; a KoloInternalError that reports
a mistake in the ops themselves (a mismatch between ranks: it would recur after every reset)
ends the worker instead, as any other exception. As Horovod's skip_sync, a round that
only removes workers skips the sync (the workers left all hold the same commit). A worker that
kolorun removed from the job (its host left the discovery script's list) ends when it would join
the next round (WorkerRemoved: exit status 0), as under horovodrun. kolo.torch.elastic adds
TorchState and ElasticSampler.
"""

import functools
import sys

import numpy as np

from kolo import _lib, basics, common, numpy_ops
from kolo.elastic import _worker
from kolo.elastic._worker import ElasticJobError, WorkerRemoved
from kolo.elastic.state import HostsUpdatedInterrupt, ObjectState, State, broadcast_object

__all__ = ["run", "State", "ObjectState", "HostsUpdatedInterrupt", "ElasticJobError",
           "WorkerRemoved",
           "broadcast_object",
           "is_elastic", "current_round"]


def is_elastic():
    """Whether this process runs as a worker of kolorun's elastic mode."""
    return _worker.enabled()


def current_round():
    """The rendezvous round this worker runs in (-1 outside elastic mode or before init)."""
    return _worker.current_round()


def _reset():
    """Leaves the current round and initializes in the next one (new rank and size)."""
    try:
        basics.shutdown()
    except Exception:  # noqa: BLE001 - an aborted runtime may report its cause again here
        pass
    _worker.request_round()
    basics.init()


def _skip_sync(skip_sync):
    """Whether @run skips state.sync() now: HostsUpdatedInterrupt said skip_sync (workers were
    only removed: Horovod's rule) and, under kolorun, the round joined holds only workers of the
    last one. Collective in elastic mode (every member of the round, a new one too, agrees in
    one small allreduce), so that no rank syncs alone."""
    if not _worker.enabled() or not basics.is_initialized():
        return skip_sync
    mine = 1 if skip_sync and _worker.only_members_left() else 0
    agreed = numpy_ops.allreduce(np.array([mine], dtype=np.int32), op=common.Min,
                                 name="kolo.elastic.skip_sync")
    return bool(int(agreed[0]))


# Statuses of a collective that failed because of the ops the ranks submitted (shapes, dtypes,
# roots or names that differ between ranks, an argument a rank refused, an op not allowed while
# ranks have joined, ...): the runtime is intact and every rank of the op got the same error, so
# re-forming the workers and running the function again from the last commit would only fail
# the same way, for ever (no --reset-limit by default). Horovod resets on them too (every failed
# op is a HorovodInternalError there); kolo lets them end the worker, as any other exception of
# the training code.
_USER_ERRORS = (_lib.ERR_INVALID_ARGUMENT, _lib.ERR_MISMATCH, _lib.ERR_DUPLICATE_NAME,
                _lib.ERR_UNSUPPORTED, _lib.ERR_JOINED)


def _is_user_error(e):
    """Whether KoloInternalError e reports a mistake in the submitted ops (no lost peer). A
    store key refused because kolorun abandoned the round reaches Python as INVALID_ARGUMENT
    too: that one needs the reset."""
    return (getattr(e, "status", None) in _USER_ERRORS
            and not isinstance(e, common.NotInitializedError)
            and "was abandoned" not in str(e))


def run(func):
    """Decorator for the training function `func(state, *args, **kwargs)` (Horovod's
    hvd.elastic.run): syncs the state, runs func, and on a lost peer (KoloInternalError:
    restore the last commit) or HostsUpdatedInterrupt resets and runs it again. Outside kolorun's
    elastic mode a KoloInternalError propagates after the restore (no driver to re-form the
    workers). So does, in elastic mode too, one that reports a mistake in the ops themselves (a
    mismatch between ranks, a refused argument: _USER_ERRORS), as any other exception of func:
    a reset would replay it for ever. Returns func's result."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        reset_required = False
        skip_sync = False
        while True:
            try:
                if reset_required:
                    _reset()
                    state.on_reset()
                    reset_required = False
                if not _skip_sync(skip_sync):
                    state.sync()
                skip_sync = False
                return func(state, *args, **kwargs)
            except HostsUpdatedInterrupt as e:
                reset_required = True
                skip_sync = e.skip_sync
            except _worker.ElasticJobError:
                raise
            except common.KoloInternalError as e:
                if isinstance(e, common.NotInitializedError) and not _worker.enabled():
                    raise
                state.restore()
                skip_sync = False
                if not _worker.enabled():
                    raise
                if _is_user_error(e):
                    print("kolo elastic: worker %s (round %d): %s; restored the last commit; "
                          "an error in the ops submitted (%s), not a lost peer: re-forming "
                          "the workers would repeat it, so it ends the worker" % (
                              _worker.worker_id(), _worker.current_round(), e, e.status_name),
                          file=sys.stderr, flush=True)
                    raise
                print("kolo elastic: worker %s (round %d): %s; restored the last commit, "
                      "re-forming the workers" % (_worker.worker_id(), _worker.current_round(),
                                                  e), file=sys.stderr, flush=True)
                reset_required = True

    return wrapper
