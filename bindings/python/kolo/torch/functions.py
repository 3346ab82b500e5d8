# SPDX-License-Identifier: Apache-2.0
"""horovod.torch.functions: broadcast model and optimizer state, broadcast/gather objects."""

import io
import pickle

import torch

from kolo import _lib, common
from kolo import process_sets as _ps
from kolo.basics import rank
from kolo.process_sets import global_process_set
from kolo.torch.mpi_ops import (allgather, broadcast_, broadcast_async_, synchronize)

try:
    import cloudpickle as _pickler
except ImportError:  # plain pickle still serves objects that need no code by value
    _pickler = pickle


def _dumps(obj):
    buf = io.BytesIO()
    _pickler.dump(obj, buf)
    return buf.getvalue()


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    """Copies rank root_rank's tensors into every rank's tensors, in place.

    `params` is a state_dict (or any mapping name -> tensor; broadcast in sorted key order), or
    a sequence of (name, tensor) pairs or of tensors (e.g. model.named_parameters() or
    model.parameters()). The names become the ops' names, so they must agree across ranks.
    """
    if isinstance(params, dict):
        items = sorted(params.items())
    elif isinstance(params, (str, bytes)) or not hasattr(params, "__iter__"):
        raise ValueError("invalid params of type: %s" % type(params))
    else:
        items = [p if isinstance(p, tuple) else (None, p) for p in params]
    for name, p in items:
        if not isinstance(p, torch.Tensor):
            raise ValueError("broadcast_parameters: %r is a %s, not a tensor"
                             % (name, type(p).__name__))
    handles = [broadcast_async_(p, root_rank, None if name is None else str(name),
                                process_set=process_set) for name, p in items]
    for handle in handles:
        synchronize(handle)


