# SPDX-License-Identifier: Apache-2.0
"""TorchState (horovod.torch.elastic.TorchState): models, optimizers, LR schedulers, samplers
and plain attributes as one elastic state.

TorchState(model=m, optimizer=o, sampler=s, lr_scheduler=sch, epoch=0) exposes state.model,
state.optimizer, ... Each attribute gets a handler chosen by its value's type, as Horovod's
handler registry (get_handler_registry / set_handler_registry):

  torch.nn.Module           ModelStateHandler: commit deep-copies its state_dict, restore loads
                            it back, sync broadcasts the parameters and buffers from rank 0
  torch.optim.Optimizer     OptimizerStateHandler: the same with the optimizer's state_dict;
                            sync is broadcast_optimizer_state
  an LR scheduler           LRSchedulerStateHandler (torch.optim.lr_scheduler.LRScheduler /
                            _LRScheduler, and ReduceLROnPlateau): the same with the scheduler's
                            state_dict; sync broadcasts rank 0's
  ElasticSampler            SamplerStateHandler: commit saves the processed indices of every
                            rank together (below); sync gives every rank rank 0's epoch and them
  anything else             a plain value of ObjectState (deep-copied at commit and restore)

A handler keeps the user's own object (never a copy: an LR scheduler stays tied to its
optimizer) and only copies its state_dict. Assigning an attribute (state.model = m2) gives the
handler the new object and saves it at once, as Horovod's set_value (for a sampler that save
is collective, as Horovod's); an assigned value of another kind gets the handler of its kind.
Not thread-safe.

The sampler's commit, as Horovod's SamplerStateHandler.save (allgather_object of the processed
indices): the saved set is the union of every rank's, so the samples a rank processed before
the commit are not trained again when it is lost. Cheaper than Horovod's, with the same
result: a rank whose processed set still holds the last saved union sends only the indices
added since (a generation number checks that the ranks saved that same union; otherwise they
send their whole sets). A sync sends the state once, from rank 0, as Horovod's.
"""

import copy

import torch

from kolo import basics
from kolo.basics import rank
from kolo.elastic.state import ObjectState as _ObjectState
from kolo.torch import functions
from kolo.torch.elastic.sampler import ElasticSampler


class ObjectState(_ObjectState):
    """kolo.elastic.ObjectState broadcasting with kolo.torch's broadcast_object."""

    def __init__(self, bcast_object=None, get_rank=None, **kwargs):
        super().__init__(bcast_object=bcast_object or functions.broadcast_object,
                         get_rank=get_rank or rank, **kwargs)


class StateHandler:
    """One attribute of a TorchState: the user's object and what commit saved of it."""

    def __init__(self, value):
        self.value = value
        self.name = None  # the attribute's name (TorchState sets it): names the collectives

    def save(self):
        raise NotImplementedError()

    def restore(self):
        raise NotImplementedError()

    def sync(self):
        raise NotImplementedError()

    def set_value(self, value):
        self.value = value
        self.save()


class _StateDictHandler(StateHandler):
    """An object with state_dict/load_state_dict: commit deep-copies its state_dict, restore
    loads the copy back into the user's object."""

    def __init__(self, value):
        super().__init__(value)
        self._saved_state = copy.deepcopy(self.value.state_dict())

    def save(self):
        self._saved_state = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved_state)


class ModelStateHandler(_StateDictHandler):
    def sync(self):
        functions.broadcast_parameters(self.value.state_dict(), root_rank=0)


class OptimizerStateHandler(_StateDictHandler):
    def sync(self):
        functions.broadcast_optimizer_state(self.value, root_rank=0)


class LRSchedulerStateHandler(_StateDictHandler):
    def sync(self):
        state = functions.broadcast_object(self.value.state_dict(), root_rank=0,
                                           name=_op_name(self, "sync"))
        self.value.load_state_dict(state)


