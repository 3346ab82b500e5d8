# SPDX-License-Identifier: Apache-2.0
"""Elastic state (horovod.common.elastic's State and ObjectState): what a training function
commits, restores after a failure and receives from rank 0 when the workers are re-formed.

commit() saves a copy of the state and then checks, on every rank together, whether kolorun
published a new rendezvous round (new hosts, a worker stopped): if so every rank raises
HostsUpdatedInterrupt at the same commit, so all of them reset together; check_host_updates()
checks alone, and saves the state before the interrupt (no rollback follows it). restore() goes
back to the last commit (after a lost peer); sync() broadcasts rank 0's committed state to every
rank (after each reset, old and new workers alike, unless the reset only removed workers).
Not thread-safe: the training thread owns its State.
"""

import copy
import pickle

import numpy as np

from kolo import basics, common, numpy_ops
from kolo.elastic import _worker


class HostsUpdatedInterrupt(RuntimeError):
    """Raised by State.commit()/check_host_updates() on every rank at the same commit when kolorun
    formed a new round (hosts were added or removed); @run resets and syncs. `skip_sync`, as
    Horovod's: the new round only removes workers (every one left holds the same commit, so
    @run skips the sync after the reset, unless the round it joins turns out to add one)."""

    def __init__(self, skip_sync=False):
        super().__init__("the hosts of the elastic job changed")
        self.skip_sync = skip_sync


def broadcast_object(obj, root_rank=0, name=None):
    """Rank root_rank's `obj` on every rank (pickled; numpy buffers, no framework needed)."""
    name = name or common.names.make("broadcast_object", None, 0)
    if basics.rank() == root_rank:
        payload = np.frombuffer(pickle.dumps(obj), dtype=np.uint8).copy()
        count = np.array([payload.size], dtype=np.int64)
    else:
        count = np.zeros(1, dtype=np.int64)
    numpy_ops.broadcast_(count, root_rank, name=name + ".sz")
    if basics.rank() != root_rank:
        payload = np.empty(int(count[0]), dtype=np.uint8)
    numpy_ops.broadcast_(payload, root_rank, name=name + ".t")
    return obj if basics.rank() == root_rank else pickle.loads(payload.tobytes())


class State:
    """The base of every elastic state: subclasses implement save, restore and sync."""

    def __init__(self, bcast_object=None, get_rank=None):
        self._bcast_object = bcast_object or broadcast_object
        self._rank = get_rank or basics.rank
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        """Functions called (in order) after every reset, once the runtime is initialized again
        in the new world and before the state is synced: re-create process sets, rescale the
        learning rate to the new size, ..."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        """Runs at each reset: calls reset(), then the reset callbacks in the order registered.

        kolo.elastic.run calls it once the runtime is initialized in the new round, before
        sync().
        """
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def on_hosts_updated(self, timestamp=None, update_res=None):
        """Horovod's notification hook; kolo learns of new rounds from its store at commit."""

    def commit(self):
        """Saves the state, then raises HostsUpdatedInterrupt (on every rank) when the workers
        are about to be re-formed."""
        self.save()
        self._saved_now = True
        try:
            self.check_host_updates()
        finally:
            self._saved_now = False

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt on every rank when kolorun published a newer round than
        the one this job runs in, and ElasticJobError (kolorun's reason) on every rank when
        kolorun aborted the job (past --reset-limit, ...: as horovodrun stops its workers
        then). Collective (one small allreduce): call it on every rank.

        Before the interrupt it saves the state (every rank is here together), unless commit()
        just did: the workers go on from here without a rollback, and the reset's sync sends
        rank 0's saved plain values with its current model and optimizer, so these must be of
        the same moment. (Horovod's sync sends the plain values of the last commit there: a
        step counter went back to the commit while the model kept the steps trained since.)"""
        if not _worker.enabled() or not basics.is_initialized():
            return
        # 0: no newer round; 1: one that only removes workers; 2: one that adds some;
        # 3: the job was aborted
        newer = 0
        abort, newest = _worker.driver_news()
        if abort is not None:
            newer = 3
        elif newest > _worker.current_round():
            newer = 1 if _worker.round_only_removes(newest) else 2
        flag = int(numpy_ops.allreduce(np.array([newer], dtype=np.int32), op=common.Max,
                                       name="kolo.elastic.check_host_updates")[0])
        if flag == 3:
            if abort is None:  # another rank saw it first: it is in the store
                abort = _worker.driver_news()[0] or "(no reason given)"
            raise _worker.aborted_error(abort)
        if flag:
            if not getattr(self, "_saved_now", False):
                self.save()
            raise HostsUpdatedInterrupt(skip_sync=flag == 1)

    def save(self):
        """Saves a copy of the state; commit() calls it. Subclasses implement it.

        Raises:
            NotImplementedError: in State itself.
        """
        raise NotImplementedError()

    def restore(self):
        """Puts back the copy that the last save() made. Subclasses implement it.

        kolo.elastic.run calls it after a lost peer, before the reset.

        Raises:
            NotImplementedError: in State itself.
        """
        raise NotImplementedError()

    def sync(self):
        """Makes every rank hold rank 0's saved state. Subclasses implement it.

        kolo.elastic.run calls it after each reset, unless the new round only removed workers.
        It is collective: every rank calls it.

        Raises:
            NotImplementedError: in State itself.
        """
        raise NotImplementedError()

    def reset(self):
        """Called at each reset before the reset callbacks; subclasses may override."""


class ObjectState(State):
    """State made of picklable attributes: ObjectState(epoch=0, batch=0) gives state.epoch and
    state.batch; commit() deep-copies them, restore() puts the copy back, sync() broadcasts rank
    0's committed copy."""

    def __init__(self, bcast_object=None, get_rank=None, **kwargs):
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)
        self._saved_state = copy.deepcopy(kwargs)
        self._set_attrs()

    def save(self):
        """Saves a deep copy of the attributes that the constructor named."""
        self._saved_state = copy.deepcopy({k: getattr(self, k) for k in self._saved_state})

    def restore(self):
        """Sets the attributes back to the copy that the last save() made."""
        self._set_attrs()

    def sync(self):
        """Broadcasts rank 0's saved copy to every rank and sets the attributes from it.

        Collective: every rank calls it. It sends the last saved copy, not the current values.
        """
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self):
        for attr, value in copy.deepcopy(self._saved_state).items():
            setattr(self, attr, value)
