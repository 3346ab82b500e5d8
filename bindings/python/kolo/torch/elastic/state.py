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
  ElasticSampler            SamplerStateHandler: commit copies its state_dict (epoch and
                            processed_num, a count of every rank's samples); sync gives every
                            rank rank 0's
  anything else             a plain value of ObjectState (deep-copied at commit and restore)

A handler keeps the user's own object (never a copy: an LR scheduler stays tied to its
optimizer) and only copies its state_dict. Assigning an attribute (state.model = m2) gives the
handler the new object and saves it at once, as Horovod's set_value; an assigned value of
another kind gets the handler of its kind.
Not thread-safe.

An optimizer's restore keeps its param_group dicts (the same objects, updated in place), so
that LR schedulers built on the optimizer a DistributedOptimizer wraps keep driving it.
"""

import copy

import torch

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
    def restore(self):
        # torch's load_state_dict makes new param_group dicts: keep the old ones, which a
        # DistributedOptimizer shares with the optimizer it wraps and its LR schedulers.
        groups = self.value.param_groups
        self.value.load_state_dict(self._saved_state)
        for old, new in zip(groups, self.value.param_groups):
            old.update(new)
        self.value.param_groups = groups

    def sync(self):
        functions.broadcast_optimizer_state(self.value, root_rank=0)


class LRSchedulerStateHandler(_StateDictHandler):
    def sync(self):
        state = functions.broadcast_object(self.value.state_dict(), root_rank=0,
                                           name=_op_name(self, "sync"))
        self.value.load_state_dict(state)


class SamplerStateHandler(StateHandler):
    """Horovod 0.28's: save() keeps a copy of the sampler's state_dict ({"epoch",
    "processed_num"}), restore() loads it back, sync() gives every rank rank 0's current state.
    processed_num counts the samples of every rank, so neither save nor restore is collective.
    When check_host_updates() raises HostsUpdatedInterrupt, the state is saved first
    (State.check_host_updates): the samples processed since the last commit, also by the
    workers kolorun removes, are not handed out again (no rollback follows)."""

    def __init__(self, sampler):
        super().__init__(sampler)
        self._saved_sampler_state = copy.deepcopy(self.value.state_dict())

    def save(self):
        self._saved_sampler_state = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(copy.deepcopy(self._saved_sampler_state))

    def sync(self):
        state = functions.broadcast_object(self.value.state_dict(), root_rank=0,
                                           name=_op_name(self, "sync"))
        self.value.load_state_dict(state)


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
        # All or nothing: a save that fails part-way (a peer lost in the collective of a
        # handler from set_handler_registry, after other handlers saved) puts back what every
        # handler held, so that a restore never mixes two commits (a model of the new one
        # with the epoch, batch and samplers of the old one would train the samples in between
        # twice, or skip them). A handler
        # replaces what it saved (never mutates it), so a shallow copy of each one is enough.
        """Saves every handler's object and the plain values; commit() calls it.

        All or nothing: when a handler fails, such as a lost peer in a custom handler's
        collective, every handler gets back what it held before. A restore then never mixes
        two commits.
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
