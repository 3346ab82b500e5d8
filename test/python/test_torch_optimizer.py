# SPDX-License-Identifier: Apache-2.0
"""DistributedOptimizer and the state helpers (broadcast_parameters, broadcast_optimizer_state,
broadcast_object, allgather_object). The reference for data-parallel training is one local
model trained on the whole batch: N ranks with batch B each must match it."""

import warnings

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed for this interpreter")

BATCH = 6
STEPS = 4


def _model(seed=1234):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(),
                               torch.nn.Linear(8, 1)).double()


def _data(n, seed=99):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(STEPS, n * BATCH, 4, generator=g, dtype=torch.float64)
    y = torch.randn(STEPS, n * BATCH, 1, generator=g, dtype=torch.float64)
    return x, y


def _reference(n, lr, momentum, steps=STEPS, lr_scale=1.0):
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=lr * lr_scale, momentum=momentum)
    x, y = _data(n)
    for s in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x[s]), y[s]).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def _assert_same_on_all_ranks(hvd, params):
    for i, p in enumerate(params):
        root = hvd.broadcast(p.detach(), 0, name="check_same.%d" % i)
        assert torch.equal(root, p.detach()), "rank %d differs in parameter %d" % (hvd.rank(), i)


def _train(hvd, opt_kwargs=None, lr=0.1, momentum=0.9, passes=1, seed=1234, perturb=True):
    n, r = hvd.size(), hvd.rank()
    model = _model(seed)
    if perturb and r != 0:  # broadcast_parameters must undo this
        with torch.no_grad():
            for p in model.parameters():
                p.add_(float(r))
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                   backward_passes_per_step=passes, **(opt_kwargs or {}))
    x, y = _data(n)
    for s in range(STEPS):
        opt.zero_grad()
        xs = x[s][r * BATCH:(r + 1) * BATCH]
        ys = y[s][r * BATCH:(r + 1) * BATCH]
        chunk = BATCH // passes
        for k in range(passes):
            part = slice(k * chunk, (k + 1) * chunk)
            loss = torch.nn.functional.mse_loss(model(xs[part]), ys[part]) / passes
            loss.backward()
        opt.step()
        _assert_same_on_all_ranks(hvd, list(model.parameters()))
    return model, opt


def _close(params, reference, tol):
    for p, q in zip(params, reference):
        torch.testing.assert_close(p.detach(), q, rtol=tol, atol=tol)


def test_matches_single_process_big_batch(hvd):
    model, opt = _train(hvd)
    assert isinstance(opt, torch.optim.SGD)
    assert type(opt).__name__ == "SGD"
    _close(model.parameters(), _reference(hvd.size(), 0.1, 0.9), 1e-10)


def test_fp16_compression(hvd):
    model, _ = _train(hvd, {"compression": hvd.Compression.fp16})
    _close(model.parameters(), _reference(hvd.size(), 0.1, 0.9), 5e-3)


def test_backward_passes_per_step(hvd):
    model, opt = _train(hvd, passes=2)
    _close(model.parameters(), _reference(hvd.size(), 0.1, 0.9), 1e-10)
    if hvd.size() > 1:
        x, y = _data(hvd.size())
        opt.zero_grad()
        for _ in range(2):
            torch.nn.functional.mse_loss(model(x[0][:2]), y[0][:2]).backward()
        with pytest.raises(AssertionError, match="backward_passes_per_step"):
            torch.nn.functional.mse_loss(model(x[0][:2]), y[0][:2]).backward()
        opt.synchronize()  # completes the allreduces started by the first two passes


def test_sum_and_predivide(hvd):
    n = hvd.size()
    model, _ = _train(hvd, {"op": hvd.Sum}, lr=0.1 / n)
    _close(model.parameters(), _reference(n, 0.1, 0.9), 1e-10)
    model, _ = _train(hvd, {"gradient_predivide_factor": 2.0})
    _close(model.parameters(), _reference(n, 0.1, 0.9), 1e-10)
    with pytest.raises(ValueError, match="predivide"):
        hvd.DistributedOptimizer(torch.optim.SGD(_model().parameters(), lr=0.1),
                                 op=hvd.Sum, gradient_predivide_factor=2.0)


