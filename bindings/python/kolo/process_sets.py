# SPDX-License-Identifier: Apache-2.0
"""Process sets, with horovod.common.process_sets' API.

A ProcessSet is a sorted list of global ranks plus the id the runtime gave it once it was
registered (add_process_set, or init(process_sets=[...])). Registration and removal are
collective over ALL ranks: every rank calls them with the same ranks in the same order. Ids are
deterministic (1, 2, ... in creation order); the global set always has id 0.

Roots: kolo's C API names a broadcast root by its index in the set, Horovod's Python API by its
global rank; kolo.torch takes a global rank, as Horovod does, and converts with root_index().
"""

import ctypes
import operator
import threading

from kolo import _lib
from kolo.common import raise_for_call


class ProcessSet:
    """A subset of the ranks for collectives. `ranks` is the sorted list of global ranks;
    `process_set_id` is None until registered."""

    def __init__(self, ranks_or_comm):
        if hasattr(ranks_or_comm, "Get_rank") and hasattr(ranks_or_comm, "Get_group"):
            raise ValueError("kolo does not take mpi4py communicators; pass a list of ranks")
        try:
            ranks = [int(r) for r in ranks_or_comm]
        except (TypeError, ValueError):
            raise ValueError("ProcessSet needs a sequence of integer ranks; got %r"
                             % (ranks_or_comm,)) from None
        if any(r < 0 for r in ranks):
            raise ValueError("ProcessSet ranks must be >= 0; got %r" % (ranks,))
        if len(set(ranks)) != len(ranks):
            raise ValueError("ProcessSet ranks must be unique; got %r" % (ranks,))
        self.ranks = sorted(ranks)
        self.process_set_id = None

    def _invalidate(self):
        self.process_set_id = None

    def _query(self, fn):
        if self.process_set_id is None:
            return None
        out = ctypes.c_int32(-1)
        raise_for_call(fn(self.process_set_id, ctypes.byref(out)), "process set %s" % self)
        return out.value

    def size(self):
        """Number of ranks in the set; None if not registered."""
        return self._query(_lib.lib.kolo_process_set_size)

    def rank(self):
        """This process's index in the set (-1 when not a member); None if not registered."""
        return self._query(_lib.lib.kolo_process_set_rank)

    def included(self):
        """Whether this process belongs to the set; None if not registered."""
        r = self.rank()
        return None if r is None else r >= 0

    def root_index(self, root_rank):
        """The index in this set of global rank `root_rank` (ValueError if not a member)."""
        if isinstance(root_rank, bool) or not isinstance(root_rank, int):
            # An integer (numpy's, a 0-d integer tensor), never a float: int(1.7) would
            # broadcast from rank 1 without a word.
            try:
                root_rank = operator.index(root_rank)
            except (TypeError, ValueError, RuntimeError):
                raise ValueError("root_rank must be an int; got %r" % (root_rank,)) from None
        if self.process_set_id == _lib.GLOBAL_PROCESS_SET:
            if not -2**31 <= root_rank < 2**31:  # the C API's int32 would wrap it to a rank
                raise ValueError("root_rank %d is outside [0, %d)"
                                 % (root_rank, len(self.ranks)))
            return root_rank  # the runtime reports an out-of-range root itself
        try:
            return self.ranks.index(root_rank)
        except ValueError:
            raise ValueError("root_rank %d is not a member of %s" % (root_rank, self)) from None

    def __str__(self):
        return "ProcessSet(process_set_id=%s, ranks=%s)" % (self.process_set_id, self.ranks)

    __repr__ = __str__


global_process_set = ProcessSet([])
"""The process set of every rank: the default of every collective's process_set argument."""
global_process_set.process_set_id = _lib.GLOBAL_PROCESS_SET

_lock = threading.Lock()
_registered = {}  # id -> ProcessSet, for invalidation at shutdown


def _refresh_global():
    n = ctypes.c_int32(0)
    raise_for_call(_lib.lib.kolo_process_set_size(_lib.GLOBAL_PROCESS_SET, ctypes.byref(n)),
                   "global process set")
    global_process_set.ranks = list(range(n.value))


def _forget_all():
    """Called at shutdown: ids die with the runtime (they restart at 1 after init)."""
    with _lock:
        for ps in _registered.values():
            ps._invalidate()
        _registered.clear()
    global_process_set.ranks = []


def _check_not_empty(process_set, caller):
    """ValueError for a set without ranks, before it reaches the runtime."""
    if not process_set.ranks:
        raise ValueError("%s: the rank list is empty; a process set needs at least one rank"
                         % caller)


def add_process_set(process_set):
    """Registers a ProcessSet (or a sequence of ranks) with the runtime and returns it.
    Collective over all ranks. ValueError for an empty rank list, and for a set whose ranks an
    added set already has (as Horovod; a set of every rank is allowed)."""
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if process_set.process_set_id is not None:
        raise ValueError("%s is already registered" % process_set)
    _check_not_empty(process_set, "add_process_set")
    ranks = (ctypes.c_int32 * max(1, len(process_set.ranks)))(*process_set.ranks)
    new_id = ctypes.c_int32(-1)
    rc = _lib.lib.kolo_add_process_set(ranks, len(process_set.ranks), ctypes.byref(new_id))
    raise_for_call(rc, "add_process_set(%s)" % process_set.ranks)
    process_set.process_set_id = new_id.value
    with _lock:
        _registered[new_id.value] = process_set
    return process_set


def remove_process_set(process_set):
    """Unregisters a set (collective over all ranks). Returns True when it was removed, False
    (as Horovod) for the global set and for a set that is not registered (never added, or
    already removed)."""
    if not isinstance(process_set, ProcessSet):
        raise ValueError("remove_process_set takes a ProcessSet; got %r" % (process_set,))
    if process_set.process_set_id in (None, _lib.GLOBAL_PROCESS_SET):
        return False
    rc = _lib.lib.kolo_remove_process_set(process_set.process_set_id)
    raise_for_call(rc, "remove_process_set(%s)" % process_set)
    with _lock:
        _registered.pop(process_set.process_set_id, None)
    process_set._invalidate()
    return True


def resolve(process_set):
    """The registered id of `process_set` (a ProcessSet; None means global)."""
    if process_set is None:
        return _lib.GLOBAL_PROCESS_SET
    if not isinstance(process_set, ProcessSet):
        raise ValueError("process_set must be a ProcessSet; got %r" % (process_set,))
    if process_set.process_set_id is None:
        raise ValueError("%s is not registered; call add_process_set() first (process sets are "
                         "dropped at shutdown and at every elastic reset: add them again, e.g. in "
                         "a reset callback)" % process_set)
    return process_set.process_set_id
