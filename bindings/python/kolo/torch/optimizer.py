# SPDX-License-Identifier: Apache-2.0
"""DistributedOptimizer, as horovod.torch.optimizer.

DistributedOptimizer(opt, ...) returns an instance of a class created on the fly that derives
from type(opt) (so isinstance(result, type(opt)) holds and the state_dict format is the
wrapped optimizer's), built on opt.param_groups. A hook on every parameter that requires a
gradient (register_post_accumulate_grad_hook when torch has it, else a hook on the parameter's
grad accumulator) counts backward passes and starts an in-place allreduce of the gradient as
soon as it has been accumulated backward_passes_per_step times, so communication overlaps the
rest of the backward pass. step() first waits for every allreduce (synchronize()) unless it
runs inside `with optimizer.skip_synchronize():` after an explicit synchronize(); step(closure)
averages the gradients of every evaluation of the closure instead. A parameter frozen when the
optimizer was built gets its hook at the first synchronize() after it became trainable.
"""

import os
import warnings
import weakref
from contextlib import contextmanager

import torch

from kolo import common
from kolo.basics import size
from kolo.common import Adasum, Average
from kolo import process_sets as _ps
from kolo.process_sets import global_process_set
from kolo.torch.compression import Compression
from kolo.torch.mpi_ops import (grouped_allreduce_async_, allreduce_async_,
                                sparse_allreduce_async, synchronize)


def _find_duplicates(names):
    seen, dups = set(), set()
    for n in names:
        if n in seen:
            dups.add(n)
        seen.add(n)
    return sorted(dups)


def check_named_parameters(param_groups, named_parameters):
    """The (name, parameter) list of an optimizer: named_parameters checked (tuples, unique
    names, every parameter named), or generated names when it is None."""
    all_params = [p for group in param_groups for p in group["params"]]
    if named_parameters is not None:
        named_parameters = list(named_parameters)
    else:
        named_parameters = [("allreduce.noname.%d.%d" % (i, j), p)
                            for i, group in enumerate(param_groups)
                            for j, p in enumerate(group["params"])]
    if any(not isinstance(p, tuple) or len(p) != 2 for p in named_parameters):
        raise ValueError("named_parameters should be a sequence of tuples (name, parameter), "
                         "usually produced by model.named_parameters().")
    dups = _find_duplicates([name for name, _ in named_parameters])
    if dups:
        raise ValueError("Parameter names in named_parameters must be unique. Found "
                         "duplicates: %s" % ", ".join(str(d) for d in dups))
    named_ids = {id(p) for _, p in named_parameters}
    unnamed = [p for p in all_params if id(p) not in named_ids]
    if unnamed:
        raise ValueError("named_parameters was specified, but %d model parameter(s) were "
                         "not named (shapes: %s)"
                         % (len(unnamed), ", ".join(str(tuple(p.shape)) for p in unnamed)))
    return named_parameters


def _elastic():
    return os.environ.get("KOLO_ELASTIC") == "1" or os.environ.get("HOROVOD_ELASTIC") == "1"


class _Group(tuple):
    """The parameters of one grouped allreduce. A dict key by identity: a plain tuple of N
    tensors hashes all N on every lookup (the gradient hooks look their group up once per
    parameter, so a group of thousands cost millions of tensor hashes a step)."""

    __slots__ = ()
    __hash__ = object.__hash__

    def __eq__(self, other):
        return self is other

    def __ne__(self, other):
        return self is not other


# The DistributedOptimizer whose hook each parameter carries: id(p) -> (weakref to p, weakref to
# the optimizer, its hook handle). Kept here, not as an attribute of the parameter: torch 2.x
# pickles a Parameter's __dict__ (torch.save(model)), and neither weakrefs nor handles pickle.
_HOOK_OWNERS = {}


def _take_hook_over(p, optimizer, handle):
    """Records that `optimizer` hooked p, removing the hook of an earlier optimizer still alive."""
    key = id(p)
    earlier = _HOOK_OWNERS.get(key)
    if earlier is not None and earlier[0]() is p:
        owner = earlier[1]()
        if owner is not None and owner is not optimizer:
            earlier[2].remove()

    def forget(ref, key=key):
        if _HOOK_OWNERS.get(key, (None,))[0] is ref:
            del _HOOK_OWNERS[key]

    _HOOK_OWNERS[key] = (weakref.ref(p, forget), weakref.ref(optimizer), handle)


