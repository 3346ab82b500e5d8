# SPDX-License-Identifier: Apache-2.0
"""horovod.torch.mpi_ops' collectives on torch tensors, over kolo's C API.

Semantics kept from Horovod 0.28:
  - allreduce/allgather/broadcast/alltoall/reducescatter return new tensors and are
    differentiable; the trailing-underscore variants work in place; *_async variants return an
    int handle for poll()/synchronize().
  - allreduce defaults to op=Average; `average=` is the deprecated spelling (op wins; both is a
    ValueError). prescale_factor multiplies before the reduction, postscale_factor after.
  - name=None draws "<op>.noname.<n>" from a counter per op type and process set, so ranks
    that issue the same ops in the same order agree on names; a given name becomes
    "<op>.<name>" (so an allreduce and a broadcast may share a user name).
  - broadcast's root_rank is a GLOBAL rank, also with process sets (kolo's C API wants the
    index in the set; the conversion happens here).
  - alltoall's splits may sum to less than dim 0 (the trailing rows are not sent), not more.
  - alltoall(tensor, splits) returns (output, received_splits) when splits is given and just
    the output when splits is None; synchronize() of an alltoall_async handle always returns
    the pair.
  - Errors: ValueError for bad arguments at call time, KoloInternalError (a RuntimeError, also
    exported as HorovodInternalError) from synchronize() when the op failed on the ranks.
"""

import torch

from kolo import _lib, _ops, common
# horovod.torch.mpi_ops also carries the lifecycle, topology and build calls, the reduction ops,
# the process sets and HorovodInternalError; scripts import them from there, so they are here.
from kolo.basics import (ccl_built, cross_rank, cross_size, cuda_built, ddl_built,  # noqa: F401
                         gloo_built, gloo_enabled, init, is_homogeneous, is_initialized,
                         local_rank, local_size, mpi_built, mpi_enabled, mpi_threads_supported,
                         nccl_built, rank, rocm_built, shutdown, size, start_timeline,
                         stop_timeline)
from kolo.common import (Adasum, Average, HorovodInternalError, Max, Min,  # noqa: F401
                         Product, Sum, handle_average_backwards_compatibility)
from kolo.process_sets import (ProcessSet, add_process_set, global_process_set,  # noqa: F401
                               remove_process_set)
from kolo.torch import _adasum_host
from kolo.torch._adapter import TorchAdapter as _A
from kolo.torch.compression import Compression

from kolo.common import poll, synchronize  # noqa: F401 - re-exported (documented there)

# Ops whose backward is the same allreduce of the gradient: Sum and Average (linear), and
# Adasum, whose backward is Adasum of the gradients as in Horovod (not the exact derivative of
# the nonlinear combination).
_SAME_OP_BACKWARD = (Sum, Average, Adasum)


