# SPDX-License-Identifier: Apache-2.0
"""Metrics of kolo.torch.Trainer: what module.log() records on one rank, and the reduction that
makes the values identical on every rank.

Per rank, the values logged for a name during an epoch are combined with the name's reduce_fx
("mean": weighted by batch_size when given, else one weight per call; "sum", "max", "min").
Across ranks the per-rank values are then combined the same way, with one kolo allreduce per
reduce_fx: for "mean", Average over the ranks (the mean of the per-rank values). A rank that
did not log a name takes no part in that name's value (rank_zero_only logging works), which
needs the union of the names: one allgather_object per reduction.
"""

import math

import torch

from kolo.common import Average, Max, Min, Sum
from kolo.torch.functions import allgather_object
from kolo.torch.mpi_ops import allreduce

REDUCE_FX = ("mean", "sum", "max", "min")
_NEUTRAL = {"sum": 0.0, "max": -math.inf, "min": math.inf}
_OPS = {"sum": Sum, "max": Max, "min": Min}


def normalize_fx(reduce_fx):
    """Accepts the strings (and, like Lightning, torch.mean/sum/max/min)."""
    names = {torch.mean: "mean", torch.sum: "sum", torch.max: "max", torch.min: "min",
             max: "max", min: "min", sum: "sum"}
    fx = names.get(reduce_fx, reduce_fx) if not isinstance(reduce_fx, str) else reduce_fx
    if isinstance(fx, str):
        fx = {"avg": "mean", "average": "mean"}.get(fx.lower(), fx.lower())
    if fx not in REDUCE_FX:
        raise ValueError("reduce_fx must be one of %s; got %r" % (", ".join(REDUCE_FX), reduce_fx))
    return fx


def to_float(name, value):
    """A logged value as a Python float: a number, a bool or a one-element tensor."""
    if torch.is_tensor(value):
        if value.numel() != 1:
            raise ValueError("log(%r): the value must be a scalar; got a tensor of shape %s"
                             % (name, tuple(value.shape)))
        return float(value.detach().reshape(()).cpu().item())
    if isinstance(value, (bool, int, float)):
        return float(value)
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item):
        return float(item())
    raise TypeError("log(%r): cannot log a %s (log numbers or one-element tensors)"
                    % (name, type(value).__name__))


class Collector:
    """The values logged on this rank since the last reset(), combined per name."""

    def __init__(self):
        self._acc = {}  # name -> [fx, combined value, total weight, logger, prog_bar]

    def __bool__(self):
        return bool(self._acc)

    def reset(self):
        self._acc = {}

    def add(self, name, value, fx, weight, logger, prog_bar):
        entry = self._acc.get(name)
        if entry is None:
            self._acc[name] = [fx, value * weight if fx == "mean" else value, weight, logger,
                               prog_bar]
            return
        if entry[0] != fx:
            raise ValueError("log(%r): reduce_fx %r differs from the %r used earlier in this "
                             "epoch" % (name, fx, entry[0]))
        if fx == "mean":
            entry[1] += value * weight
        elif fx == "sum":
            entry[1] += value
        elif fx == "max":
            entry[1] = max(entry[1], value)
        else:
            entry[1] = min(entry[1], value)
        entry[2] += weight
        entry[3] = entry[3] or logger
        entry[4] = entry[4] or prog_bar

    def local(self):
        """name -> (fx, value on this rank, logger, prog_bar)."""
        out = {}
        for name, (fx, value, weight, logger, prog_bar) in self._acc.items():
            if fx == "mean":
                value = value / weight if weight else float("nan")
            out[name] = (fx, value, logger, prog_bar)
        return out


def reduce_across_ranks(local, tag):
    """Returns name -> (value, logger, prog_bar), identical on every rank (collective: every
    rank must call it, in the same order, with the same tag). Raises ValueError on every rank
    when ranks log one name with different reduce_fx."""
    gathered = allgather_object(sorted((n, fx, lg, pb) for n, (fx, _, lg, pb) in local.items()),
                                name="kolo.trainer.names.%s" % tag)
    spec = {}  # name -> [fx, logger, prog_bar]
    for rank_names in gathered:
        for name, fx, logger, prog_bar in rank_names:
            if name in spec and spec[name][0] != fx:
                raise ValueError("metric %r is logged with reduce_fx %r on one rank and %r on "
                                 "another" % (name, spec[name][0], fx))
            entry = spec.setdefault(name, [fx, False, False])
            entry[1] = entry[1] or logger
            entry[2] = entry[2] or prog_bar
    out = {}
    for fx in REDUCE_FX:
        names = sorted(n for n, e in spec.items() if e[0] == fx)
        if not names:
            continue
        if fx == "mean":
            # [value * present..., present...]: the ratio of the two averages is the mean over
            # the ranks that logged the name (the plain Average when all did).
            present = [1.0 if n in local else 0.0 for n in names]
            values = [local[n][1] if n in local else 0.0 for n in names]
            t = torch.tensor(values + present, dtype=torch.float64)
            t = allreduce(t, name="kolo.trainer.metrics.%s.mean.%d" % (tag, len(names)),
                          op=Average)
            k = len(names)
            reduced = [(t[i] / t[k + i]).item() for i in range(k)]
        else:
            t = torch.tensor([local[n][1] if n in local else _NEUTRAL[fx] for n in names],
                             dtype=torch.float64)
            t = allreduce(t, name="kolo.trainer.metrics.%s.%s.%d" % (tag, fx, len(names)),
                          op=_OPS[fx])
            reduced = t.tolist()
        for n, v in zip(names, reduced):
            out[n] = (v, spec[n][1], spec[n][2])
    return out
