# SPDX-License-Identifier: Apache-2.0
"""kolo.torch.Trainer: fits a LightningModule-style module on every rank of a kolo job.

The module defines training_step(batch, batch_idx), configure_optimizers() and
train_dataloader(), and optionally validation_step(batch, batch_idx) and val_dataloader(); it
may subclass KoloModule (log(), log_dict(), trainer, current_epoch, ...) or just define those
methods (the Trainer then lends it a log() for the duration of fit/validate). The Trainer does
what a Horovod script does by hand:

  - kolo is initialized if it is not yet (one process without a launcher is a job of size 1);
  - the DataLoaders are re-made over DistributedSampler(num_replicas=size, rank=rank, shuffle as
    in the original loader), keeping batch size, collate_fn and workers; set_epoch(epoch) runs
    before every epoch so each epoch shuffles differently (and identically on every rank);
    with elastic=True the training loader uses kolo.torch.elastic.ElasticSampler instead;
  - the optimizer is wrapped in DistributedOptimizer; parameters and optimizer state (and its
    hyper-parameters) are broadcast from rank 0 before the first step;
  - metrics logged with module.log() are reduced over the steps of the epoch and then over the
    ranks (kolo allreduce, Average for "mean"), so trainer.logged_metrics and
    trainer.callback_metrics are identical on every rank;
  - checkpoints are written by rank 0 only; a failure to write raises on every rank.

Switching a script from one process to N is `kolorun -np N python3 script.py`: nothing in the
script changes. Every method here is collective: all ranks call it in the same order.
"""

import os
import time

import torch

from kolo import basics
from kolo.torch import _trainer_data as data
from kolo.torch import _trainer_metrics as metrics
from kolo.torch import _trainer_progress as progress
from kolo.torch.compression import Compression
from kolo.torch.functions import (broadcast_object, broadcast_optimizer_state,
                                  broadcast_parameters)
from kolo.torch.mpi_ops import allreduce
from kolo.torch.optimizer import DistributedOptimizer
from kolo.common import Max
from kolo.torch._trainer_module import KoloModule, attach, lightning_module_type
from kolo.torch._trainer_optim import (Schedules, configure_optimizers,
                                       load_state_keeping_groups)

__all__ = ["Trainer", "KoloModule"]