def _dumps_or_none(obj):
    """(bytes, None), or (None, the exception) when obj cannot be serialized."""
    try:
        return _dumps(obj), None
    except Exception as e:  # noqa: BLE001 (re-raised by the caller after telling the others)
        return None, e


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Returns rank root_rank's `obj` on every rank (serialized with cloudpickle).

    Two broadcasts: the byte count (int64), then the bytes. With name=None the ops are named
    "broadcast_object.noname.<n>" from a counter, so calls need not pass the same object type
    on every rank (Horovod derives the default name from the type). An object the root cannot
    serialize raises there, and a count of -1 makes the other ranks raise too (Horovod's
    would wait for the bytes)."""
    if name is None:
        # The set is checked before a name is drawn: a set that is not registered (removed,
        # or never added) raises here without moving this rank's name counter.
        ps_id = _ps.resolve(process_set or global_process_set)
        name = common.names.make("broadcast_object", None, ps_id)
    if rank() == root_rank:
        data, error = _dumps_or_none(obj)
        size = torch.tensor([-1 if error is not None else len(data)], dtype=torch.int64)
        broadcast_(size, root_rank, name + ".sz", process_set)
        if error is not None:
            raise error
        payload = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    else:
        size = torch.tensor([0], dtype=torch.int64)
        broadcast_(size, root_rank, name + ".sz", process_set)
        if size.item() < 0:
            raise common.KoloInternalError(
                "broadcast_object %r: root rank %d could not serialize its object (its own "
                "error says why)" % (name, root_rank), _lib.ERR_INVALID_ARGUMENT)
        payload = torch.empty(int(size.item()), dtype=torch.uint8)
    broadcast_(payload, root_rank, name + ".t", process_set)
    if rank() == root_rank:
        return obj
    return pickle.loads(payload.numpy().tobytes())


def allgather_object(obj, name=None, process_set=global_process_set):
    """Returns the list of every rank's `obj`, in rank order of the set. An object that a rank
    cannot serialize raises there, and on the others naming that rank (a count of -1)."""
    if name is None:
        # The set is checked before a name is drawn: a set that is not registered (removed,
        # or never added) raises here without moving this rank's name counter.
        ps_id = _ps.resolve(process_set or global_process_set)
        name = common.names.make("allgather_object", None, ps_id)
    data, error = _dumps_or_none(obj)
    sizes = allgather(torch.tensor([-1 if error is not None else len(data)], dtype=torch.int64),
                      name + ".sz", process_set).tolist()
    if error is not None:
        raise error
    if min(sizes) < 0:
        ranks = (process_set or global_process_set).ranks or list(range(len(sizes)))
        bad = [ranks[i] for i, n in enumerate(sizes) if n < 0]
        raise common.KoloInternalError(
            "allgather_object %r: rank(s) %s could not serialize their object (their own error "
            "says why)" % (name, bad), _lib.ERR_INVALID_ARGUMENT)
    payload = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    gathered = allgather(payload, name + ".t", process_set).numpy().tobytes()
    out, offset = [], 0
    for n in sizes:
        out.append(pickle.loads(gathered[offset:offset + n]))
        offset += n
    return out


def _is_distributed(optimizer):
    return getattr(type(optimizer), "_kolo_distributed", False)


def _initialize_state(optimizer):
    """A new optimizer has no state; run one step with zero gradients (as Horovod does) so
    that every rank holds the state tensors that the broadcast then overwrites. As in Horovod,
    a trainable parameter whose .grad was None keeps the zero gradient afterwards (scripts
    broadcast or read it), and a frozen one (requires_grad=False) is left alone: no gradient,
    no state, nothing broadcast. A gradient that already existed is put back, and so are the
    parameters' values: a step with zero gradients still moves them under weight decay (SGD's,
    Adam's, AdamW's), which would undo the broadcast_parameters that scripts call just before
    (Horovod leaves them moved)."""
    saved = {}
    values = {}
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.requires_grad and p not in optimizer.state:
                saved[p] = p.grad
                values[p] = p.detach().clone()
                p.grad = torch.zeros_like(p)
                if isinstance(optimizer, torch.optim.SparseAdam):
                    p.grad = p.grad.to_sparse()
    if not saved:
        return
    if _is_distributed(optimizer):
        # Its step() would allreduce the zero gradients; skip to the wrapped optimizer's step.
        super(type(optimizer), optimizer).step()
    else:
        optimizer.step()
    with torch.no_grad():
        for p, value in values.items():
            p.copy_(value)
    for p, grad in saved.items():
        if grad is not None:
            p.grad = grad


def _state_layout(optimizer):
    """Rank-independent description of an optimizer's state: per group its parameter count
    and options, per state tensor (group, index, key, shape, dtype, whether it lives on the
    parameter's device), and the non-tensor state values."""
    counts, options, tensors, scalars = [], [], [], {}
    for gi, group in enumerate(optimizer.param_groups):
        counts.append(len(group["params"]))
        options.append({k: v for k, v in group.items() if k != "params"})
        for pi, p in enumerate(group["params"]):
            for key in sorted((optimizer.state.get(p) or {}).keys(), key=str):
                value = optimizer.state[p][key]
                if torch.is_tensor(value):
                    tensors.append((gi, pi, key, tuple(value.shape), str(value.dtype),
                                    value.device == p.device))
                else:
                    scalars[(gi, pi, key)] = value
    return counts, options, tensors, scalars


def broadcast_optimizer_state(optimizer, root_rank, model=None, process_set=global_process_set):
    """Makes every rank's optimizer state and hyper-parameters equal to rank root_rank's.

    The root's layout (param-group options, non-tensor state such as scalar steps, and the
    name, shape and dtype of every state tensor) travels first in one broadcast_object; then
    each state tensor the root holds is broadcast in place, or into a new tensor where this
    rank has none of that shape (a root resumed from a checkpoint with state for some
    parameters only, a fresh optimizer elsewhere), and state the root does not hold is dropped.
    Every rank must hold an optimizer with the same number of parameters per group: otherwise
    every rank raises ValueError naming the ranks that differ."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    if not optimizer.state:
        _initialize_state(optimizer)

    layout = _state_layout(optimizer) if rank() == root_rank else None
    counts, options, tensors, scalars = broadcast_object(
        layout, root_rank, name="optimizer_state.objects", process_set=process_set)
    local = [len(g["params"]) for g in optimizer.param_groups]
    mismatch = int(local != counts)
    flags = allgather(torch.tensor([mismatch], dtype=torch.int32),
                      "optimizer_state.check", process_set).tolist()
    if any(flags):
        ranks = (process_set or global_process_set).ranks or list(range(len(flags)))
        bad = [ranks[i] for i, f in enumerate(flags) if f]
        raise ValueError("broadcast_optimizer_state: the optimizer of rank(s) %s differs from "
                         "root rank %d's (parameters per group: %s on the root, %s on rank %d)"
                         % (bad, root_rank, counts, local, rank()))

    groups = optimizer.param_groups
    kept = {}  # param -> keys the root holds
    handles = []
    for gi, pi, key, shape, dtype, on_param_device in tensors:
        p = groups[gi]["params"][pi]
        kept.setdefault(p, set()).add(key)
        state = optimizer.state[p]
        value = state.get(key)
        if (not torch.is_tensor(value) or tuple(value.shape) != shape
                or str(value.dtype) != dtype):
            device = p.device if on_param_device else torch.device("cpu")
            value = torch.empty(shape, dtype=getattr(torch, dtype.split(".")[-1]),
                                device=device)
            state[key] = value
        handles.append(broadcast_async_(value, root_rank, "optimizer_state.%d.%d.%s"
                                        % (gi, pi, key), process_set=process_set))
    for handle in handles:
        synchronize(handle)

    for (gi, pi, key), value in scalars.items():
        p = groups[gi]["params"][pi]
        kept.setdefault(p, set()).add(key)
        optimizer.state[p][key] = value
    for p in list(optimizer.state.keys()):
        for key in [k for k in optimizer.state[p] if k not in kept.get(p, ())]:
            del optimizer.state[p][key]
        if not optimizer.state[p]:
            del optimizer.state[p]
    for gi, group in enumerate(groups):
        group.update(options[gi])