# ---- asynchronous ops ------------------------------------------------------------------------
def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Starts allreduce() and returns at once.

    Takes the arguments of allreduce(), without compression.

    Returns:
        handle (int): synchronize(handle) waits and returns the new tensor; poll(handle) tells
            whether it is done.
    """
    op = common.resolve_op(op, average)
    if _adasum_host.needs_host([tensor], op):
        return _adasum_host.allreduce([tensor], False, name, op, prescale_factor,
                                      postscale_factor, process_set, False)
    return _ops.allreduce_async(_A, tensor, False, name, op, prescale_factor, postscale_factor,
                                process_set)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """Starts allreduce_() and returns at once.

    Takes the arguments of allreduce_().

    Returns:
        handle (int): synchronize(handle) waits and returns `tensor`, which then holds the result;
            poll(handle) tells whether it is done.
    """
    op = common.resolve_op(op, average)
    if _adasum_host.needs_host([tensor], op):
        return _adasum_host.allreduce([tensor], True, name, op, prescale_factor,
                                      postscale_factor, process_set, False)
    return _ops.allreduce_async(_A, tensor, True, name, op, prescale_factor, postscale_factor,
                                process_set)


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Starts grouped_allreduce() and returns at once.

    Takes the arguments of grouped_allreduce(), without compression.

    Returns:
        handle (int): synchronize(handle) waits and returns the list of new tensors; poll(handle)
            tells whether it is done.
    """
    op = common.resolve_op(op, average)
    tensors = list(tensors)
    if _adasum_host.needs_host(tensors, op):
        return _adasum_host.allreduce(tensors, False, name, op, prescale_factor,
                                      postscale_factor, process_set, True)
    return _ops.grouped_allreduce_async(_A, tensors, False, name, op, prescale_factor,
                                        postscale_factor, process_set)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    """Starts grouped_allreduce_() and returns at once.

    Takes the arguments of grouped_allreduce_().

    Returns:
        handle (int): synchronize(handle) waits and returns the input tensors, which then hold the
            results; poll(handle) tells whether it is done.
    """
    op = common.resolve_op(op, average)
    tensors = list(tensors)
    if _adasum_host.needs_host(tensors, op):
        return _adasum_host.allreduce(tensors, True, name, op, prescale_factor,
                                      postscale_factor, process_set, True)
    return _ops.grouped_allreduce_async(_A, tensors, True, name, op, prescale_factor,
                                        postscale_factor, process_set)


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts allgather() and returns at once.

    Takes the arguments of allgather().

    Returns:
        handle (int): synchronize(handle) waits and returns the gathered tensor; poll(handle) tells
            whether it is done.
    """
    return _ops.allgather_async(_A, tensor, name, process_set)


def _start_members(tensors, name, process_set, op_type, collective, what, start_one):
    """Starts one op per tensor (named "<name>.<i>") and combines them into one handle whose
    synchronize() gives the list of results. When member i fails on this rank, the members
    after it are refused (their copies on the other ranks fail at once instead of waiting for
    this rank until the stall shutdown) and the members already started are abandoned."""
    tensors = list(tensors)
    member = lambda i: None if name is None else "%s.%d" % (name, i)  # noqa: E731
    handles = []
    for i, t in enumerate(tensors):
        try:
            handles.append(start_one(t, member(i)))
        except Exception as e:
            reason = "tensor %d of the same %s failed on this rank: %s" % (i, what, e)
            _ops.refuse_rest(op_type, collective, [member(j) for j in range(i + 1, len(tensors))],
                             process_set, reason)
            common.abandon(handles)
            raise
    return common.combine(handles, list, what)


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Starts grouped_allgather() and returns one handle for all of its ops.

    Takes the arguments of grouped_allgather(). When one tensor fails on this rank, the ops
    after it are refused, so that the other ranks fail at once.

    Returns:
        handle (int): synchronize(handle) returns the list of gathered tensors.
    """
    return _start_members(tensors, name, process_set, "allgather", _lib.COLL_ALLGATHER,
                          "grouped_allgather",
                          lambda t, member: allgather_async(t, member, process_set))


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts broadcast() and returns at once.

    Takes the arguments of broadcast().

    Returns:
        handle (int): synchronize(handle) waits and returns the new tensor; poll(handle) tells
            whether it is done.
    """
    return _ops.broadcast_async(_A, tensor, root_rank, False, name, process_set)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts broadcast_() and returns at once.

    Takes the arguments of broadcast_().

    Returns:
        handle (int): synchronize(handle) waits and returns `tensor`, which then holds the value;
            poll(handle) tells whether it is done.
    """
    return _ops.broadcast_async(_A, tensor, root_rank, True, name, process_set)


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Starts alltoall() and returns at once.

    Takes the arguments of alltoall().

    Returns:
        handle (int): synchronize(handle) returns the tuple (rows, received_splits),
            whether or not `splits` was given.
    """
    return _ops.alltoall_async(_A, tensor, splits, name, process_set)


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Starts reducescatter() and returns at once.

    Takes the arguments of reducescatter(), without compression.

    Returns:
        handle (int): synchronize(handle) waits and returns this rank's block; poll(handle) tells
            whether it is done.
    """
    return _ops.reducescatter_async(_A, tensor, name, op, prescale_factor, postscale_factor,
                                    process_set)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    """Starts grouped_reducescatter() and returns one handle for all of its ops.

    Takes the arguments of grouped_reducescatter(), without compression. When one tensor
    fails on this rank, the ops after it are refused, so that the other ranks fail at once.

    Returns:
        handle (int): synchronize(handle) returns the list of blocks.
    """
    return _start_members(tensors, name, process_set, "reducescatter", _lib.COLL_REDUCESCATTER,
                          "grouped_reducescatter",
                          lambda t, member: reducescatter_async(t, member, op, process_set,
                                                                prescale_factor,
                                                                postscale_factor))


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Starts the allreduce of a sparse COO tensor, as two allgathers.

    The indices and the values are gathered, as Horovod does for sparse gradients. The
    result keeps duplicate indices: it is not coalesced.

    Args:
        tensor (torch.Tensor): a sparse COO tensor.
        name (str): the name of the op; its two allgathers get "<name>.indices" and
            "<name>.values". None: automatic names.
        op (int): Average or Sum.
        process_set (ProcessSet): the ranks to reduce over (default: every rank).

    Returns:
        handle (int): synchronize(handle) returns the sparse result. Calling the handle
            does the same, as with the function that Horovod returns.

    Raises:
        ValueError: another op, or a tensor that is not sparse COO.
    """
    parts = [None, None] if name is None else [name + ".indices", name + ".values"]
    try:
        if op not in (Average, Sum):
            raise ValueError("sparse allreduce supports op=Average or Sum; got %s"
                             % common.op_name(op))
        if not isinstance(tensor, torch.Tensor) or tensor.layout != torch.sparse_coo:
            raise ValueError("sparse allreduce needs a sparse COO tensor; got %s"
                             % (tensor.layout if isinstance(tensor, torch.Tensor)
                                else type(tensor).__name__))
        t = tensor.coalesce() if not tensor.is_coalesced() else tensor
        indices = t._indices().transpose(0, 1).contiguous()
        values = t._values().contiguous()
    except Exception as e:
        # Neither allgather starts here: the other ranks' copies fail at once, naming this rank.
        e.args = ("sparse_allreduce %r on rank %d: %s" % (name, rank(), e),) + e.args[1:]
        _ops.refuse_rest("allgather", _lib.COLL_ALLGATHER, parts, process_set, str(e))
        raise
    h_idx = allgather_async(indices, parts[0], process_set)
    try:
        h_val = allgather_async(values, parts[1], process_set)
    except Exception:
        common.abandon([h_idx])
        raise
    set_size = (process_set or global_process_set).size()

    def build(results):
        idx, val = results
        if op == Average:
            val = val / set_size
        return torch.sparse_coo_tensor(idx.transpose(0, 1), val, t.size())

    return _CallableHandle(common.combine([h_idx, h_val], build, "sparse_allreduce"))


class _CallableHandle(int):
    """An int handle (poll/synchronize take it) that can also be called: horovod.torch's
    sparse_allreduce_async returns a function that waits and returns the result."""

    def __call__(self):
        return synchronize(self)


# ---- gradients ---------------------------------------------------------------------------------
def _product_of_others(x_scaled, process_set):
    """prod over the other ranks j != this of x_scaled_j, element-wise, exact with zeros."""
    zero = x_scaled == 0
    nonzero = torch.where(zero, torch.ones_like(x_scaled), x_scaled)
    prod_nonzero = allreduce(nonzero, op=Product, process_set=process_set)
    zeros = allreduce(zero.to(torch.int32), op=Sum, process_set=process_set)
    others = torch.where(zero, prod_nonzero, prod_nonzero / nonzero)
    others_zeros = zeros - zero.to(torch.int32)
    return torch.where(others_zeros > 0, torch.zeros_like(others), others)


def _reduction_grad(op, x, y, grad_sum, pre, post, process_set):
    """dL/dx for y = post * op_k(pre * x_k), given grad_sum = sum over ranks of dL/dy
    (restricted to the rows of x), x this rank's input and y the reduced value."""
    scale = pre * post
    if op == Sum:
        return grad_sum * scale
    if op == Average:
        return grad_sum * (scale / (process_set or global_process_set).size())
    if op in (Min, Max):
        mask = (x * scale == y).to(grad_sum.dtype)
        return grad_sum * mask * scale
    # Product
    return grad_sum * scale * _product_of_others(x * pre, process_set)


class KoloAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor, process_set):
        ctx.op, ctx.pre, ctx.post, ctx.ps = op, prescale_factor, postscale_factor, process_set
        out = synchronize(allreduce_async(tensor, None, name, op, prescale_factor,
                                          postscale_factor, process_set))
        if op not in _SAME_OP_BACKWARD:
            ctx.save_for_backward(tensor, out)
        return out

    @staticmethod
    def backward(ctx, grad_output):
        if ctx.op in _SAME_OP_BACKWARD:
            # The adjoint of a linear allreduce is the same allreduce (Adasum: as Horovod).
            grad = allreduce(grad_output, op=ctx.op, prescale_factor=ctx.pre,
                             postscale_factor=ctx.post, process_set=ctx.ps)
        else:
            x, y = ctx.saved_tensors
            g = allreduce(grad_output, op=Sum, process_set=ctx.ps)
            grad = _reduction_grad(ctx.op, x, y, g, ctx.pre, ctx.post, ctx.ps)
        return grad, None, None, None, None, None


class KoloGroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        ctx.op, ctx.pre, ctx.post, ctx.ps = op, prescale_factor, postscale_factor, process_set
        # The op checks its tensors first (a non-tensor is refused there, on every rank).
        outs = synchronize(grouped_allreduce_async(list(tensors), None, name, op,
                                                   prescale_factor, postscale_factor,
                                                   process_set))
        ctx.like = [(t.shape, t.dtype, t.device) for t in tensors]
        if op not in _SAME_OP_BACKWARD:
            ctx.save_for_backward(*tensors, *outs)
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        grads = [g if g is not None else torch.zeros(shape, dtype=dtype, device=device)
                 for g, (shape, dtype, device) in zip(grads, ctx.like)]
        if ctx.op in _SAME_OP_BACKWARD:
            out = grouped_allreduce(grads, op=ctx.op, prescale_factor=ctx.pre,
                                    postscale_factor=ctx.post, process_set=ctx.ps)
        else:
            saved = ctx.saved_tensors
            n = len(saved) // 2
            sums = grouped_allreduce(grads, op=Sum, process_set=ctx.ps)
            out = [_reduction_grad(ctx.op, saved[i], saved[n + i], sums[i], ctx.pre, ctx.post,
                                   ctx.ps) for i in range(n)]
        return (None, None, None, None, None) + tuple(out)


class KoloAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        # The op checks the tensor first (a non-tensor is refused there, on every rank).
        out = synchronize(allgather_async(tensor, name, process_set))
        ctx.dim0 = tensor.shape[0] if tensor.dim() > 0 else 1
        ctx.ps = process_set
        return out

    @staticmethod
    def backward(ctx, grad_output):
        # Every rank's loss may depend on this rank's rows: combine the gradients and keep our
        # rows. Averaged, as Horovod does (the gradient of the ranks' mean loss).
        grad = allreduce(grad_output, op=Average, process_set=ctx.ps)
        dims = allgather(torch.tensor([ctx.dim0], dtype=torch.int64), process_set=ctx.ps)
        me = (ctx.ps or global_process_set).rank()
        offset = int(dims[:me].sum().item())
        return grad.narrow(0, offset, ctx.dim0), None, None


class KoloBroadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank, ctx.ps = root_rank, process_set
        return synchronize(broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        # Averaged over the ranks, as Horovod does; only the root's input reached the outputs.
        grad = allreduce(grad_output, op=Average, process_set=ctx.ps)
        if rank() != ctx.root_rank:
            grad = torch.zeros_like(grad)
        return grad, None, None, None


class KoloAlltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        out, received = synchronize(alltoall_async(tensor, splits, name, process_set))
        ctx.received, ctx.ps, ctx.rows = received, process_set, tensor.shape[0]
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx, grad_output, grad_received):
        grad, _ = synchronize(alltoall_async(grad_output.contiguous(), ctx.received, None,
                                             ctx.ps))
        if grad.shape[0] < ctx.rows:
            # splits summing to less than dim 0 left the trailing rows unsent: zero gradient.
            pad = grad.new_zeros((ctx.rows - grad.shape[0],) + tuple(grad.shape[1:]))
            grad = torch.cat([grad, pad])
        return grad, None, None, None


class KoloReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor, process_set):
        ctx.op, ctx.pre, ctx.post, ctx.ps = op, prescale_factor, postscale_factor, process_set
        out = synchronize(reducescatter_async(tensor, name, op, process_set, prescale_factor,
                                              postscale_factor))
        if op not in (Sum, Average):
            ctx.save_for_backward(tensor, out)
        return out

    @staticmethod
    def backward(ctx, grad_output):
        # Rank r's output rows came from every rank's rows of the same block.
        g = allgather(grad_output.contiguous(), process_set=ctx.ps)
        if ctx.op in (Sum, Average):
            # As Horovod: the allgathered gradient, times the set size for Sum and unscaled for
            # Average (the adjoint of allgather, whose gradient Horovod averages).
            scale = ctx.pre * ctx.post
            if ctx.op == Sum:
                scale *= (ctx.ps or global_process_set).size()
            return g * scale, None, None, None, None, None
        x, y = ctx.saved_tensors
        y_full = allgather(y.contiguous(), process_set=ctx.ps)
        return (_reduction_grad(ctx.op, x, y_full, g, ctx.pre, ctx.post, ctx.ps),
                None, None, None, None, None)