def test_groups(hvd):
    model, _ = _train(hvd, {"groups": 2})
    _close(model.parameters(), _reference(hvd.size(), 0.1, 0.9), 1e-10)
    m = _model()
    params = list(m.parameters())
    explicit = [[params[0], params[2]], [params[1]]]
    hvd.broadcast_parameters(m.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1),
                                   named_parameters=m.named_parameters(), groups=explicit)
    x, y = _data(hvd.size())
    r = hvd.rank()
    opt.zero_grad()
    torch.nn.functional.mse_loss(m(x[0][r * BATCH:(r + 1) * BATCH]),
                                 y[0][r * BATCH:(r + 1) * BATCH]).backward()
    opt.step()
    _close(m.parameters(), _reference(hvd.size(), 0.1, 0.0, steps=1), 1e-10)


def test_one_group_of_thousands_of_parameters(hvd):
    # groups=1 over 5000 one-element parameters: every gradient hook finds its group by
    # identity (a tuple key hashed all 5000 tensors per hook: 25 million hashes a step), and
    # the grouped allreduce of 5000 names negotiates in one pass per round.
    from kolo.torch.optimizer import _Group
    n, r = hvd.size(), hvd.rank()
    params = [torch.nn.Parameter(torch.zeros(1)) for _ in range(5000)]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(params, lr=1.0),
                                   named_parameters=[("p%d" % i, p) for i, p in enumerate(params)],
                                   groups=1, op=hvd.Sum)
    assert len(opt._groups) == 1 and isinstance(opt._groups[0], _Group)
    opt.zero_grad()
    sum(p.sum() * (i % 7 + r) for i, p in enumerate(params)).backward()
    opt.step()
    for i, p in enumerate(params):
        assert p.item() == -sum(i % 7 + q for q in range(n)), i

    class Unhashable:
        def __hash__(self):
            raise AssertionError("a group hashed its member")
    g = _Group([Unhashable(), Unhashable()])
    assert {g: 1}[g] == 1 and g != _Group(list(g)) and g == g


def test_named_parameter_errors(hvd):
    m = _model()
    named = list(m.named_parameters())
    with pytest.raises(ValueError, match="unique"):
        hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1),
                                 named_parameters=[("same", p) for _, p in named])
    with pytest.raises(ValueError, match="not named"):
        hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1),
                                 named_parameters=named[:1])
    with pytest.raises(ValueError, match="tuples"):
        hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1),
                                 named_parameters=[p for _, p in named])
    with pytest.raises(ValueError, match="gradient_predivide_factor"):  # test_adasum.py: Adasum
        hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), op=hvd.Adasum,
                                 gradient_predivide_factor=2.0)
    # Without named_parameters the names are generated (and the same on every rank).
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1))
    hvd.broadcast_parameters(m.state_dict(), root_rank=0)
    m(torch.ones(2, 4, dtype=torch.float64)).sum().backward()
    opt.step()
    _assert_same_on_all_ranks(hvd, list(m.parameters()))


def test_synchronize_skip_and_zero_grad_guard(hvd):
    n, r = hvd.size(), hvd.rank()
    m = _model()
    hvd.broadcast_parameters(m.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1),
                                   named_parameters=m.named_parameters())
    x = torch.full((3, 4), float(r), dtype=torch.float64)
    m(x).sum().backward()
    if n > 1:
        with pytest.raises(AssertionError, match="zero_grad"):
            opt.zero_grad()
    opt.synchronize()
    grads = [p.grad.clone() for p in m.parameters()]
    torch.nn.utils.clip_grad_norm_(m.parameters(), 1e9)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with opt.skip_synchronize():
            opt.step()
    _assert_same_on_all_ranks(hvd, grads)
    opt.zero_grad()
    m(x).sum().backward()
    opt.synchronize()
    with pytest.warns(UserWarning, match="skip_synchronize"):
        opt.step()