class SamplerStateHandler(StateHandler):
    """save() keeps this rank's sampler state with the processed indices of every rank, and
    adds them to this rank's sampler (it re-shards only at a reset, so its batches do not
    change); restore() loads the saved state; sync() gives every rank rank 0's state, with the
    processed indices of every rank at rank 0's epoch (also those processed since the last
    commit). When check_host_updates() raises HostsUpdatedInterrupt, the state is saved first
    (State.check_host_updates), while the workers kolorun removes are still there: the samples
    they processed since the last commit are not handed out again (no rollback follows)."""

    def __init__(self, sampler):
        super().__init__(sampler)
        self._saved_sampler_state = copy.deepcopy(self.value.state_dict())
        # Which save produced the saved set: the same number on every rank that saved that same
        # union (or received it from rank 0 in sync); None until this rank did.
        self._generation = None

    def save(self):
        union, generation = self._processed_of_every_rank(only_epoch_of_rank0=False,
                                                          root_only=False)
        state = self.value.state_dict()
        state["processed_indices"] = union
        self._saved_sampler_state = state
        self._generation = generation
        processed = self.value.processed_indices
        if isinstance(processed, set):
            processed |= union
        else:
            self.value.processed_indices = set(processed) | union

    def restore(self):
        state = dict(self._saved_sampler_state)
        state["processed_indices"] = set(state["processed_indices"])  # the saved set stays ours
        self.value.load_state_dict(state)

    def sync(self):
        union, _ = self._processed_of_every_rank(only_epoch_of_rank0=True, root_only=True)
        state = generation = None
        if basics.rank() == 0:
            state = self.value.state_dict()
            state["processed_indices"] = union
            if self._generation is not None and state == self._saved_sampler_state:
                # nothing processed since rank 0's commit: every rank takes that commit as its
                # own (a new worker too), so the next commit sends only new indices again
                generation = self._generation
        state, generation = functions.broadcast_object((state, generation), root_rank=0,
                                                       name=_op_name(self, "sync"))
        if generation is not None:
            saved = dict(state)
            saved["processed_indices"] = set(state["processed_indices"])
            self._saved_sampler_state, self._generation = saved, generation
        self.value.load_state_dict(state)

    def _processed_of_every_rank(self, only_epoch_of_rank0, root_only):
        """(the union of every rank's processed indices, its generation); with root_only the
        union only on rank 0 (None elsewhere). With only_epoch_of_rank0, ranks at another epoch
        than rank 0's (a new worker's fresh sampler) are left out. Collective. After a commit
        every rank's set holds the saved union, so while it still does (the same epoch) a rank
        sends only the indices added since, which the ranks that saved the same union (the
        same generation) add to theirs; the others get whole sets in a second gather."""
        processed = self.value.processed_indices
        if not isinstance(processed, (set, frozenset)):
            processed = set(processed)
        if not basics.is_initialized():
            return set(processed), self._generation
        saved = self._saved_sampler_state.get("processed_indices") or set()
        token = None if self._generation is None else (self._generation, len(saved))
        delta = token is not None and processed.issuperset(saved)
        mine = (token, self.value.epoch, delta, processed - saved if delta else set(processed))
        parts = functions.allgather_object(mine, name=_op_name(self, "processed"))
        if only_epoch_of_rank0:
            chosen = [i for i, p in enumerate(parts) if p[1] == parts[0][1]]
        else:
            chosen = range(len(parts))
        readers = [0] if root_only else range(len(parts))
        me = basics.rank()
        union = None
        if all(parts[r][0] == p[0] for r in readers for p in parts if p[2]):
            if me in readers:
                # a delta stands for the union this rank saved too, plus the delta
                union = set(saved) if any(parts[i][2] for i in chosen) else set()
                for i in chosen:
                    union |= parts[i][3]
        else:
            # deltas against a union a reader did not save (a new worker): whole sets
            again = functions.allgather_object(set(processed) if delta else None,
                                               name=_op_name(self, "processed_full"))
            if me in readers:
                union = set()
                for i in chosen:
                    union |= again[i] if parts[i][2] else parts[i][3]
        generation = 1 + max((p[0][0] for p in parts if p[0] is not None), default=-1)
        return union, generation


def _op_name(handler, what):
    return "kolo.elastic.%s.%s" % (handler.name or type(handler).__name__, what)


def _scheduler_types():
    sched = torch.optim.lr_scheduler
    types = [getattr(sched, n) for n in ("LRScheduler", "_LRScheduler", "ReduceLROnPlateau")
             if isinstance(getattr(sched, n, None), type)]
    return tuple(dict.fromkeys(types))


_handler_registry = [
    (torch.nn.Module, ModelStateHandler),
    (torch.optim.Optimizer, OptimizerStateHandler),
    (_scheduler_types(), LRSchedulerStateHandler),
    (ElasticSampler, SamplerStateHandler),
]


