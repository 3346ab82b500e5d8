"""TorchState (horovod.torch.elastic.TorchState): a model, an optimizer, samplers and plain
attributes as one elastic state.

TorchState(model=m, optimizer=o, sampler=s, epoch=0, batch=0) exposes state.model,
state.optimizer, state.sampler, state.epoch, state.batch. Each torch object has a handler:
the model's and optimizer's state_dict are deep-copied at commit and loaded back at restore,
and sync broadcasts the parameters and the optimizer state from rank 0
(broadcast_parameters, broadcast_optimizer_state); an ElasticSampler's processed indices are
united over every rank and then broadcast (sampler.py); other attributes are ObjectState's.
Not thread-safe.
"""

import copy

import torch

from kolo.elastic.state import ObjectState as _ObjectState
from kolo.torch import functions
from kolo.torch.elastic.sampler import ElasticSampler
from kolo.basics import rank


class ObjectState(_ObjectState):
    """kolo.elastic.ObjectState broadcasting with kolo.torch's broadcast_object."""

    def __init__(self, bcast_object=None, get_rank=None, **kwargs):
        super().__init__(bcast_object=bcast_object or functions.broadcast_object,
                         get_rank=get_rank or rank, **kwargs)


class _ModelHandler:
    def __init__(self, model):
        self.value = model
        self.saved = copy.deepcopy(model.state_dict())

    def save(self):
        self.saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self.saved)

    def sync(self):
        functions.broadcast_parameters(self.value.state_dict(), root_rank=0)


class _OptimizerHandler:
    def __init__(self, optimizer):
        self.value = optimizer
        self.saved = copy.deepcopy(optimizer.state_dict())

    def save(self):
        self.saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self.saved)

    def sync(self):
        functions.broadcast_optimizer_state(self.value, root_rank=0)


class _SamplerHandler:
    def __init__(self, sampler):
        self.value = sampler
        self.saved = copy.deepcopy(sampler.state_dict())

    def save(self):
        self.saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self.saved)

    def sync(self):
        # Every rank's processed indices of this epoch, united, then rank 0's epoch with them.
        processed = set()
        for part in functions.allgather_object(self.value.processed_indices):
            processed.update(part)
        state = self.value.state_dict()
        state["processed_indices"] = processed
        self.value.load_state_dict(functions.broadcast_object(state, root_rank=0))


def _handler(value):
    if isinstance(value, torch.nn.Module):
        return _ModelHandler(value)
    if isinstance(value, torch.optim.Optimizer):
        return _OptimizerHandler(value)
    if isinstance(value, ElasticSampler):
        return _SamplerHandler(value)
    return None


class TorchState(ObjectState):
    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(model=model, optimizer=optimizer)
        self._handlers = {}
        plain = {}
        for name, value in kwargs.items():
            handler = _handler(value)
            if handler is not None:
                self._handlers[name] = handler
            elif value is not None or name not in ("model", "optimizer"):
                plain[name] = value
        for name, handler in self._handlers.items():
            object.__setattr__(self, name, handler.value)
        super().__init__(**plain)

    def save(self):
        for handler in self._handlers.values():
            handler.save()
        super().save()

    def restore(self):
        for handler in self._handlers.values():
            handler.restore()
        super().restore()

    def sync(self):
        for handler in self._handlers.values():
            handler.sync()
        super().sync()