def test_unused_parameter_on_some_ranks(hvd):
    r = hvd.rank()
    torch.manual_seed(5)
    a = torch.nn.Linear(3, 3).double()
    b = torch.nn.Linear(3, 3).double()
    model = torch.nn.ModuleDict({"a": a, "b": b})
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.0),
                                   named_parameters=model.named_parameters())
    x = torch.ones(2, 3, dtype=torch.float64)
    out = a(x)
    if r == 0:
        out = b(out)  # b has a gradient on rank 0 only
    out.sum().backward()
    opt.step()
    g0 = hvd.broadcast(b.weight.grad, 0, name="unused_grad")
    assert torch.equal(g0, b.weight.grad)
    assert b.weight.grad.abs().sum() > 0


def test_optimizer_on_process_set(hvd):
    n, r = hvd.size(), hvd.rank()
    evens = hvd.add_process_set([q for q in range(n) if q % 2 == 0])
    m = _model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1),
                                   named_parameters=m.named_parameters(), process_set=evens)
    m(torch.full((2, 4), float(r), dtype=torch.float64)).sum().backward()
    opt.step()
    if evens.included():
        flat = torch.cat([p.detach().flatten() for p in m.parameters()])
        gathered = hvd.allgather(flat.unsqueeze(0), process_set=evens)
        for row in gathered:
            assert torch.equal(row, flat)
    hvd.barrier()
    hvd.remove_process_set(evens)


@pytest.mark.parametrize("kind", ["sgd", "lbfgs"])
def test_step_with_closure_averages_every_evaluation(hvd, kind):
    """step(closure) as torch documents it (the closure zeroes, computes the loss, runs
    backward): the step uses the averaged gradients of each evaluation, SGD's one and LBFGS's
    several, and matches one process on the whole batch (Horovod stepped on the local ones)."""
    n, r = hvd.size(), hvd.rank()
    make = {"sgd": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
            "lbfgs": lambda ps: torch.optim.LBFGS(ps, lr=0.5, max_iter=4)}[kind]
    x, y = _data(n)
    model, ref = _model(), _model()
    opt = hvd.DistributedOptimizer(make(model.parameters()),
                                   named_parameters=model.named_parameters())
    ref_opt = make(ref.parameters())
    for s in range(2):
        xs, ys = x[s][r * BATCH:(r + 1) * BATCH], y[s][r * BATCH:(r + 1) * BATCH]

        def closure():
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(xs), ys)
            loss.backward()
            return loss

        def ref_closure():
            ref_opt.zero_grad()
            loss = torch.nn.functional.mse_loss(ref(x[s]), y[s])
            loss.backward()
            return loss

        opt.step(closure)
        ref_opt.step(ref_closure)
    _close(model.parameters(), [p.detach() for p in ref.parameters()], 1e-9)
    _assert_same_on_all_ranks(hvd, list(model.parameters()))


def test_parameter_unfrozen_after_wrapping_is_averaged(hvd):
    """Fine-tuning: the first layer is frozen when DistributedOptimizer is built and unfrozen
    later; from then on its gradient is averaged like the others (Horovod never hooks it, and
    the ranks drift apart)."""
    n, r = hvd.size(), hvd.rank()
    model, ref = _model(), _model()
    for m in (model, ref):
        m[0].requires_grad_(False)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    x, y = _data(n)
    for s in range(STEPS):
        if s == 2:
            model[0].requires_grad_(True)
            ref[0].requires_grad_(True)
        opt.zero_grad()
        xs, ys = x[s][r * BATCH:(r + 1) * BATCH], y[s][r * BATCH:(r + 1) * BATCH]
        torch.nn.functional.mse_loss(model(xs), ys).backward()
        opt.step()
        ref_opt.zero_grad()
        torch.nn.functional.mse_loss(ref(x[s]), y[s]).backward()
        ref_opt.step()
    _close(model.parameters(), [p.detach() for p in ref.parameters()], 1e-10)
    _assert_same_on_all_ranks(hvd, list(model.parameters()))


