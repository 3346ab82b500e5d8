# SPDX-License-Identifier: Apache-2.0
"""DistributedOptimizer(op=Adasum): Horovod's delta optimizer (horovod.torch's
_DistributedAdasumOptimizer), over kolo's Adasum allreduce.

Adasum combines what each rank would do to the weights, not the raw gradients, so the wrapped
optimizer's own logic (momentum, Adam's moments, weight decay) is applied locally first:

    start = p                      (the weights before the step)
    local step on p alone          (p = start - lr * f(grad), f = the optimizer's rule)
    delta = p - start              (this rank's update)
    delta = Adasum over the ranks of delta   (asynchronous, in the gradient hook)
    p = start + delta              (in step(), once the allreduce completed)

The local step for a parameter runs in its gradient hook, as soon as its gradient has been
accumulated backward_passes_per_step times, so the Adasum of its update overlaps the rest of the
backward pass; step() waits for every update and applies it (parameters whose hook did not fire
are stepped and reduced there). Each rank's optimizer state therefore evolves from its own
gradients, exactly as in Horovod. synchronize() does nothing and skip_synchronize() is refused
(the update is only known after the local step). A rank outside the optimizer's process set
steps locally without communicating. The parameter's tensor holds the delta while its
allreduce is in flight: do not read the weights between backward() and step().
"""

from contextlib import contextmanager

import torch

from kolo.common import Adasum
from kolo.process_sets import global_process_set
from kolo.torch.mpi_ops import allreduce_async_, synchronize
from kolo.torch.optimizer import _DistributedOptimizer, check_named_parameters


class _DistributedAdasumOptimizer:
    """Methods copied into the dynamically created subclass of the user's optimizer class (see
    kolo.torch.optimizer.DistributedOptimizer)."""

    _kolo_distributed = True

    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1,
                 process_set=global_process_set):
        super(self.__class__, self).__init__(params)
        named_parameters = check_named_parameters(self.param_groups, named_parameters)
        if backward_passes_per_step < 1:
            raise ValueError("backward_passes_per_step must be >= 1; got %r"
                             % (backward_passes_per_step,))
        self._compression = compression
        self.process_set = process_set or global_process_set
        self._parameter_names = {p: str(name) for name, p in named_parameters}
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_delay = {p: backward_passes_per_step for _, p in named_parameters}
        self._handles = {}  # param -> (handle, compression ctx)
        self._requires_update = []
        self._hook_handles = []
        self._grad_accs = []
        self._starting_models = {p: torch.zeros_like(p, requires_grad=False)
                                 for _, p in named_parameters}
        self._communicates = self.process_set.included()
        if self._communicates:
            self._register_hooks()

    # The same as the averaging optimizer's (they read only the attributes both set up).
    _register_hooks = _DistributedOptimizer._register_hooks
    _hook = _DistributedOptimizer._hook
    zero_grad = _DistributedOptimizer.zero_grad
    set_backward_passes_per_step = _DistributedOptimizer.set_backward_passes_per_step

    def _allreduce_grad_async(self, p):
        """Steps p alone with the wrapped optimizer, turns p into its update (delta) and
        starts the Adasum of the delta in place."""
        if p.grad is None:
            # Another rank may have a gradient for p: step with zeros so every rank reduces.
            p.grad = torch.zeros_like(p)
        start = self._starting_models[p]
        stashed = []
        for group in self.param_groups:
            stashed.append(group["params"])
            group["params"] = [p] if any(p is v for v in group["params"]) else []
        try:
            start.data.copy_(p.data)
            super(self.__class__, self).step()
            p.data.sub_(start)
        finally:
            for params, group in zip(stashed, self.param_groups):
                group["params"] = params
        compressed, ctx = self._compression.compress(p.data)
        handle = allreduce_async_(compressed, name=self._parameter_names.get(p), op=Adasum,
                                  process_set=self.process_set)
        return handle, ctx

    def _make_hook(self, p):
        def hook(*ignore):
            if p in self._handles and self._handles[p][0] is not None:
                if self._allreduce_delay[p] <= 0:
                    raise AssertionError(
                        "Gradients were computed more than backward_passes_per_step times "
                        "before call to step(). Increase backward_passes_per_step to "
                        "accumulate gradients locally.")
            assert self._allreduce_delay[p] > 0
            handle, ctx = None, None
            self._allreduce_delay[p] -= 1
            if self._allreduce_delay[p] == 0:
                handle, ctx = self._allreduce_grad_async(p)
            self._handles[p] = (handle, ctx)
        return hook

    def synchronize(self):
        """Nothing to do: with Adasum the updates are applied in step()."""

    @contextmanager
    def skip_synchronize(self):
        raise AssertionError("Skipping synchronization is not supported when using Adasum "
                             "optimizer.")
        yield  # pragma: no cover

    def step(self, closure=None):
        if not self._communicates:
            return super(self.__class__, self).step(closure)
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for p in self._requires_update:
            if p not in self._handles or self._handles[p][0] is None:
                # Its hook did not fire (unused in this backward) or fired fewer than
                # backward_passes_per_step times: step and reduce it now.
                self._handles[p] = self._allreduce_grad_async(p)
        try:
            for p, (handle, ctx) in self._handles.items():
                delta = self._compression.decompress(synchronize(handle), ctx)
                start = self._starting_models[p]
                start.data.add_(delta.data.to(start.dtype))
                p.data.copy_(start)
                self._allreduce_delay[p] = self.backward_passes_per_step
        finally:
            self._handles.clear()
        return loss