def get_handler_registry():
    """[(type or tuple of types, handler class)], tried in order (Horovod's registry)."""
    return _handler_registry


def set_handler_registry(registry):
    global _handler_registry
    _handler_registry = registry


def _handler_class(value):
    for handler_type, handler_cls in _handler_registry:
        if isinstance(value, handler_type):
            return handler_cls
    return None


class TorchState(ObjectState):
    """An elastic state of models, optimizers, LR schedulers, samplers and plain values.

    Each keyword becomes an attribute: TorchState(model=m, optimizer=o, epoch=0) gives
    state.model, state.optimizer and state.epoch. A handler chosen by the value's type
    saves, restores and syncs it; see the module docstring for the table. Assigning a
    tracked attribute gives its handler the new object and saves it at once, as Horovod's
    set_value does.

    Args:
        model (torch.nn.Module): the model; commit copies its state_dict and sync
            broadcasts rank 0's parameters and buffers.
        optimizer (torch.optim.Optimizer): the optimizer; sync is
            broadcast_optimizer_state.
        **kwargs (object): more values: modules, optimizers, LR schedulers, ElasticSampler objects,
            or plain picklable values kept as ObjectState's.
    """
    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(model=model, optimizer=optimizer)
        handlers, plain = {}, {}
        for name, value in kwargs.items():
            cls = _handler_class(value)
            if cls is not None:
                handlers[name] = cls(value)
                handlers[name].name = name
            else:
                plain[name] = value
        object.__setattr__(self, "_handlers", handlers)
        for name, handler in handlers.items():
            object.__setattr__(self, name, handler.value)
        super().__init__(**plain)

    def __setattr__(self, name, value):
        handlers = self.__dict__.get("_handlers")
        if handlers is None or name.startswith("_"):
            object.__setattr__(self, name, value)
            return
        cls = _handler_class(value)
        plain = self.__dict__.get("_saved_state")
        if name in handlers and type(handlers[name]) is cls:
            handlers[name].set_value(value)  # Horovod's set_value: the new object, saved
        elif cls is not None and (name in handlers or (plain is not None and name in plain)):
            # a tracked attribute now holding an object of another kind: its kind's handler
            handlers[name] = cls(value)
            handlers[name].name = name
            if plain is not None:
                plain.pop(name, None)
        elif name in handlers and plain is not None:
            del handlers[name]  # a plain value now: ObjectState's, saved at the next commit
            plain[name] = copy.deepcopy(value)
        object.__setattr__(self, name, value)

    def save(self):
        # All or nothing: a save that fails part-way (a peer lost in a sampler's collective,
        # after other handlers saved) puts back what every handler held, so that a restore
        # never mixes two commits (a model of the new one with the epoch, batch and samplers
        # of the old one would train the samples in between twice, or skip them). A handler
        # replaces what it saved (never mutates it), so a shallow copy of each one is enough.
        """Saves every handler's object and the plain values; commit() calls it.

        All or nothing: when a handler fails, such as a lost peer in a sampler's collective,
        every handler gets back what it held before. A restore then never mixes two commits.
        Collective when the state holds an ElasticSampler.
        """
        before = [(handler, dict(handler.__dict__)) for handler in self._handlers.values()]
        try:
            for handler in self._handlers.values():
                handler.save()
            super().save()
        except BaseException:
            for handler, saved in before:
                handler.__dict__.clear()
                handler.__dict__.update(saved)
            raise

    def on_reset(self):
        # A sync loads each sampler's state, which re-shards it over the new rank and size; a
        # reset whose sync is skipped (workers were only removed) must re-shard them here.
        """Re-shards each ElasticSampler over the new rank and size, then runs State.on_reset().

        A reset whose sync is skipped (the round only removed workers) still gets samplers
        sharded for the new size.
        """
        for handler in self._handlers.values():
            if isinstance(handler, SamplerStateHandler):
                handler.value.reset()
        super().on_reset()

    def restore(self):
        """Loads every handler's saved copy back into its object, then the plain values."""
        for handler in self._handlers.values():
            handler.restore()
        super().restore()

    def sync(self):
        """Gives every rank rank 0's saved state: each handler's sync, then the plain values.

        Collective: every rank calls it.
        """
        for handler in self._handlers.values():
            handler.sync()
        super().sync()