def test_new_optimizer_on_the_same_model_takes_over_the_hooks(hvd):
    """An optimizer switched mid-training (Adam, then SGD) while the first one stays alive (its
    lr scheduler holds it): the new one averages the gradients; the first one's hooks are gone
    (both started 'allreduce.<name>': DUPLICATE_NAME)."""
    n, r = hvd.size(), hvd.rank()
    model = torch.nn.Linear(2, 1)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    x = torch.ones(4, 2) * (r + 1)
    first = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.1),
                                     named_parameters=model.named_parameters())
    first.zero_grad()
    model(x).sum().backward()
    first.step()
    scheduler = torch.optim.lr_scheduler.StepLR(first, 1)
    second = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                      named_parameters=model.named_parameters())
    mean = 4.0 * (n + 1) / 2.0
    for opt in (second, second):
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
        torch.testing.assert_close(model.weight.grad, torch.full((1, 2), mean))
        _assert_same_on_all_ranks(hvd, list(model.parameters()))
    assert scheduler.optimizer is first
    # Nothing is left on the parameters: torch 2.x pickles a Parameter's __dict__ with
    # torch.save(model), and weakrefs or hook handles there would not pickle.
    assert all(not vars(p) for p in model.parameters())


def test_broadcast_parameters_forms(hvd):
    n, r = hvd.size(), hvd.rank()
    m = _model(seed=r)  # different on every rank
    hvd.broadcast_parameters(m.named_parameters(), root_rank=n - 1)
    ref = _model(seed=n - 1)
    for p, q in zip(m.parameters(), ref.parameters()):
        assert torch.equal(p.detach(), q.detach())
    m = _model(seed=r)
    hvd.broadcast_parameters(list(m.parameters()), root_rank=0)
    for p, q in zip(m.parameters(), _model(seed=0).parameters()):
        assert torch.equal(p.detach(), q.detach())
    with pytest.raises(ValueError):
        hvd.broadcast_parameters(3, root_rank=0)


@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_broadcast_optimizer_state(hvd, kind):
    r = hvd.rank()
    m = _model()
    if kind == "sgd":
        opt = torch.optim.SGD(m.parameters(), lr=0.01 * (r + 1), momentum=0.5 + 0.1 * r)
    else:
        opt = torch.optim.Adam(m.parameters(), lr=0.01 * (r + 1), betas=(0.8 + 0.01 * r, 0.99))
    if r == 0:  # only the root has state; the others start fresh
        for s in range(3):
            opt.zero_grad()
            m(torch.full((2, 4), float(s), dtype=torch.float64)).pow(2).sum().backward()
            opt.step()
    hvd.broadcast_parameters(m.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert opt.param_groups[0]["lr"] == 0.01
    if kind == "sgd":
        assert opt.param_groups[0]["momentum"] == 0.5
    else:
        assert opt.param_groups[0]["betas"] == (0.8, 0.99)
    for i, p in enumerate(m.parameters()):
        state = opt.state[p]
        for key in sorted(state):
            value = state[key]
            if torch.is_tensor(value):
                root = hvd.broadcast(value, 0, name="state_check.%d.%s" % (i, key))
                assert torch.equal(root, value), (key, value, root)
        if kind == "adam":
            assert float(state["step"]) == 3


@pytest.mark.parametrize("kind", ["sgd", "adamw"])
def test_broadcast_optimizer_state_keeps_broadcast_parameters_under_weight_decay(hvd, kind):
    # The checkpoint pattern: the root restored a model and optimizer state, the others start
    # fresh; broadcast_parameters, then broadcast_optimizer_state. The fresh ranks' state comes
    # from a step with zero gradients, which weight decay would turn into a parameter update:
    # the parameters must still be the root's afterwards, on every rank.
    r = hvd.rank()
    m = _model(seed=7)
    make = {"sgd": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.1),
            "adamw": lambda ps: torch.optim.AdamW(ps, lr=0.1, weight_decay=0.1)}[kind]
    opt = make(m.parameters())
    if r == 0:
        opt.zero_grad()
        m(torch.ones(2, 4, dtype=torch.float64)).pow(2).sum().backward()
        opt.step()
    hvd.broadcast_parameters(m.state_dict(), root_rank=0)
    before = [p.detach().clone() for p in m.parameters()]
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    for p, q in zip(m.parameters(), before):
        assert torch.equal(p.detach(), q)
    _assert_same_on_all_ranks(hvd, list(m.parameters()))


