# SPDX-License-Identifier: Apache-2.0
"""A Lightning strategy over kolo: `pl.Trainer(strategy=KoloStrategy())`, launched with
`kolorun -np N python3 train.py` (what `Trainer(strategy="horovod")` + horovodrun was).

Works with `lightning` (2.x, lightning.pytorch) or, failing that, `pytorch_lightning`
(1.6+/2.x). This module always imports; without Lightning, LIGHTNING_AVAILABLE is False and
creating KoloStrategy or KoloEnvironment raises an ImportError that says what is missing.

What the strategy does, per Lightning hook:
  - setup_environment: kolo.init() (processes are started by kolorun, never by Lightning);
    rank_zero_only.rank is set so that only rank 0 prints and writes logs/checkpoints.
  - setup: optimizers are wrapped in kolo.torch.DistributedOptimizer
    (backward_passes_per_step = trainer.accumulate_grad_batches); parameters and optimizer
    state are broadcast from rank 0.
  - optimizer_step: the gradient allreduces are awaited right after the closure's backward and
    before the precision plugin clips gradients and the optimizer steps (Lightning runs
    forward and backward inside optimizer.step(closure)).
  - reduce / all_gather / broadcast / barrier: kolo collectives (self.log(..., sync_dist=True)
    goes through reduce).
  - distributed_sampler_kwargs: Lightning shards the loaders with DistributedSampler.
"""

import inspect
import sys
from contextlib import ExitStack

import torch

from kolo import basics
from kolo.common import Average, Max, Min, Sum
from kolo.torch.functions import (broadcast_object, broadcast_optimizer_state,
                                  broadcast_parameters)
from kolo.torch.mpi_ops import allgather, allreduce, barrier
from kolo.torch.optimizer import DistributedOptimizer
from kolo.torch._trainer_optim import load_state_keeping_groups

_flavour = None
_import_error = None
try:
    from lightning.pytorch.strategies import ParallelStrategy as _ParallelStrategy
    from lightning.fabric.plugins.environments import ClusterEnvironment as _ClusterEnvironment
    _flavour = "lightning"
except ImportError as e:  # try the older package name
    _import_error = "lightning: %s" % e
    try:
        from pytorch_lightning.strategies import ParallelStrategy as _ParallelStrategy
        try:
            from lightning_fabric.plugins.environments import (
                ClusterEnvironment as _ClusterEnvironment)
        except ImportError:
            from pytorch_lightning.plugins.environments import (
                ClusterEnvironment as _ClusterEnvironment)
        _flavour = "pytorch_lightning"
    except ImportError as e2:
        _import_error = "%s; pytorch_lightning: %s" % (_import_error, e2)

LIGHTNING_AVAILABLE = _flavour is not None
"""Whether Lightning (`lightning` or `pytorch_lightning`) can be imported."""
LIGHTNING_PACKAGE = _flavour  # "lightning", "pytorch_lightning" or None
_OPT_IDX_API = (LIGHTNING_AVAILABLE and "opt_idx" in
                inspect.signature(_ParallelStrategy.optimizer_step).parameters)

__all__ = ["KoloStrategy", "KoloEnvironment", "LIGHTNING_AVAILABLE", "reduce_tensor",
           "gather_tensor"]

# ---- collectives in Lightning's terms (plain functions: usable and testable without it) ------


def lightning_reduce_op(reduce_op):
    """Lightning's reduce_op ("mean", "avg", "sum", "max", "min", None or a
    torch.distributed.ReduceOp) -> a kolo op."""
    if reduce_op is None:
        return Average
    name = reduce_op if isinstance(reduce_op, str) else str(reduce_op).rsplit(".", 1)[-1]
    ops = {"mean": Average, "avg": Average, "average": Average, "sum": Sum, "max": Max,
           "min": Min}
    op = ops.get(name.lower())
    if op is None:
        raise ValueError("unsupported reduce_op %r (kolo reduces with mean, sum, max or min)"
                         % (reduce_op,))
    return op