class Trainer:
    """Data-parallel fit/validate loop over kolo (see the module docstring).

    Args:
        max_epochs (int): epochs to train.
        checkpoint_dir (str): when set, rank 0 writes <dir>/epoch=<n>.ckpt at the end of
            every epoch. The file is a torch.save of {"epoch", "global_step", "state_dict",
            "optimizer_states", "lr_schedulers", "metrics"}. fit(ckpt_path=...) resumes from
            such a file.
        log_every_n_steps (int): every n optimizer steps, the values logged in that step are
            reduced over the ranks and appended to trainer.step_metrics as
            (global_step, {name: value}). 0 or None turns that off; epoch metrics are always
            kept.
        limit_train_batches (int): run at most this many training batches per epoch.
        limit_val_batches (int): run at most this many validation batches per epoch.
        accumulate_grad_batches (int): an optimizer step every k batches. The loss is divided
            by k, and DistributedOptimizer(backward_passes_per_step=k) allreduces once per
            step.
        gradient_clip_val (float): clip the averaged gradients' global norm to this value.
        check_val_every_n_epoch (int): validate after every n-th training epoch, when the
            module has validation_step and a validation loader.
        use_distributed_sampler (bool): False keeps the loaders as they are. Then each rank
            must shard its data itself and yield the same number of batches; this is checked
            before each epoch.
        seed (int): DistributedSampler's shuffling seed, the same on every rank.
        compression (Compressor): passed to DistributedOptimizer.
        gradient_predivide_factor (float): passed to DistributedOptimizer.
        root_rank (int): the rank whose initial parameters and optimizer state every rank
            starts from.
        verbose (bool): rank 0 prints one line per epoch with the epoch metrics.
        enable_progress_bar (bool): rank 0 draws a tqdm bar per training epoch, with the
            loss, the values logged with prog_bar=True and the rate. Only when stderr is a
            terminal and tqdm is installed. False turns it off (Lightning's argument).
        elastic (bool): run fit() as kolo.torch.elastic's training function, under kolorun's
            elastic mode. The training loader is sharded with an ElasticSampler. The module,
            optimizer, LR schedulers, sampler, epoch and step counters form a TorchState.
            After a lost peer or new hosts, the runtime is re-formed and the state comes from
            the new rank 0. The epoch resumes with exactly the samples not trained yet,
            sharded over the new size. A rollback also restores the LR schedulers.
        elastic_commit_every_n_steps (int): with elastic, commit the state every n optimizer
            steps, and at the end of each epoch.
    """

    def __init__(self, max_epochs=1, checkpoint_dir=None, log_every_n_steps=50,
                 limit_train_batches=None, limit_val_batches=None, accumulate_grad_batches=1,
                 gradient_clip_val=None, check_val_every_n_epoch=1, use_distributed_sampler=True,
                 seed=0, compression=Compression.none, gradient_predivide_factor=1.0,
                 root_rank=0, verbose=True, elastic=False, elastic_commit_every_n_steps=20,
                 enable_progress_bar=True):
        if int(max_epochs) < 0:
            raise ValueError("max_epochs must be >= 0; got %r" % (max_epochs,))
        if int(accumulate_grad_batches) < 1:
            raise ValueError("accumulate_grad_batches must be >= 1; got %r"
                             % (accumulate_grad_batches,))
        if int(check_val_every_n_epoch) < 1:
            raise ValueError("check_val_every_n_epoch must be >= 1")
        for what, limit in (("limit_train_batches", limit_train_batches),
                            ("limit_val_batches", limit_val_batches)):
            if limit is not None and (not isinstance(limit, int) or limit < 0):
                raise ValueError("%s must be None or an int >= 0; got %r" % (what, limit))
        self.max_epochs = int(max_epochs)
        self.checkpoint_dir = None if checkpoint_dir is None else os.fspath(checkpoint_dir)
        self.log_every_n_steps = int(log_every_n_steps or 0)
        self.limit_train_batches = limit_train_batches
        self.limit_val_batches = limit_val_batches
        self.accumulate_grad_batches = int(accumulate_grad_batches)
        self.gradient_clip_val = gradient_clip_val
        self.check_val_every_n_epoch = int(check_val_every_n_epoch)
        self.use_distributed_sampler = bool(use_distributed_sampler)
        self.seed = int(seed)
        self.compression = compression
        self.gradient_predivide_factor = gradient_predivide_factor
        self.root_rank = int(root_rank)
        self.verbose = bool(verbose)
        self.enable_progress_bar = bool(enable_progress_bar)
        self.elastic = bool(elastic)
        self.elastic_commit_every_n_steps = max(1, int(elastic_commit_every_n_steps))
        self._elastic_state = None
        if not basics.is_initialized():
            basics.init()
        # State visible to users and to the module (Lightning's names).
        self.current_epoch = 0
        self.global_step = 0
        self.logged_metrics = {}    # name -> 0-dim float64 tensor, logger=True metrics
        self.callback_metrics = {}  # name -> 0-dim float64 tensor, every metric
        self.progress_bar_metrics = {}
        self.metrics_history = []   # one {"epoch": n, name: float, ...} per epoch
        self.step_metrics = []      # (global_step, {name: float}) every log_every_n_steps
        self.checkpoint_paths = []  # written by rank 0 (the same list on every rank)
        self.model = None           # the module of the last fit/validate
        self.optimizer = None       # the DistributedOptimizer of the last fit
        self.lr_schedulers = []
        self.train_dataloader = None
        self.train_sampler = None
        self.val_dataloader = None
        self.val_sampler = None
        self.training = False
        self._epoch_log = metrics.Collector()
        self._step_log = metrics.Collector()
        self._in_step = False
        self._epoch_start_batch = 0

    # ---- topology ----------------------------------------------------------------------------
    @property
    def global_rank(self):
        """This process's global rank (kolo.rank())."""
        return basics.rank()

    @property
    def world_size(self):
        """The number of processes (kolo.size())."""
        return basics.size()

    @property
    def is_global_zero(self):
        """Whether this process is rank 0."""
        return basics.rank() == 0

    @property
    def last_checkpoint_path(self):
        """The path of the last checkpoint rank 0 wrote, or None."""
        return self.checkpoint_paths[-1] if self.checkpoint_paths else None

    # ---- logging (called through module.log) -------------------------------------------------
    def _log(self, name, value, prog_bar=False, logger=True, on_step=None, on_epoch=None,
             reduce_fx="mean", batch_size=None):
        if not isinstance(name, str) or not name:
            raise ValueError("log(): the name must be a non-empty str; got %r" % (name,))
        fx = metrics.normalize_fx(reduce_fx)
        value = metrics.to_float(name, value)
        weight = 1.0 if batch_size is None else float(batch_size)
        if on_epoch is None or on_epoch:
            self._epoch_log.add(name, value, fx, weight, bool(logger), bool(prog_bar))
        if self.training and self._in_step and (on_step is None or on_step):
            self._step_log.add(name, value, fx, weight, bool(logger), bool(prog_bar))

    def _publish(self, reduced, history):
        for name, (value, logger, prog_bar) in reduced.items():
            t = torch.tensor(value, dtype=torch.float64)
            self.callback_metrics[name] = t
            if logger:
                self.logged_metrics[name] = t
            if prog_bar:
                self.progress_bar_metrics[name] = t
            history[name] = value

    # ---- fit -----------------------------------------------------------------------------------
    def fit(self, module, train_dataloaders=None, val_dataloaders=None, ckpt_path=None):
        """Trains `module` for max_epochs on every rank (collective). `train_dataloaders` /
        `val_dataloaders` replace module.train_dataloader() / val_dataloader(); `ckpt_path`
        resumes from a checkpoint this Trainer wrote (read by rank 0, then broadcast)."""
        self._check_module(module, ("training_step", "configure_optimizers"))
        if train_dataloaders is None and not callable(getattr(module, "train_dataloader", None)):
            raise TypeError("the module has no train_dataloader() and fit() got no "
                            "train_dataloaders")
        with attach(module, self):
            _call_hook(module, "setup", "fit")
            optimizer, self.lr_schedulers = configure_optimizers(module)
            named = _named_parameters_of(module, optimizer)
            self.optimizer = DistributedOptimizer(
                optimizer, named_parameters=named, compression=self.compression,
                backward_passes_per_step=self.accumulate_grad_batches,
                gradient_predivide_factor=self.gradient_predivide_factor)
            # The wrapper is a new optimizer over the same param_groups: carry over any state
            # the module's optimizer already has (it is broadcast from root_rank below).
            self.optimizer.state.update(optimizer.state)
            schedules = Schedules(self.lr_schedulers, self.optimizer)
            if self.elastic and _joined_a_running_job():
                # The others train already: the elastic run's sync brings everything.
                start_epoch = 0
            else:
                start_epoch = self._initial_state(module, self.optimizer, schedules, ckpt_path)
            schedules.resume_at(start_epoch, self.global_step)
            loader = module.train_dataloader() if train_dataloaders is None else train_dataloaders
            self.train_dataloader, self.train_sampler = self._shard(loader, "train_dataloader",
                                                                    elastic=self.elastic)
            val_loader = self._val_loader(module, val_dataloaders)
            _call_hook(module, "on_fit_start")
            if self.elastic:
                self._fit_elastic(module, schedules, start_epoch, loader, val_dataloaders)
            else:
                for epoch in range(start_epoch, self.max_epochs):
                    self._fit_epoch(module, schedules, epoch, val_loader)
            self.current_epoch = max(self.max_epochs - 1, start_epoch)
            _call_hook(module, "on_fit_end")
        return self

    def _fit_epoch(self, module, schedules, epoch, val_loader):
        self.current_epoch = epoch
        started = time.monotonic()
        history = {"epoch": epoch}
        self._train_epoch(module, schedules, history)
        if val_loader is not None and (epoch + 1) % self.check_val_every_n_epoch == 0:
            self._run_validation(module, val_loader, history)
        schedules.epoch_end(self.callback_metrics)
        self.metrics_history.append(history)
        if self.checkpoint_dir is not None:
            self.save_checkpoint(os.path.join(self.checkpoint_dir, "epoch=%d.ckpt" % epoch),
                                 module)
        if self.verbose and self.is_global_zero:
            shown = "  ".join("%s %.4g" % (k, v) for k, v in sorted(history.items())
                              if k != "epoch")
            print("epoch %d/%d  %s  (%.2fs)" % (epoch + 1, self.max_epochs, shown,
                                                time.monotonic() - started), flush=True)

    def _fit_elastic(self, module, schedules, start_epoch, loader, val_dataloaders):
        from kolo.torch import elastic  # here: kolo.torch.elastic imports kolo.torch
        state = self._make_elastic_state(module, schedules, start_epoch)
        self._elastic_state = state

        def reshard():
            # An ElasticSampler re-shards itself at the reset (TorchState); any other loader is
            # made again over the new size, and the epoch skips the committed batches.
            if not isinstance(self.train_sampler, elastic.ElasticSampler):
                self.train_dataloader, self.train_sampler = self._shard(loader,
                                                                        "train_dataloader")
            self._val_loader(module, val_dataloaders)

        state.register_reset_callbacks([reshard])

        @elastic.run
        def run(state):
            self.global_step = state.global_step
            self.metrics_history = list(state.metrics_history)
            schedules.resume_at(state.epoch, state.global_step)
            for epoch in range(state.epoch, self.max_epochs):
                self._fit_epoch(module, schedules, epoch, self.val_dataloader)
                state.epoch, state.batch = epoch + 1, 0
                state.global_step = self.global_step
                state.metrics_history = list(self.metrics_history)
                if isinstance(self.train_sampler, elastic.ElasticSampler):
                    self.train_sampler.set_epoch(epoch + 1)  # at the end, as Horovod asks
                state.commit()

        try:
            run(state)
        finally:
            self._elastic_state = None

    def _make_elastic_state(self, module, schedules, start_epoch):
        """The TorchState of an elastic fit: the module, the optimizer, each LR scheduler
        (lr_scheduler_<i>), the ElasticSampler of the training loader (sampler) and the
        counters (epoch, global_step, batch: this rank's batches done in the epoch)."""
        from kolo.torch import elastic
        from kolo.torch.elastic import state as state_mod
        kwargs = {}
        for i, config in enumerate(schedules.configs):
            if state_mod._handler_class(config.scheduler) is None:
                raise TypeError("Trainer(elastic=True): the LR scheduler %s is no "
                                "torch.optim.lr_scheduler.LRScheduler, so its state cannot be "
                                "committed" % type(config.scheduler).__name__)
            kwargs["lr_scheduler_%d" % i] = config.scheduler
        if isinstance(self.train_sampler, elastic.ElasticSampler):
            if self.train_sampler.epoch != start_epoch:
                self.train_sampler.set_epoch(start_epoch)
            kwargs["sampler"] = self.train_sampler
        return elastic.TorchState(model=module, optimizer=self.optimizer, epoch=start_epoch,
                                  global_step=self.global_step, batch=0,
                                  metrics_history=list(self.metrics_history), **kwargs)

    def _elastic_step(self, batch_idx):
        """In an elastic fit: the position in the epoch after an optimizer step; commits every
        elastic_commit_every_n_steps steps."""
        state = self._elastic_state
        if state is None:
            return
        state.batch = self._epoch_start_batch + batch_idx + 1
        state.global_step = self.global_step
        if self.global_step % self.elastic_commit_every_n_steps == 0:
            state.commit()

    def _train_epoch(self, module, schedules, history):
        from kolo.torch.elastic.sampler import ElasticSampler
        opt = self.optimizer
        sampler = self.train_sampler
        state = self._elastic_state
        # elastic: batches of this epoch done before the last commit, by this rank
        done = state.batch if state is not None else 0
        elastic_sampler = isinstance(sampler, ElasticSampler)
        if elastic_sampler:
            # set_epoch clears the epoch's processed samples: only for another epoch (the
            # elastic fit calls it at the end of each epoch, as Horovod asks)
            if sampler.epoch != self.current_epoch:
                sampler.set_epoch(self.current_epoch)
        elif sampler is not None and hasattr(sampler, "set_epoch"):
            sampler.set_epoch(self.current_epoch)
        limit = self.limit_train_batches
        if elastic_sampler and limit is not None:
            limit = max(0, limit - done)  # the loader holds only the samples not trained yet
        n = data.num_batches(self.train_dataloader, limit)
        data.check_same_count(n, "train_dataloader", "train")
        device = _device_of(module)
        k = self.accumulate_grad_batches
        module.train()
        self.training = True
        self._epoch_log.reset()
        _call_hook(module, "on_train_epoch_start")
        bar = progress.epoch_bar(self, n)
        batch_idx = -1
        # An ElasticSampler resumes with exactly the samples not trained yet; another sampler
        # restarts the epoch, whose first `done` batches are skipped.
        skip = 0 if elastic_sampler else done
        self._epoch_start_batch = done if elastic_sampler else 0
        batch_size = self.train_dataloader.batch_size or 1
        try:
            for batch_idx, batch in enumerate(self.train_dataloader):
                if n is not None and batch_idx >= n:
                    break
                if batch_idx < skip:  # elastic: done before the last commit
                    continue
                if batch_idx % k == 0:
                    opt.zero_grad()
                self._in_step = True
                self._step_log.reset()
                out = module.training_step(data.to_device(batch, device), batch_idx)
                self._in_step = False
                loss = _loss_of(out)
                if loss is not None:
                    (loss / k if k > 1 else loss).backward()
                bar.update(loss)
                if elastic_sampler and state is not None:
                    sampler.record_batch(batch_idx, batch_size)
                if (batch_idx + 1) % k == 0 or (n is not None and batch_idx + 1 == n):
                    self._optimizer_step(module, opt)
                    schedules.after_step()
                    self.global_step += 1
                    self._elastic_step(batch_idx)
                    if self.log_every_n_steps and self.global_step % self.log_every_n_steps == 0:
                        step = metrics.reduce_across_ranks(self._step_log.local(), "step")
                        self.step_metrics.append(
                            (self.global_step, {name: v for name, (v, _, _) in step.items()}))
            if n is None and (batch_idx + 1) % k != 0:
                self._optimizer_step(module, opt)  # the tail of an unsized loader
                schedules.after_step()
                self.global_step += 1
            _call_hook(module, "on_train_epoch_end")
        finally:
            bar.close()
            self._in_step = False
            self.training = False
        self._publish(metrics.reduce_across_ranks(self._epoch_log.local(), "train"), history)

    def _optimizer_step(self, module, opt):
        if self.gradient_clip_val is not None:
            opt.synchronize()
            params = [p for g in opt.param_groups for p in g["params"] if p.grad is not None]
            torch.nn.utils.clip_grad_norm_(params, float(self.gradient_clip_val))
            with opt.skip_synchronize():
                opt.step()
        else:
            opt.step()

    # ---- validate ------------------------------------------------------------------------------
    def validate(self, module, dataloaders=None):
        """Runs validation_step over the (sharded) validation data on every rank; returns
        [{name: value}] with the metrics reduced over the ranks (identical everywhere).
        Outside fit(), rank root_rank's parameters are broadcast first so that every rank
        evaluates the same model."""
        self._check_module(module, ("validation_step",))
        with attach(module, self):
            loader = self._val_loader(module, dataloaders)
            if loader is None:
                raise TypeError("validate(): the module has no val_dataloader() and no "
                                "dataloaders were given")
            broadcast_parameters(module.state_dict(), root_rank=self.root_rank)
            history = {}
            self._run_validation(module, loader, history)
        return [history]

    def _val_loader(self, module, loaders):
        if not callable(getattr(module, "validation_step", None)):
            return None
        if loaders is None:
            make = getattr(module, "val_dataloader", None)
            if not callable(make):
                return None
            loaders = make()
        if loaders is None:
            return None
        self.val_dataloader, self.val_sampler = self._shard(loaders, "val_dataloader",
                                                            shuffle=False)
        return self.val_dataloader

    def _run_validation(self, module, loader, history):
        n = data.num_batches(loader, self.limit_val_batches)
        data.check_same_count(n, "val_dataloader", "val")
        device = _device_of(module)
        was_training = module.training
        module.eval()
        self._epoch_log.reset()
        _call_hook(module, "on_validation_epoch_start")
        try:
            with torch.no_grad():
                for batch_idx, batch in enumerate(loader):
                    if n is not None and batch_idx >= n:
                        break
                    module.validation_step(data.to_device(batch, device), batch_idx)
            _call_hook(module, "on_validation_epoch_end")
        finally:
            module.train(was_training)
        self._publish(metrics.reduce_across_ranks(self._epoch_log.local(), "val"), history)

    # ---- state -----------------------------------------------------------------------------------
    def _shard(self, loader, what, shuffle=None, elastic=False):
        if not self.use_distributed_sampler:
            return loader, getattr(loader, "sampler", None)
        return data.shard_loader(loader, self.global_rank, self.world_size, self.seed, what,
                                 shuffle, elastic)

    def _initial_state(self, module, opt, schedules, ckpt_path):
        """Makes every rank start from root_rank's parameters and optimizer state (restored
        from ckpt_path on root_rank when given); returns the first epoch to run."""
        start = (0, self.global_step)
        if ckpt_path is not None:
            def load():
                ckpt = torch.load(os.fspath(ckpt_path), map_location="cpu")
                module.load_state_dict(ckpt["state_dict"])
                load_state_keeping_groups(opt, ckpt["optimizer_states"][0])
                schedules.load_state_dicts(ckpt.get("lr_schedulers", []))
                return ckpt["epoch"] + 1, ckpt.get("global_step", 0)
            start = self._on_root(load, self.root_rank, "cannot resume from %s" % (ckpt_path,))
        # A fresh optimizer has no state on any rank: then only its hyper-parameters travel
        # (broadcast_optimizer_state would first run a zero-gradient step to create state,
        # which moves the parameters under weight decay and advances Adam's step count).
        has_state = torch.tensor([1 if opt.state else 0], dtype=torch.int64)
        if int(allreduce(has_state, name="kolo.trainer.has_state", op=Max)):
            saved = [p.detach().clone() for p in module.parameters()]
            broadcast_optimizer_state(opt, root_rank=self.root_rank)
            with torch.no_grad():
                for p, s in zip(module.parameters(), saved):
                    p.copy_(s)
        else:
            groups = broadcast_object([{k: v for k, v in g.items() if k != "params"}
                                       for g in opt.param_groups], self.root_rank,
                                      name="kolo.trainer.param_groups")
            for group, options in zip(opt.param_groups, groups):
                group.update(options)
        broadcast_parameters(module.state_dict(), root_rank=self.root_rank)
        start_epoch, self.global_step = broadcast_object(
            start, self.root_rank, name="kolo.trainer.start")
        if ckpt_path is not None:
            schedules.sync(self.root_rank)
        return start_epoch

    def save_checkpoint(self, path, module=None):
        """Rank 0 writes the checkpoint to `path` (atomically: a temporary file, then a
        rename); collective, and an error on rank 0 raises on every rank."""
        module = module if module is not None else self.model
        if module is None:
            raise ValueError("save_checkpoint: no module (call it after fit() or pass one)")
        path = os.fspath(path)

        def save():
            folder = os.path.dirname(path)
            if folder:
                os.makedirs(folder, exist_ok=True)
            state = {
                "epoch": self.current_epoch,
                "global_step": self.global_step,
                "state_dict": module.state_dict(),
                "optimizer_states": [self.optimizer.state_dict()] if self.optimizer else [],
                "lr_schedulers": [s.scheduler.state_dict() for s in self.lr_schedulers],
                "metrics": {k: float(v) for k, v in self.callback_metrics.items()},
                "world_size": self.world_size,
            }
            tmp = "%s.tmp.%d" % (path, os.getpid())
            torch.save(state, tmp)
            os.replace(tmp, path)
            return path
        written = self._on_root(save, 0, "rank 0 could not write the checkpoint %s" % path)
        self.checkpoint_paths.append(written)
        return written

    def _on_root(self, fn, root, what):
        """Runs fn() on rank `root` only and returns its result on every rank; an exception
        there becomes a RuntimeError on every rank (so no rank waits forever for it)."""
        result = None
        if self.global_rank == root:
            try:
                result = (True, fn())
            except Exception as e:  # reported to every rank below
                result = (False, "%s: %s: %s" % (what, type(e).__name__, e))
        ok, value = broadcast_object(result, root, name="kolo.trainer.on_root")
        if not ok:
            raise RuntimeError(value)
        return value

    def _check_module(self, module, required):
        pl_type = lightning_module_type()
        if pl_type is not None and isinstance(module, pl_type):
            raise TypeError("this is a Lightning LightningModule: train it with Lightning's "
                            "Trainer(strategy=kolo.torch.lightning.KoloStrategy()); "
                            "kolo.torch.Trainer takes KoloModule or duck-typed modules")
        missing = [m for m in required if not callable(getattr(module, m, None))]
        if missing:
            raise TypeError("the module (%s) does not define %s"
                            % (type(module).__name__, ", ".join(missing)))
        if not isinstance(module, torch.nn.Module):
            raise TypeError("the module must be a torch.nn.Module; got %s"
                            % type(module).__name__)


def _joined_a_running_job():
    """Whether this process is an elastic worker that joined after the job's first round."""
    from kolo import elastic
    return elastic.is_elastic() and elastic.current_round() > 0


def _call_hook(module, name, *args):
    hook = getattr(module, name, None)
    if callable(hook):
        return hook(*args)
    return None


def _loss_of(out):
    if out is None:
        return None  # a skipped batch: this rank contributes zero gradients to the step
    if isinstance(out, dict):
        if "loss" not in out:
            raise ValueError("training_step returned a dict without a 'loss' key")
        out = out["loss"]
    if not torch.is_tensor(out):
        raise TypeError("training_step must return a loss tensor, a dict with 'loss' or None; "
                        "got %s" % type(out).__name__)
    return out


def _device_of(module):
    for p in module.parameters():
        return p.device
    return torch.device("cpu")


def _named_parameters_of(module, optimizer):
    in_opt = {p for g in optimizer.param_groups for p in g["params"]}
    return [(name, p) for name, p in module.named_parameters() if p in in_opt]