@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_broadcast_optimizer_state_skips_frozen_parameters(hvd, kind):
    """A parameter with requires_grad=False (its .grad stays None) has no state to broadcast;
    it is skipped, as Horovod does, plain or wrapped, frozen before or after wrapping. The
    trainable parameters keep a gradient (the zeros of the initializing step where there was
    none, as in Horovod), so scripts can broadcast it."""
    r = hvd.rank()
    for distributed, freeze_late in ((False, False), (True, False), (True, True)):
        m = _model()
        if not freeze_late:
            m[0].bias.requires_grad_(False)
        if kind == "sgd":
            opt = torch.optim.SGD(m.parameters(), lr=0.01 * (r + 1), momentum=0.5)
        else:
            opt = torch.optim.Adam(m.parameters(), lr=0.01 * (r + 1))
        if distributed:
            opt = hvd.DistributedOptimizer(opt, named_parameters=m.named_parameters())
        if freeze_late:
            m[0].bias.requires_grad_(False)
        if not distributed and r == 0:  # only the root has state
            for s in range(2):
                opt.zero_grad()
                m(torch.full((2, 4), float(s), dtype=torch.float64)).pow(2).sum().backward()
                opt.step()
        hvd.broadcast_optimizer_state(opt, root_rank=0)
        assert opt.param_groups[0]["lr"] == 0.01
        assert m[0].bias.grad is None
        assert not opt.state.get(m[0].bias)
        for i, p in enumerate(m.parameters()):
            if p is not m[0].bias:
                assert p.grad is not None and p.grad.shape == p.shape
                hvd.broadcast(p.grad, 0, name="frozen_grad.%d" % i)
        for i, p in enumerate(m.parameters()):
            if p is m[0].bias:
                continue
            for key in sorted(opt.state[p]):
                value = opt.state[p][key]
                if torch.is_tensor(value):
                    root = hvd.broadcast(value, 0, name="frozen_check.%d.%s" % (i, key))
                    assert torch.equal(root, value), (key, value, root)
        if distributed:  # training goes on with the frozen parameter left alone
            before = m[0].bias.detach().clone()
            opt.zero_grad()
            m(torch.ones(2, 4, dtype=torch.float64)).sum().backward()
            opt.step()
            assert torch.equal(m[0].bias.detach(), before)


def test_broadcast_optimizer_state_follows_the_roots_layout(hvd):
    """The root resumed from a checkpoint with momentum for the second layer only (the first
    was frozen when it was saved); the others start fresh, so their initializing step gives
    every parameter state. Afterwards every rank holds exactly the root's state (it hung on
    broadcasts that only some ranks submitted). A rank whose optimizer has another shape makes
    every rank raise."""
    n, r = hvd.size(), hvd.rank()
    m = _model()
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    if r == 0:
        m[0].requires_grad_(False)
        m(torch.ones(2, 4, dtype=torch.float64)).sum().backward()
        opt.step()
        m[0].requires_grad_(True)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    held = [i for i, p in enumerate(m.parameters()) if "momentum_buffer" in opt.state.get(p, {})]
    assert held == [2, 3]
    for i in held:
        buf = opt.state[list(m.parameters())[i]]["momentum_buffer"]
        torch.testing.assert_close(buf, hvd.broadcast(buf, 0, name="layout_check.%d" % i))

    m2 = _model()
    params = list(m2.parameters())
    if n > 1 and r == n - 1:
        params = params[:-1]
    opt2 = torch.optim.SGD(params, lr=0.1, momentum=0.9)
    if n > 1:
        with pytest.raises(ValueError, match=r"rank\(s\) \[%d\] differs" % (n - 1)):
            hvd.broadcast_optimizer_state(opt2, root_rank=0)