def reduce_tensor(tensor, group=None, reduce_op="mean"):
    """Strategy.reduce: a tensor reduced over every rank; anything else is returned as is."""
    if group is not None:
        raise ValueError("kolo reduces over all ranks; process groups are not supported here")
    if not torch.is_tensor(tensor):
        return tensor
    op = lightning_reduce_op(reduce_op)
    if op == Average and not tensor.is_floating_point():
        tensor = tensor.double()
    return allreduce(tensor, op=op)


def gather_tensor(tensor, group=None, sync_grads=False):
    """Strategy.all_gather: shape (world_size, *tensor.shape), rank order (same shape on every
    rank). Gradients flow back through it only with sync_grads=True."""
    if group is not None:
        raise ValueError("kolo gathers over all ranks; process groups are not supported here")
    if not sync_grads:
        tensor = tensor.detach()
    return allgather(tensor.unsqueeze(0))


def _unwrap(optimizer):
    return getattr(optimizer, "_optimizer", optimizer)  # LightningOptimizer -> torch optimizer


def _missing(*_, **__):
    raise ImportError("kolo.torch.lightning needs Lightning (`lightning` or `pytorch_lightning`), "
                      "which this interpreter cannot import: %s. Without Lightning, use "
                      "kolo.torch.Trainer." % (_import_error,))


def _set_rank_zero(rank):
    """Lightning decides who prints and writes with rank_zero_only.rank; its packages hold
    several such objects (lightning_utilities, fabric, pytorch): set each that is loaded."""
    for path in ("lightning_utilities.core.rank_zero", "lightning.fabric.utilities.rank_zero",
                 "lightning.pytorch.utilities.rank_zero", "lightning_fabric.utilities.rank_zero",
                 "pytorch_lightning.utilities.rank_zero"):
        mod = sys.modules.get(path)
        fn = getattr(mod, "rank_zero_only", None) if mod is not None else None
        if fn is not None:
            fn.rank = rank


if not LIGHTNING_AVAILABLE:
    class KoloEnvironment:  # noqa: D101 - placeholder that explains itself
        def __new__(cls, *args, **kwargs):
            _missing()

    class KoloStrategy:  # noqa: D101
        def __new__(cls, *args, **kwargs):
            _missing()