class _DistributedOptimizer:
    """Methods copied into the dynamically created subclass of the user's optimizer class.
    They use super(self.__class__, self) because that class is made at run time."""

    _kolo_distributed = True

    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1,
                 op=Average, gradient_predivide_factor=1.0, groups=None, sparse_as_dense=False,
                 process_set=global_process_set):
        super(self.__class__, self).__init__(params)
        _ps.resolve(process_set)  # ValueError when the set is not registered
        self._compression = compression
        all_params = [p for group in self.param_groups for p in group["params"]]
        named_parameters = check_named_parameters(self.param_groups, named_parameters)
        if backward_passes_per_step < 1:
            raise ValueError("backward_passes_per_step must be >= 1; got %r"
                             % (backward_passes_per_step,))
        self._parameter_names = {p: str(name) for name, p in named_parameters}
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_delay = {p: backward_passes_per_step for p in all_params}
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set
        self._handles = {}  # param or tuple of params (a group) -> (handle, ctx)
        self._grad_accs = []
        self._hook_handles = []
        self._requires_update = []  # params with hooks, in param_groups order
        self._synchronized = False
        self._should_synchronize = True
        self._hooked = None  # the parameters with hooks; None: no hooks (one rank, not elastic)
        self._groups = self._make_groups(groups, all_params)
        self._group_index = {g: i for i, g in enumerate(self._groups)}
        self._p_to_group = {p: g for g in self._groups for p in g}
        self._group_ready = {g: set() for g in self._groups}
        # An elastic job (kolorun sets KOLO_ELASTIC=1, Horovod HOROVOD_ELASTIC=1) may start at
        # one worker and grow: the hooks must be there already, as in Horovod.
        if self.process_set.included() and (size() > 1 or _elastic()):
            self._register_hooks()

    # ---- setup ------------------------------------------------------------------------------
    @staticmethod
    def _make_groups(groups, all_params):
        trainable = [p for p in all_params if p.requires_grad]
        if groups is None or groups == 0:
            return []
        if isinstance(groups, int):
            if groups < 0:
                raise ValueError("groups must be >= 0 or a list of lists of parameters")
            n = min(groups, len(trainable))
            if n == 0:
                return []
            bounds = [len(trainable) * i // n for i in range(n + 1)]
            return [_Group(trainable[bounds[i]:bounds[i + 1]]) for i in range(n)]
        ids = {id(p) for p in trainable}
        out, seen = [], set()
        for g in groups:
            members = _Group(g)
            for p in members:
                if id(p) not in ids:
                    raise ValueError("groups lists a tensor that is not a trainable parameter "
                                     "of this optimizer")
                if id(p) in seen:
                    raise ValueError("a parameter appears in more than one group")
                seen.add(id(p))
            if members:
                out.append(members)
        return out

    def _register_hooks(self):
        """Calls self._make_hook(p) once each trainable parameter's gradient is accumulated (the
        post-accumulate hook, or the gradient accumulator's hook on older torch)."""
        self._hooked = set()
        self._hook(p for group in self.param_groups for p in group["params"])

    def _hook(self, params):
        """Hooks each trainable parameter of params not hooked yet. A parameter that an earlier
        DistributedOptimizer still alive hooked (an optimizer switched mid-training, the old one
        kept by its lr scheduler) moves to this one: both hooks would start an allreduce of the
        same name (Horovod fails there)."""
        for p in params:
            if not p.requires_grad or p in self._hooked:
                continue
            self._hooked.add(p)
            self._requires_update.append(p)
            self._allreduce_delay.setdefault(p, self.backward_passes_per_step)
            if hasattr(p, "register_post_accumulate_grad_hook"):
                handle = p.register_post_accumulate_grad_hook(self._make_hook(p))
            else:
                p_tmp = p.expand_as(p)
                grad_acc = p_tmp.grad_fn.next_functions[0][0]
                handle = grad_acc.register_hook(self._make_hook(p))
                self._grad_accs.append(grad_acc)
            self._hook_handles.append(handle)
            _take_hook_over(p, self, handle)

    def _hook_unfrozen(self):
        """A parameter that was frozen (requires_grad=False) when the optimizer was built and is
        trainable now gets its hook here, and its gradient of this step is averaged with the
        others: Horovod never averages it, and the ranks' weights drift apart silently."""
        if self._hooked is None:
            return
        params = [p for group in self.param_groups for p in group["params"]]
        if len(self._hooked) < len(params):
            self._hook(params)

    # ---- communication ----------------------------------------------------------------------
    def _scales(self):
        if self.op == Average:
            # The runtime divides by the set size after postscale: pre 1/f, post f.
            return 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        return 1.0, 1.0

    def _ensure_grad(self, p):
        if p.grad is None:
            # Another rank may have a gradient for p (a dynamic graph): contribute zeros.
            p.grad = torch.zeros_like(p)

    @staticmethod
    def _dense(grad):
        # sparse_as_dense and groups reduce a dense copy of a sparse gradient; synchronize()
        # makes the result sparse again (the optimizer may take sparse gradients only).
        return grad.to_dense() if grad.is_sparse else grad

    def _write_grad(self, p, output, ctx):
        if output.is_sparse:  # the sparse allreduce's result
            p.grad = output
            return
        value = self._compression.decompress(output, ctx)
        if p.grad.is_sparse:
            p.grad = value.to_sparse()
        else:
            p.grad.set_(value)

    def _allreduce_grad_async(self, p):
        self._ensure_grad(p)
        name = self._parameter_names.get(p)
        if p.grad.is_sparse and not self.sparse_as_dense:
            return sparse_allreduce_async(p.grad, name, self.op, self.process_set), None
        compressed, ctx = self._compression.compress(self._dense(p.grad))
        pre, post = self._scales()
        handle = allreduce_async_(compressed, name=name, op=self.op, prescale_factor=pre,
                                  postscale_factor=post, process_set=self.process_set)
        return handle, ctx

    def _grouped_allreduce_async(self, group):
        for p in group:
            self._ensure_grad(p)
        pairs = [self._compression.compress(self._dense(p.grad)) for p in group]
        pre, post = self._scales()
        # Named after its first parameter, as in Horovod: unique across optimizers of one model.
        first = self._parameter_names.get(group[0])
        name = ("allreduce.group." + first if first is not None
                else "allreduce.group.%d" % self._group_index[group])
        handle = grouped_allreduce_async_([c for c, _ in pairs], name=name, op=self.op,
                                          prescale_factor=pre, postscale_factor=post,
                                          process_set=self.process_set)
        return handle, [ctx for _, ctx in pairs]

    def _make_hook(self, p):
        def hook(*ignore):
            if p in self._handles and self._handles[p][0] is not None:
                if self._allreduce_delay[p] <= 0:
                    raise AssertionError(
                        "Gradients were computed more than backward_passes_per_step times "
                        "before call to step(). Increase backward_passes_per_step to "
                        "accumulate gradients locally.")
            assert not p.grad.requires_grad
            if self._allreduce_delay[p] <= 0:
                raise AssertionError(
                    "a gradient was computed again after its allreduce started and before "
                    "optimizer.step() or optimizer.synchronize() (backward_passes_per_step=%d)"
                    % self.backward_passes_per_step)
            self._allreduce_delay[p] -= 1
            handle, ctx = None, None
            group = self._p_to_group.get(p)
            if group is not None:
                ready = self._group_ready[group]
                if self._allreduce_delay[p] == 0:
                    ready.add(p)
                    if len(ready) == len(group):
                        self._handles[group] = self._grouped_allreduce_async(group)
                        ready.clear()
                return
            if self._allreduce_delay[p] == 0:
                handle, ctx = self._allreduce_grad_async(p)
            self._handles[p] = (handle, ctx)
        return hook

    def synchronize(self):
        """Waits for every gradient allreduce (starting those whose hooks have not fired yet)
        and writes the results into the gradients."""
        if not self.process_set.included():
            self._synchronized = True
            return
        self._hook_unfrozen()
        needed = set(self._requires_update)
        started = set()
        for key in self._handles:
            started.update(key if isinstance(key, tuple) else (key,))
        for group in self._groups:
            if group not in self._handles and any(p in needed for p in group):
                self._handles[group] = self._grouped_allreduce_async(group)
                self._group_ready[group].clear()
                started.update(group)
        for p in self._requires_update:
            if p not in started and p not in self._p_to_group:
                self._handles[p] = self._allreduce_grad_async(p)
        for key, (handle, ctx) in list(self._handles.items()):
            if handle is None:
                self._handles[key] = self._allreduce_grad_async(key)
        failure = None
        try:
            for key, (handle, ctx) in self._handles.items():
                try:
                    output = synchronize(handle)
                except Exception as e:  # noqa: BLE001 (re-raised below, after the others)
                    failure = failure or e
                    continue
                if isinstance(key, tuple):
                    for p, out, c in zip(key, output, ctx):
                        self._allreduce_delay[p] = self.backward_passes_per_step
                        self._write_grad(p, out, c)
                else:
                    self._allreduce_delay[key] = self.backward_passes_per_step
                    self._write_grad(key, output, ctx)
        except BaseException:
            self._start_accumulation_over()
            raise
        finally:
            self._handles.clear()
        if failure is not None:
            # The step failed on this rank (a mismatch, a lost peer): every other allreduce was
            # still waited for (none writes into a gradient later), and the per-parameter
            # counters start over, so that the next backward pass and step() work as if this
            # one had not happened (they raised a bare AssertionError for good before).
            self._start_accumulation_over()
            raise failure
        self._synchronized = True

    def _start_accumulation_over(self):
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step
        for ready in self._group_ready.values():
            ready.clear()

    @contextmanager
    def skip_synchronize(self):
        """Inside this block step() does not synchronize (call synchronize() yourself first,
        e.g. to clip the averaged gradients)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if closure is not None:
            return self._step_with_closure(closure)
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() "
                              "context after optimizer.synchronize(). This can cause training "
                              "slowdown. You may want to consider using "
                              "optimizer.skip_synchronize() context if you use "
                              "optimizer.synchronize() in your code.")
            self.synchronize()
        self._synchronized = False
        return super(self.__class__, self).step()

    def _step_with_closure(self, closure):
        """step(closure): every evaluation of the closure (SGD's one, LBFGS's several)
        recomputes the gradients, so each is averaged before the wrapped optimizer reads them.
        Horovod synchronizes before the closure runs, and the step used this rank's own
        gradients. Allreduces still running from a backward pass outside the closure finish
        first (the closure's zero_grad() would refuse to run with them in flight)."""
        if self._handles:
            self.synchronize()

        def averaged():
            self._synchronized = False
            loss = closure()
            if self._handles or not self._synchronized:  # the closure did not synchronize
                self.synchronize()
            return loss

        try:
            return super(self.__class__, self).step(averaged)
        finally:
            self._synchronized = False

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but "
                                 "before optimizer.step() or optimizer.synchronize(). This is "
                                 "prohibited as it can cause a race condition.")
        return super(self.__class__, self).zero_grad(*args, **kwargs)

    def set_backward_passes_per_step(self, passes):
        if passes < 1:
            raise ValueError("backward_passes_per_step must be >= 1; got %r" % (passes,))
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes

    def load_state_dict(self, *args, **kwargs):
        self._handles = {}
        self._synchronized = False
        self._should_synchronize = True
        self._start_accumulation_over()
        return super(self.__class__, self).load_state_dict(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False,
                         process_set=global_process_set):
    """Wraps `optimizer` so that gradients are averaged (op) over the ranks of process_set
    before each step. See the module docstring; the arguments are horovod.torch's."""
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ValueError("DistributedOptimizer wraps a torch.optim.Optimizer; got %s"
                         % type(optimizer).__name__)
    common.to_c_op(op)
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if gradient_predivide_factor <= 0:
        raise ValueError("gradient_predivide_factor must be > 0")
    if num_groups != 0:
        warnings.warn("Parameter `num_groups` has been replaced by `groups`.",
                      DeprecationWarning, stacklevel=2)
        if groups is None:
            groups = num_groups
    if getattr(type(optimizer), "_kolo_distributed", False):
        raise ValueError("the optimizer is already a DistributedOptimizer")
    set_size = (process_set or global_process_set).size() if op == Adasum else 1
    if op == Adasum and (set_size > 1 or _elastic()):
        # Horovod's delta optimizer (kolo/torch/_adasum_optimizer.py); with one rank Adasum is
        # the identity and the ordinary wrapper below does the same work. As in Horovod,
        # groups and sparse_as_dense do not apply (each parameter's update is reduced alone).
        from kolo.torch._adasum_optimizer import _DistributedAdasumOptimizer as impl
        args = (named_parameters, compression, backward_passes_per_step, process_set)
    else:
        impl = _DistributedOptimizer
        args = (named_parameters, compression, backward_passes_per_step, op,
                gradient_predivide_factor, groups, sparse_as_dense, process_set)
    members = {k: v for k, v in impl.__dict__.items() if k not in ("__dict__", "__weakref__")}
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), members)
    return cls(optimizer.param_groups, *args)
