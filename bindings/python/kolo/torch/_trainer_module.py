# SPDX-License-Identifier: Apache-2.0
"""KoloModule (the optional base class of modules trained by kolo.torch.Trainer) and how the
Trainer lends log()/log_dict()/trainer to duck-typed modules for the duration of a call."""

import functools
import sys
import warnings
from contextlib import contextmanager

import torch

from kolo import basics

_LOG_KWARGS_IGNORED = ("enable_graph", "sync_dist", "sync_dist_group", "add_dataloader_idx",
                       "metric_attribute")


def _log(trainer, name, value, prog_bar=False, logger=True, on_step=None, on_epoch=None,
         reduce_fx="mean", enable_graph=False, sync_dist=True, sync_dist_group=None,
         add_dataloader_idx=True, batch_size=None, metric_attribute=None, rank_zero_only=False):
    """Lightning's log() signature. Every metric is reduced over the ranks (sync_dist and
    sync_dist_group are accepted and ignored); rank_zero_only=True keeps rank 0's value."""
    if rank_zero_only and basics.rank() != 0:
        return
    trainer._log(name, value, prog_bar=prog_bar, logger=logger, on_step=on_step,
                 on_epoch=on_epoch, reduce_fx=reduce_fx, batch_size=batch_size)


def _log_dict(trainer, dictionary, **kwargs):
    for name, value in dictionary.items():
        _log(trainer, name, value, **kwargs)


class KoloModule(torch.nn.Module):
    """Base class for LightningModule-style modules trained by kolo.torch.Trainer.

    Subclasses define training_step(batch, batch_idx), configure_optimizers(),
    train_dataloader() and optionally validation_step / val_dataloader and the hooks setup,
    on_fit_start, on_fit_end, on_train_epoch_start, on_train_epoch_end,
    on_validation_epoch_start, on_validation_epoch_end. They get log(), log_dict(), and the
    trainer, current_epoch, global_step, global_rank, world_size and device properties."""

    def log(self, name, value, **kwargs):
        """Logs a metric for the Trainer, with Lightning's log() arguments.

        Every metric is reduced over the ranks; sync_dist and sync_dist_group are accepted and
        ignored. Outside Trainer.fit() and validate() it warns and drops the value.

        Args:
            name (str): the metric's name.
            value (float): a number or a one-element tensor.
            **kwargs (object): Lightning's log() options: prog_bar, logger, on_step, on_epoch,
                reduce_fx ("mean" by default), batch_size, rank_zero_only (True keeps rank 0's
                value), and others that are accepted and ignored.
        """
        trainer = self.__dict__.get("_kolo_trainer")
        if trainer is None:
            warnings.warn("%s.log(%r) was called outside Trainer.fit/validate; the value is "
                          "dropped" % (type(self).__name__, name), stacklevel=2)
            return
        _log(trainer, name, value, **kwargs)

    def log_dict(self, dictionary, **kwargs):
        """Calls log() for each item of a dict.

        Args:
            dictionary (dict): {name: value}.
            **kwargs (object): log()'s options, applied to every item.
        """
        for name, value in dictionary.items():
            self.log(name, value, **kwargs)

    @property
    def trainer(self):
        """The Trainer running this module, or None outside fit() and validate()."""
        return self.__dict__.get("_kolo_trainer")

    @property
    def current_epoch(self):
        """The trainer's current epoch (0 without a trainer)."""
        trainer = self.trainer
        return trainer.current_epoch if trainer is not None else 0

    @property
    def global_step(self):
        """The trainer's count of optimizer steps (0 without a trainer)."""
        trainer = self.trainer
        return trainer.global_step if trainer is not None else 0

    @property
    def global_rank(self):
        """This process's global rank (0 before kolo.init())."""
        return basics.rank() if basics.is_initialized() else 0

    @property
    def world_size(self):
        """The number of processes (1 before kolo.init())."""
        return basics.size() if basics.is_initialized() else 1

    @property
    def device(self):
        """The device of the module's first parameter (the CPU without parameters)."""
        for p in self.parameters():
            return p.device
        return torch.device("cpu")

    def __getstate__(self):
        # The trainer (loaders, optimizer) does not travel with a pickled module.
        state = dict(self.__dict__)
        state.pop("_kolo_trainer", None)
        return state


@contextmanager
def attach(module, trainer):
    """Connects module and trainer for one fit/validate. A KoloModule keeps its trainer
    afterwards (module.trainer.callback_metrics, as in Lightning); a duck-typed module gets
    log/log_dict/trainer only while the call runs, and only where it has none of its own."""
    trainer.model = module
    if isinstance(module, KoloModule):
        module.__dict__["_kolo_trainer"] = trainer
        yield module
        return
    lent = []
    for name, value in (("log", functools.partial(_log, trainer)),
                        ("log_dict", functools.partial(_log_dict, trainer)),
                        ("trainer", trainer)):
        if getattr(module, name, None) is None:
            module.__dict__[name] = value
            lent.append(name)
    try:
        yield module
    finally:
        for name in lent:
            module.__dict__.pop(name, None)


def lightning_module_type():
    """Lightning's LightningModule class when Lightning is already imported, else None (a
    LightningModule can only exist when its package was imported, so nothing is imported)."""
    for package, path in (("lightning", "lightning.pytorch"),
                          ("pytorch_lightning", "pytorch_lightning")):
        if package in sys.modules:
            mod = sys.modules.get(path)
            cls = getattr(mod, "LightningModule", None) if mod is not None else None
            if cls is not None:
                return cls
    return None