# ---- synchronous, differentiable ops ------------------------------------------------------------
def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Reduces a tensor over the ranks of a process set into a new tensor.

    The op is differentiable: the gradient is reduced over the ranks too. A CUDA tensor
    stays on its device. Adasum of a CUDA tensor runs through a host copy.

    Args:
        tensor (torch.Tensor): the tensor to reduce.
        average (bool): deprecated. True means op=Average, False means op=Sum. Passing
            both average and op raises ValueError, as in Horovod.
        name (str): a name that matches the op across ranks. None draws an automatic name
            from a counter per op type and process set, so ranks issue unnamed ops in the
            same order.
        compression (Compressor): Compression.none (the default) or Compression.fp16, which sends
            floating-point tensors as float16 and returns them in their own dtype.
        op (int): Average (the default), Sum, Adasum, Min, Max or Product.
        prescale_factor (float): multiplies the input before the reduction.
        postscale_factor (float): multiplies the result after the reduction.
        process_set (ProcessSet): the ranks to reduce over (default: every rank).

    Returns:
        result (torch.Tensor): a new tensor; `tensor` is left unchanged.

    Raises:
        ValueError: a bad argument, such as an unsupported dtype or op.
        KoloInternalError: the op failed in the runtime, such as when a rank passed another
            shape or a peer was lost.
    """
    op = common.resolve_op(op, average)
    compressed, ctx = compression.compress(tensor)
    reduced = KoloAllreduce.apply(compressed, name, op, prescale_factor, postscale_factor,
                                  process_set)
    return compression.decompress(reduced, ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """Reduces a tensor in place over the ranks of a process set.

    Takes the arguments of allreduce(), without compression. Not differentiable.

    Returns:
        tensor (torch.Tensor): the input tensor, which now holds the result.
    """
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor, process_set))


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Reduces a list of tensors as one op, so that they all complete together.

    Takes the arguments of allreduce(), with `tensors` for `tensor`. The other arguments
    apply to every tensor. Differentiable, as allreduce().

    Args:
        tensors (list): a non-empty list of tensors. Each rank passes as many, in the same
            order.

    Returns:
        results (list): a new tensor per input, in order.
    """
    op = common.resolve_op(op, average)
    pairs = [compression.compress(t) for t in tensors]
    outs = KoloGroupedAllreduce.apply(name, op, prescale_factor, postscale_factor, process_set,
                                      *[p[0] for p in pairs])
    return [compression.decompress(o, p[1]) for o, p in zip(outs, pairs)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    """Reduces a list of tensors in place, as one op.

    Takes the arguments of grouped_allreduce(), without compression.

    Returns:
        tensors (list): the input tensors, which now hold the results.
    """
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenates every rank's tensor along dimension 0, in rank order.

    Dimension 0 may differ between ranks. The other dimensions and the dtype must match.
    Differentiable: each rank gets the gradient of its own rows, averaged over the ranks as
    in Horovod.

    Args:
        tensor (torch.Tensor): this rank's tensor.
        name (str): a name that matches the op across ranks (None: automatic, as for
            allreduce()).
        process_set (ProcessSet): the ranks to gather from (default: every rank).

    Returns:
        result (torch.Tensor): a new tensor.
    """
    return KoloAllgather.apply(tensor, name, process_set)


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """Runs allgather() on each tensor of a list.

    Each tensor is its own op, named "<name>.<i>" when `name` is given.

    Args:
        tensors (list): this rank's tensors. Each rank passes as many, in the same order.
        name (str): a name that matches the op across ranks (None: automatic, as for
            allreduce()).
        process_set (ProcessSet): the ranks to gather from (default: every rank).

    Returns:
        results (list): a gathered tensor per input, in order.
    """
    return [allgather(t, None if name is None else "%s.%d" % (name, i), process_set)
            for i, t in enumerate(tensors)]


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Returns the value that one rank holds, on every rank.

    Differentiable: root_rank gets the gradient averaged over the ranks, as in Horovod, and
    the other ranks get zeros.

    Args:
        tensor (torch.Tensor): this rank's tensor. Every rank passes the same shape and
            dtype.
        root_rank (int): the global rank whose value is sent, also with a process set. It
            must belong to the process set.
        name (str): a name that matches the op across ranks (None: automatic, as for
            allreduce()).
        process_set (ProcessSet): the ranks to broadcast to (default: every rank).

    Returns:
        result (torch.Tensor): a new tensor holding root_rank's value.

    Raises:
        ValueError: root_rank is not a member of the process set.
    """
    return KoloBroadcast.apply(tensor, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """Overwrites a tensor with its value on root_rank.

    Takes the arguments of broadcast(). Not differentiable.

    Returns:
        tensor (torch.Tensor): the input tensor, which now holds root_rank's value.
    """
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends a block of rows to each rank and receives a block from each.

    Differentiable: the gradient goes back to the rank that sent each row.

    Args:
        tensor (torch.Tensor): the tensor to split along dimension 0.
        splits (list): the number of rows of dimension 0 that go to each rank of the set,
            in order (a list or 1-D tensor of ints). They may sum to less than dimension 0:
            the trailing rows are not sent. None splits the rows evenly.
        name (str): a name that matches the op across ranks (None: automatic, as for
            allreduce()).
        process_set (ProcessSet): the ranks to exchange with (default: every rank).

    Returns:
        result (torch.Tensor): the received rows, in rank order. When `splits` is given,
            the tuple (rows, received_splits) instead, with received_splits an int32
            tensor.
    """
    output, received = KoloAlltoall.apply(tensor, splits, name, process_set)
    return output if splits is None else (output, received)


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Reduces a tensor over the set, then keeps this rank's block of dimension 0.

    Blocks follow rank order. When dimension 0 does not divide evenly, the first
    dim0 % size ranks get one extra row. Differentiable.

    Args:
        tensor (torch.Tensor): the tensor. Every rank passes the same shape.
        name (str): a name that matches the op across ranks (None: automatic, as for
            allreduce()).
        compression (Compressor): Compression.none (the default) or Compression.fp16.
        op (int): Average (the default), Sum, Min, Max or Product.
        process_set (ProcessSet): the ranks to reduce over (default: every rank).
        prescale_factor (float): multiplies the input before the reduction.
        postscale_factor (float): multiplies the result after the reduction.

    Returns:
        result (torch.Tensor): a new tensor with this rank's block.

    Raises:
        KoloInternalError: op is Adasum, as in Horovod.
    """
    compressed, ctx = compression.compress(tensor)
    out = KoloReducescatter.apply(compressed, name, op, prescale_factor, postscale_factor,
                                  process_set)
    return compression.decompress(out, ctx)


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    """Runs reducescatter() on each tensor of a list.

    Each tensor is its own op, named "<name>.<i>" when `name` is given. The other arguments
    are those of reducescatter() and apply to every tensor.

    Args:
        tensors (list): the tensors. Each rank passes as many, in the same order.

    Returns:
        results (list): this rank's block of each tensor, in order.
    """
    return [reducescatter(t, None if name is None else "%s.%d" % (name, i), compression, op,
                          process_set, prescale_factor, postscale_factor)
            for i, t in enumerate(tensors)]


def join(device=-1):
    """Marks this rank as out of data and waits until every rank called join().

    Until then, this rank adds zeros to the other ranks' allreduces. With Min, Max and
    Product it adds the op's identity instead, so their result does not change; Horovod
    sends zeros there too.

    Args:
        device (int): a CUDA device ordinal to synchronize first, or -1 (the CPU).

    Returns:
        rank (int): the last rank that joined, the same on every rank.

    Raises:
        ValueError: device is not an int.
    """
    if isinstance(device, bool) or not isinstance(device, int):
        raise ValueError("join(device=...) takes an int device ordinal (-1 = CPU)")
    if device >= 0 and torch.cuda.is_available():
        torch.cuda.synchronize(device)
    return _ops.join()


def barrier(process_set=global_process_set):
    """Blocks until every rank of the process set called barrier().

    Args:
        process_set (ProcessSet): the ranks to wait for (default: every rank).
    """
    _ops.barrier(process_set)