else:
    class KoloEnvironment(_ClusterEnvironment):
        """The ranks of a kolo job (started by kolorun or mpirun; Lightning starts nothing)."""

        @property
        def creates_processes_externally(self):
            """True: kolorun or mpirun starts the processes, never Lightning."""
            return True

        @property
        def main_address(self):
            """A placeholder, "127.0.0.1": kolo does its own rendezvous."""
            return "127.0.0.1"  # unused: kolo does its own rendezvous

        @property
        def main_port(self):
            """A placeholder, 0: kolo does its own rendezvous."""
            return 0

        @staticmethod
        def detect():
            """Whether kolo is initialized in this process."""
            return basics.is_initialized()

        def world_size(self):
            """The number of processes (kolo.size())."""
            return basics.size()

        def set_world_size(self, size):
            """Does nothing: the launcher fixes the size.

            Args:
                size (int): ignored.
            """
            pass  # fixed by the launcher

        def global_rank(self):
            """This process's global rank (kolo.rank())."""
            return basics.rank()

        def set_global_rank(self, rank):
            """Does nothing: the launcher fixes the rank.

            Args:
                rank (int): ignored.
            """
            pass

        def local_rank(self):
            """This process's rank on its host (kolo.local_rank())."""
            return basics.local_rank()

        def node_rank(self):
            """The index of this process's host (kolo.cross_rank())."""
            return basics.cross_rank()

        def teardown(self):
            """Does nothing: kolo's runtime outlives the Lightning run."""
            pass

    class KoloStrategy(_ParallelStrategy):
        """Data-parallel training over kolo; see the module docstring.

        scale_lr: multiply every learning rate (and schedulers' base_lrs) by the number of
        ranks at setup, as Lightning's old HorovodStrategy always did (default False)."""

        strategy_name = "kolo"
        """The name to pass as pl.Trainer(strategy="kolo") once registered."""

        def __init__(self, accelerator=None, parallel_devices=None, checkpoint_io=None,
                     precision_plugin=None, scale_lr=False, **kwargs):
            if not basics.is_initialized():
                basics.init()
            accepted = inspect.signature(_ParallelStrategy.__init__).parameters
            args = {"accelerator": accelerator, "parallel_devices": parallel_devices,
                    "cluster_environment": KoloEnvironment(), "checkpoint_io": checkpoint_io}
            precision = kwargs.pop("precision", None) or precision_plugin
            key = "precision_plugin" if "precision_plugin" in accepted else "precision"
            args[key] = precision
            args.update(kwargs)
            super().__init__(**args)
            self.scale_lr = bool(scale_lr)
            self._exit_stack = None
            _set_rank_zero(basics.rank())

        # -- topology
        @property
        def global_rank(self):
            """This process's global rank (kolo.rank())."""
            return basics.rank()

        @property
        def local_rank(self):
            """This process's rank on its host (kolo.local_rank())."""
            return basics.local_rank()

        @property
        def node_rank(self):
            """The index of this process's host (kolo.cross_rank())."""
            return basics.cross_rank()

        @property
        def world_size(self):
            """The number of processes (kolo.size())."""
            return basics.size()

        @property
        def is_distributed(self):
            """Always True."""
            return True

        @property
        def root_device(self):
            """cuda:<local rank> when the parallel devices are CUDA devices, else the CPU."""
            devices = self.parallel_devices or []
            if devices and devices[0].type == "cuda":
                return torch.device("cuda", basics.local_rank())
            return torch.device("cpu")

        @property
        def distributed_sampler_kwargs(self):
            """The DistributedSampler arguments: num_replicas is the size, rank the global rank."""
            return {"num_replicas": self.world_size, "rank": self.global_rank}

        @property
        def handles_gradient_accumulation(self):
            """True: DistributedOptimizer allreduces once per accumulation window."""
            return True

        def set_world_ranks(self):
            """Sets Lightning's rank_zero_only.rank to this rank."""
            _set_rank_zero(basics.rank())

        def _configure_launcher(self):
            self._launcher = None  # kolorun started the processes

        def setup_environment(self):
            """Calls kolo.init() when needed, sets the ranks, then runs Lightning's setup."""
            if not basics.is_initialized():
                basics.init()
            self.set_world_ranks()
            super().setup_environment()

        def model_to_device(self):
            """Moves the model to root_device, and selects that CUDA device."""
            if self.root_device.type == "cuda":
                torch.cuda.set_device(self.root_device)
            self.model.to(self.root_device)

        # -- training
        def setup(self, trainer):
            """Wraps the optimizers and makes every rank start from rank 0's state.

            When training, each optimizer becomes a DistributedOptimizer, with
            backward_passes_per_step set to trainer.accumulate_grad_batches. With scale_lr, the
            learning rates are multiplied by the size first. Then the optimizer state and the
            parameters are broadcast from rank 0.

            Args:
                trainer (lightning.pytorch.Trainer): the Lightning Trainer.
            """
            self.model_to_device()
            super().setup(trainer)
            self._exit_stack = ExitStack()
            if not trainer.training:
                return
            optimizers = [_unwrap(o) for o in self.optimizers]
            if self.scale_lr:
                for opt in optimizers:
                    for group in opt.param_groups:
                        group["lr"] *= self.world_size
                for config in self.lr_scheduler_configs:
                    if hasattr(config.scheduler, "base_lrs"):
                        config.scheduler.base_lrs = [lr * self.world_size
                                                     for lr in config.scheduler.base_lrs]
            module = self.lightning_module
            passes = int(getattr(trainer, "accumulate_grad_batches", 1) or 1)
            wrapped = []
            for opt in optimizers:
                if not getattr(type(opt), "_kolo_distributed", False):
                    in_opt = {p for g in opt.param_groups for p in g["params"]}
                    named = [(n, p) for n, p in module.named_parameters() if p in in_opt]
                    state = opt.state
                    opt = DistributedOptimizer(opt, named_parameters=named,
                                               backward_passes_per_step=passes)
                    opt.state.update(state)
                wrapped.append(opt)
            # broadcast_optimizer_state may run a zero-gradient step to create the state;
            # keep this rank's parameters out of it, then everyone takes rank 0's.
            saved = [p.detach().clone() for p in module.parameters()]
            for opt in wrapped:
                broadcast_optimizer_state(opt, root_rank=0)
            with torch.no_grad():
                for p, s in zip(module.parameters(), saved):
                    p.copy_(s)
            broadcast_parameters(module.state_dict(), root_rank=0)
            self.optimizers = wrapped
            for opt in wrapped:
                # step() must not wait again: optimizer_step synchronizes after backward.
                self._exit_stack.enter_context(opt.skip_synchronize())

        def optimizer_step(self, optimizer, *args, **kwargs):
            # (optimizer, closure, model=None, **kw); pytorch_lightning < 2.0 passed an
            # opt_idx before the closure.
            """Runs Lightning's optimizer step, waiting for the gradient allreduces after backward.

            The wait comes before the precision plugin clips gradients and the optimizer steps.

            Args:
                optimizer (torch.optim.Optimizer): the optimizer to step.
                *args (object): Lightning's arguments: the closure, and an opt_idx before it in
                    pytorch_lightning before 2.0.
                **kwargs (object): Lightning's keyword arguments.

            Returns:
                result (object): what Lightning's optimizer_step returns.
            """
            def synchronized(closure):
                def run():
                    result = closure()
                    for opt in self.optimizers:
                        _unwrap(opt).synchronize()
                    return result
                return run
            args = list(args)
            if "closure" in kwargs:
                kwargs["closure"] = synchronized(kwargs["closure"])
            else:
                i = 1 if _OPT_IDX_API else 0
                args[i] = synchronized(args[i])
            return super().optimizer_step(optimizer, *args, **kwargs)

        def load_optimizer_state_dict(self, checkpoint):
            # Keep the param_group dicts shared with the optimizers the lr schedulers drive.
            """Loads the optimizer states of a checkpoint into the wrapped optimizers.

            The param_group dicts stay the ones the LR schedulers hold.

            Args:
                checkpoint (dict): a Lightning checkpoint with "optimizer_states".
            """
            for opt, state in zip(self.optimizers, checkpoint["optimizer_states"]):
                load_state_keeping_groups(_unwrap(opt), state)

        # -- collectives
        def reduce(self, tensor, group=None, reduce_op="mean"):
            """Reduces a tensor over every rank, as reduce_tensor().

            Args:
                tensor (torch.Tensor): a tensor; anything else is returned as is.
                group (object): must be None.
                reduce_op (str): "mean" (the default), "sum", "max" or "min".

            Returns:
                result (torch.Tensor): the reduced tensor.
            """
            return reduce_tensor(tensor, group, reduce_op)

        def all_gather(self, tensor, group=None, sync_grads=False):
            """Gathers a tensor from every rank, as gather_tensor().

            Args:
                tensor (torch.Tensor): this rank's tensor, the same shape on every rank.
                group (object): must be None.
                sync_grads (bool): whether gradients flow back through the result.

            Returns:
                result (torch.Tensor): shape (world_size, *tensor.shape), in rank order.
            """
            return gather_tensor(tensor, group, sync_grads)

        def broadcast(self, obj, src=0):
            """Returns rank src's object on every rank (pickled).

            Args:
                obj (object): any picklable object.
                src (int): the rank that sends.

            Returns:
                obj (object): src's object.
            """
            return broadcast_object(obj, src)

        def barrier(self, *args, **kwargs):
            """Blocks until every rank called barrier().

            Args:
                *args (object): ignored.
                **kwargs (object): ignored.
            """
            barrier()

        def teardown(self):
            """Stops skipping the optimizers' synchronize, then runs Lightning's teardown."""
            if self._exit_stack is not None:
                self._exit_stack.close()
                self._exit_stack = None
            super().teardown()

        @classmethod
        def register_strategies(cls, strategy_registry):
            """Registers this class in Lightning's strategy registry under the name "kolo".

            Args:
                strategy_registry (object): Lightning's StrategyRegistry.
            """
            strategy_registry.register(cls.strategy_name, cls,
                                       description="data-parallel training over kolo")
