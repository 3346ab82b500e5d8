# SPDX-License-Identifier: Apache-2.0
"""configure_optimizers() results and learning-rate schedules for kolo.torch.Trainer.

Accepted return values (Lightning's, restricted to one optimizer): an optimizer; [optimizer];
([optimizer], [scheduler...]); {"optimizer": opt, "lr_scheduler": sched or {"scheduler":
sched, "interval": "epoch"|"step", "frequency": n, "monitor": name}}; [that dict].

The schedulers keep driving the optimizer they were built on: DistributedOptimizer shares its
param_groups (the same dicts), so a learning-rate change reaches the optimizer that steps.
"""

import warnings

import torch

from kolo.torch.functions import broadcast_object


class SchedulerConfig:
    def __init__(self, scheduler, interval="epoch", frequency=1, monitor=None):
        if interval not in ("epoch", "step"):
            raise ValueError("lr_scheduler interval must be 'epoch' or 'step'; got %r"
                             % (interval,))
        if int(frequency) < 1:
            raise ValueError("lr_scheduler frequency must be >= 1; got %r" % (frequency,))
        self.scheduler = scheduler
        self.interval = interval
        self.frequency = int(frequency)
        self.monitor = monitor
        self.is_plateau = isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)
        if self.is_plateau and monitor is None:
            raise ValueError("ReduceLROnPlateau needs {'scheduler': ..., 'monitor': "
                             "'<metric name>'}")


def _scheduler_config(item):
    if isinstance(item, dict):
        if "scheduler" not in item:
            raise ValueError("an lr_scheduler dict needs a 'scheduler' key; got keys %s"
                             % sorted(item))
        unknown = set(item) - {"scheduler", "interval", "frequency", "monitor", "name",
                               "strict"}
        if unknown:
            raise ValueError("unknown lr_scheduler keys: %s" % ", ".join(sorted(unknown)))
        return SchedulerConfig(item["scheduler"], item.get("interval", "epoch"),
                               item.get("frequency", 1), item.get("monitor"))
    return SchedulerConfig(item)


def configure_optimizers(module):
    """Calls module.configure_optimizers(); returns (optimizer, [SchedulerConfig])."""
    out = module.configure_optimizers()
    opts, scheds = None, []
    if isinstance(out, torch.optim.Optimizer):
        opts = [out]
    elif isinstance(out, dict):
        opts, scheds = [out.get("optimizer")], _as_list(out.get("lr_scheduler"))
        if "monitor" in out:
            scheds = [s if isinstance(s, dict) else {"scheduler": s, "monitor": out["monitor"]}
                      for s in scheds]
    elif isinstance(out, (list, tuple)):
        if len(out) == 2 and all(isinstance(x, (list, tuple)) for x in out):
            opts, scheds = list(out[0]), list(out[1])
        elif len(out) == 1 and isinstance(out[0], dict):
            return configure_optimizers(_Returning(out[0]))
        else:
            opts = list(out)
    if not opts or len(opts) != 1 or not isinstance(opts[0], torch.optim.Optimizer):
        raise ValueError("configure_optimizers() must return exactly one torch.optim.Optimizer "
                         "(alone, in a list, as ([opt], [schedulers]) or as {'optimizer': opt, "
                         "'lr_scheduler': ...}); got %r" % (out,))
    configs = [_scheduler_config(s) for s in scheds]
    for c in configs:
        if getattr(c.scheduler, "optimizer", opts[0]) is not opts[0]:
            raise ValueError("an lr_scheduler drives an optimizer that configure_optimizers() "
                             "did not return")
    return opts[0], configs


class _Returning:
    def __init__(self, value):
        self._value = value

    def configure_optimizers(self):
        return self._value


def _as_list(x):
    if x is None:
        return []
    return list(x) if isinstance(x, (list, tuple)) else [x]


class Schedules:
    """Steps the configured schedulers: after optimizer steps ("step") or epochs ("epoch")."""

    def __init__(self, configs, optimizer):
        self.configs = list(configs)
        self.optimizer = optimizer
        self._steps = 0
        self._epochs = 0

    def resume_at(self, epochs, steps):
        """Frequencies count from the start of training, also after a resume."""
        self._epochs, self._steps = int(epochs), int(steps)

    def _step(self, config, metrics=None):
        with warnings.catch_warnings():
            # The scheduler's own optimizer object is wrapped, not stepped, so torch's check
            # that optimizer.step() ran before lr_scheduler.step() cannot see the steps.
            warnings.filterwarnings("ignore", message=r".*lr_scheduler\.step\(\)")
            if config.is_plateau:
                if config.monitor not in metrics:
                    raise KeyError("ReduceLROnPlateau monitors %r, which was not logged "
                                   "(logged: %s)" % (config.monitor,
                                                     ", ".join(sorted(metrics)) or "nothing"))
                config.scheduler.step(float(metrics[config.monitor]))
            else:
                config.scheduler.step()

    def after_step(self):
        self._steps += 1
        for c in self.configs:
            if c.interval == "step" and self._steps % c.frequency == 0:
                self._step(c)

    def epoch_end(self, metrics):
        self._epochs += 1
        for c in self.configs:
            if c.interval == "epoch" and self._epochs % c.frequency == 0:
                self._step(c, metrics)

    def load_state_dicts(self, states):
        if len(states) != len(self.configs):
            raise ValueError("the checkpoint has %d lr_scheduler states; the module configures "
                             "%d" % (len(states), len(self.configs)))
        for c, s in zip(self.configs, states):
            c.scheduler.load_state_dict(s)

    def sync(self, root_rank):
        """Every rank takes root_rank's scheduler states (after root_rank resumed)."""
        states = broadcast_object([c.scheduler.state_dict() for c in self.configs], root_rank,
                                  name="kolo.trainer.lr_schedulers")
        self.load_state_dicts(states)


def load_state_keeping_groups(optimizer, state_dict):
    """optimizer.load_state_dict(state_dict), keeping the param_group dicts as the same objects.

    torch's load_state_dict replaces them with new dicts, which would cut a DistributedOptimizer
    off from the lr schedulers built on the optimizer it wraps (they share those dicts)."""
    groups = optimizer.param_groups
    optimizer.load_state_dict(state_dict)
    for old, new in zip(groups, optimizer.param_groups):
        old.update(new)  # new["params"] is old["params"]
    optimizer.param_groups = groups