def test_broadcast_optimizer_state_no_grad(hvd):
    """Horovod's test_broadcast_state_no_grad: an int parameter with requires_grad=False next to
    a trainable one, SGD with momentum and nesterov, wrapped; after the broadcast the frozen
    parameter has no gradient and the trainable one a gradient that can be broadcast."""

    class ModelNoGrad(torch.nn.Module):
        def __init__(self, a, b):
            super().__init__()
            self.a = torch.nn.Parameter(a.int(), requires_grad=False)
            self.b = torch.nn.Parameter(b)

        def forward(self, x):
            return torch.index_select(self.b, 0, self.a.long()) * x

    torch.manual_seed(hvd.rank())
    model = ModelNoGrad(torch.tensor([1.0, 3.0]), torch.rand(4))
    opt = torch.optim.SGD(model.parameters(), lr=0.001, weight_decay=1e-6, momentum=0.9,
                          nesterov=True)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    grad = opt.param_groups[0]["params"][1].grad
    bgrad = hvd.broadcast(grad, root_rank=0)
    assert opt.param_groups[0]["params"][0].grad is None
    assert torch.equal(grad, bgrad)
    # Training goes on: the gradient is averaged, the int parameter untouched.
    a = model.a.detach().clone()
    opt.zero_grad()
    model(torch.full((2,), float(hvd.rank() + 1))).sum().backward()
    opt.step()
    assert torch.equal(model.a, a)
    _assert_same_on_all_ranks(hvd, [model.b])


def test_sparse_gradients_stay_sparse_for_sparse_adam(hvd):
    """With sparse_as_dense=False (the default) an embedding's sparse gradient is averaged as
    Horovod's sparse_allreduce does (allgather of indices and values, values / size) and stays
    sparse, so torch.optim.SparseAdam accepts it; the result matches one process minimizing
    the ranks' mean loss."""
    n, r = hvd.size(), hvd.rank()

    def make():
        torch.manual_seed(7)
        return torch.nn.Embedding(12, 3, sparse=True).double()

    emb, ref = make(), make()
    opt = hvd.DistributedOptimizer(torch.optim.SparseAdam(emb.parameters(), lr=0.05),
                                   named_parameters=emb.named_parameters())
    ref_opt = torch.optim.SparseAdam(ref.parameters(), lr=0.05)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    hvd.broadcast_optimizer_state(ref_opt, root_rank=0)  # the same zero step: step counts agree
    g = torch.Generator().manual_seed(5)
    idx = torch.randint(0, 12, (STEPS, n, 5), generator=g)  # rows repeat within and across ranks
    for s in range(STEPS):
        opt.zero_grad()
        ((emb(idx[s, r]) ** 2).sum() * (r + 1)).backward()
        opt.step()
        assert emb.weight.grad.is_sparse
        ref_opt.zero_grad()
        (sum((ref(idx[s, q]) ** 2).sum() * (q + 1) for q in range(n)) / n).backward()
        ref_opt.step()
    torch.testing.assert_close(emb.weight.detach(), ref.weight.detach())
    _assert_same_on_all_ranks(hvd, list(emb.parameters()))
    # sparse_as_dense=True averages a dense copy and, as Horovod, makes the result sparse again
    # for the step (test_sparse_as_dense_gives_the_optimizer_sparse_gradients_back).
    dense = make()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(dense.parameters(), lr=0.1),
                                   named_parameters=dense.named_parameters(),
                                   sparse_as_dense=True)
    (dense(idx[0, r]) ** 2).sum().backward()
    opt.step()
    assert dense.weight.grad.is_sparse
    _assert_same_on_all_ranks(hvd, list(dense.parameters()))


def test_objects(hvd):
    n, r = hvd.size(), hvd.rank()
    payload = {"hello": 123, 0: [1, 2], "fn": lambda v: v * 3} if r == 0 else None
    got = hvd.broadcast_object(payload, root_rank=0)
    assert got["hello"] == 123 and got[0] == [1, 2] and got["fn"](2) == 6
    got = hvd.broadcast_object("from %d" % (n - 1) if r == n - 1 else 17, root_rank=n - 1,
                               name="named_object")
    assert got == "from %d" % (n - 1)
    d = {"metric": r, "pad": "x" * (r * 1000)}
    gathered = hvd.allgather_object(d)
    assert gathered == [{"metric": q, "pad": "x" * (q * 1000)} for q in range(n)]


def test_two_optimizers_with_groups_over_one_model_do_not_clash(hvd):
    # Each group is named after its first parameter (as Horovod): two DistributedOptimizers of
    # one model with groups=1 both submitted "allreduce.group.0" (DUPLICATE_NAME in the hook).
    n, r = hvd.size(), hvd.rank()
    model = _model()
    named = list(model.named_parameters())
    first = [(k, p) for k, p in named if k.startswith("0.")]
    second = [(k, p) for k, p in named if k.startswith("2.")]
    opt_a = hvd.DistributedOptimizer(torch.optim.SGD([p for _, p in first], lr=0.1),
                                     named_parameters=first, groups=1)
    opt_b = hvd.DistributedOptimizer(torch.optim.SGD([p for _, p in second], lr=0.1),
                                     named_parameters=second, groups=1)
    x = torch.full((2, 4), float(r + 1), dtype=torch.float64)
    local = _model()
    local(x).sum().backward()
    model(x).sum().backward()
    opt_a.synchronize()
    opt_b.synchronize()
    for (k, p), q in zip(named, local.parameters()):
        expected = hvd.allreduce(q.grad, op=hvd.Average, name="expected." + k)
        assert torch.allclose(p.grad, expected), k
    assert n >= 2


def test_sparse_as_dense_gives_the_optimizer_sparse_gradients_back(hvd):
    # As Horovod: the dense copy is averaged, and the gradient is sparse again for the step
    # (SparseAdam refuses dense gradients).
    n, r = hvd.size(), hvd.rank()
    torch.manual_seed(7)
    emb = torch.nn.Embedding(10, 3, sparse=True)
    opt = hvd.DistributedOptimizer(torch.optim.SparseAdam(emb.parameters(), lr=0.1),
                                   named_parameters=emb.named_parameters(), sparse_as_dense=True)
    emb(torch.tensor([r, 5])).sum().backward()
    opt.step()
    assert emb.weight.grad.is_sparse
    expected = torch.zeros(10, 3)
    for other in range(n):
        expected[other] += 1.0 / n
    expected[5] += 1.0
    assert torch.allclose(emb.weight.grad.to_dense(), expected)


def test_elastic_job_of_one_worker_registers_the_gradient_hooks(hvd, tmp_path):
    # An elastic job may start at one worker and grow; the optimizer is made once, so its
    # hooks must exist at size 1 (Horovod: size() > 1 or HOROVOD_ELASTIC=1). A one-rank job in
    # a child process, with kolorun's KOLO_ELASTIC=1 (and without it: no hooks).
    import os
    import subprocess
    import sys
    if hvd.rank() != 0:
        return
    prog = ("import kolo.torch as hvd, torch\nhvd.init()\n"
            "m = torch.nn.Linear(2, 1)\n"
            "o = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1),"
            " named_parameters=m.named_parameters())\n"
            "print('HOOKS', len(o._requires_update))\nhvd.shutdown()\n")
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("KOLO_", "HOROVOD_")) or k == "KOLO_LIBRARY"}
    base["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    for elastic, hooks in (("1", 2), ("0", 0)):
        env = dict(base, KOLO_ELASTIC=elastic)
        out = subprocess.run([sys.executable, "-c", prog], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert "HOOKS %d" % hooks in out.stdout, (elastic, out.stdout, out.stderr)


@pytest.mark.parametrize("groups", [None, 1])
def test_a_failed_step_can_be_retried(hvd, groups):
    # One step fails on every rank (the last rank's prescale differs: a mismatch); the caller
    # catches it, zeroes the gradients and goes on. The next steps average correctly (they
    # raised a bare AssertionError for good once a step had failed).
    n, r = hvd.size(), hvd.rank()
    model = torch.nn.Linear(3, 2).double()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.0),
                                   named_parameters=model.named_parameters(),
                                   groups=groups)
    for it in range(3):
        opt.gradient_predivide_factor = 2.0 if it == 0 and r == n - 1 else 1.0
        opt.zero_grad()
        (model(torch.ones(1, 3, dtype=torch.float64)) * (r + 1)).sum().backward()
        if it == 0 and n > 1:
            with pytest.raises(hvd.HorovodInternalError, match="prescale"):
                opt.step()
            continue
        opt.step()
        mean = sum(q + 1 for q in range(n)) / n
        assert torch.allclose(model.bias.grad, torch.full((2,), mean, dtype=torch.float64))
