# SPDX-License-Identifier: Apache-2.0
"""op=Adasum (runs at 2, 3 and 4 ranks): allreduce of float16/bfloat16/float32/float64 tensors
against a float64 NumPy evaluation of the same tree (rank p+i folded into rank i, p the largest
power of two <= size, then pairs (0,1), (2,3), ..., then pairs of pairs), fused batches (per
tensor products: a tensor identical on every rank comes back bit for bit), Horovod's stability
tests (parallel vectors of tiny, huge and widely spread magnitudes average), scaling, the numpy
API, the errors, autograd, and DistributedOptimizer(op=Adasum) (Horovod's delta optimizer)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

TOL = {torch.float16: 2e-2, torch.bfloat16: 1e-1, torch.float32: 1e-5, torch.float64: 1e-10}


# Horovod's bound (horovod/common/ops/adasum/adasum.h): a coefficient is 1 when the squared norm,
# accumulated in double, is below sqrt(DBL_MIN).
MIN_NORM_SQ = float(np.sqrt(np.finfo(np.float64).tiny))


def _combine(a, b):
    dot, aa, bb = float(np.dot(a, b)), float(np.dot(a, a)), float(np.dot(b, b))
    ca = 1.0 - dot / (2.0 * aa) if aa >= MIN_NORM_SQ else 1.0
    cb = 1.0 - dot / (2.0 * bb) if bb >= MIN_NORM_SQ else 1.0
    return ca * a + cb * b


def adasum_reference(vectors):
    """The Adasum of every rank's vector, in float64, over kolo's tree."""
    g = [np.asarray(v, dtype=np.float64).ravel() for v in vectors]
    n, p = len(g), 1
    while p * 2 <= n:
        p *= 2
    for i in range(n - p):
        g[i] = _combine(g[i], g[p + i])
    d = 1
    while d < p:
        for i in range(0, p, 2 * d):
            g[i] = _combine(g[i], g[i + d])
        d *= 2
    return g[0]


def _inputs(n, shape, seed, dtype):
    """Every rank's input (each rank can compute all of them): a direction shared by the ranks
    plus a random part per rank, rounded to dtype."""
    numel = int(np.prod(shape))
    shared = torch.sin(torch.arange(numel, dtype=torch.float64) * 0.3 + seed).reshape(shape)
    out = []
    for r in range(n):
        gen = torch.Generator().manual_seed(1000 * seed + r)
        noise = torch.rand(shape, generator=gen, dtype=torch.float64) * 2 - 1
        out.append((0.7 * shared + noise).to(dtype))
    return out


def _check(got, inputs, scale=1.0):
    want = adasum_reference([x.double().numpy() for x in inputs]) * scale
    err = np.abs(got.double().numpy().ravel() - want) / (1.0 + np.abs(want))
    assert err.max() <= TOL[got.dtype], (got.dtype, float(err.max()))


def _same_everywhere(hvd, t):
    root = hvd.broadcast(t, root_rank=0)
    assert torch.equal(t, root)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_allreduce_matches_reference(hvd, dtype):
    n, r = hvd.size(), hvd.rank()
    for shape, seed in (((17, 3), 1), ((1,), 2), ((1000,), 3)):
        inputs = _inputs(n, shape, seed, dtype)
        got = hvd.allreduce(inputs[r], op=hvd.Adasum, name="ada.%s.%d" % (dtype, seed))
        assert got.dtype == dtype and got.shape == inputs[r].shape
        _check(got, inputs)
        _same_everywhere(hvd, got)
        x = inputs[r].clone()
        assert hvd.allreduce_(x, op=hvd.Adasum) is x
        assert torch.equal(x, got)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_fused_batch_is_per_tensor(hvd, dtype):
    n, r = hvd.size(), hvd.rank()
    shapes = [(5,), (64, 3), (1,), (300,)]
    inputs = [_inputs(n, s, 10 + i, dtype) for i, s in enumerate(shapes)]
    same = torch.linspace(-2, 3, 40, dtype=torch.float64).to(dtype)  # the same on every rank
    mine = [x[r] for x in inputs]
    # A grouped allreduce is one fused batch; async ops submitted together fuse as well.
    outs = hvd.grouped_allreduce(mine[:2] + [same] + mine[2:], op=hvd.Adasum)
    assert torch.equal(outs[2], same)  # Adasum of equal vectors is that vector, exactly
    for o, x in zip(outs[:2] + outs[3:], inputs):
        _check(o, x)
    handles = [hvd.allreduce_async(t, op=hvd.Adasum, name="fuse.%s.%d" % (dtype, i))
               for i, t in enumerate(mine + [same])]
    outs = [hvd.synchronize(h) for h in handles]
    assert torch.equal(outs[-1], same)
    for o, x in zip(outs, inputs):
        _check(o, x)
        _same_everywhere(hvd, o)


# Horovod's test_stability and test_stability_2 (test/parallel/test_adasum_pytorch.py): every
# rank holds the same direction times its own factor, so the vectors are parallel, and
# adasum(x, k x) = (x + k x) / 2. Over kolo's tree the result is a weighted average: 1/p per
# core rank, halved for rank i and its folded rank p + i. The direction's entries are multiples
# of 4 up to 60 and the factors powers of two, so inputs and averages are exact in each dtype.
# Before Horovod's bound (sqrt(DBL_MIN) on |x|^2) any vector with |x| < 1e-4 was summed instead.
_STABILITY = {
    # float16: subnormals from 2^-24, values up to 61440 (max 65504), and both at once.
    torch.float16: {"tiny": [-24, -23, -22, -21], "huge": [10, 9, 8, 7],
                    "spread": [-24, 10, -8, 2]},
    # bfloat16 and float32: float's exponent range, FLT_MIN = 2^-126 up to about 2^128.
    torch.bfloat16: {"tiny": [-126, -125, -124, -123], "huge": [121, 120, 119, 118],
                     "spread": [-126, 121, -40, 60]},
    torch.float32: {"tiny": [-126, -125, -124, -123], "huge": [121, 120, 119, 118],
                    "spread": [-126, 121, -40, 60]},
    # float64: |x|^2 must lie between the bound (2^-511) and 2^1024.
    torch.float64: {"tiny": [-256, -255, -254, -253], "huge": [490, 489, 488, 487],
                    "spread": [-256, 490, -100, 200]},
}
_EPS = {torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7, torch.float32: 2.0 ** -23,
        torch.float64: 2.0 ** -52}


def _tree_weights(n):
    p = 1
    while p * 2 <= n:
        p *= 2
    w = [1.0 / p] * n
    for i in range(n - p):
        w[i] = w[p + i] = 0.5 / p
    return w


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("case", ["tiny", "huge", "spread"])
def test_stability_parallel_vectors_average(hvd, dtype, case):
    n, r = hvd.size(), hvd.rank()
    i = np.arange(64)
    direction = 4.0 * (2 + (i * 7) % 14) * np.where(i % 3 == 1, -1.0, 1.0)
    exps = _STABILITY[dtype][case]
    # In "spread", the third factor is negative: parallel vectors of opposite sense average too.
    scales = [(-1.0 if case == "spread" and j == 2 else 1.0) * 2.0 ** e
              for j, e in enumerate(exps)]
    inputs = [torch.from_numpy(scales[q % 4] * direction).to(dtype) for q in range(n)]
    for q in range(n):
        assert np.array_equal(inputs[q].double().numpy(), scales[q % 4] * direction)  # exact
    got = hvd.allreduce(inputs[r], op=hvd.Adasum, name="stability.%s.%s" % (case, dtype))
    want = sum(w * x.double().numpy() for w, x in zip(_tree_weights(n), inputs))
    g = got.double().numpy()
    assert np.all(np.isfinite(g)), g
    s = abs(want[0])  # scaled so that the norms neither overflow nor underflow
    rel = np.linalg.norm((g - want) / s) / np.linalg.norm(want / s)
    assert rel <= 4 * _EPS[dtype], (case, dtype, rel)
    _same_everywhere(hvd, got)


def test_scaling_and_numpy(hvd, kolo_world):
    k = kolo_world
    n, r = hvd.size(), hvd.rank()
    inputs = _inputs(n, (33,), 5, torch.float64)
    # Adasum is scale-equivariant: adasum(s g) = s adasum(g); postscale multiplies the result.
    got = hvd.allreduce(inputs[r], op=hvd.Adasum, prescale_factor=0.5, postscale_factor=3.0)
    _check(got, inputs, scale=1.5)
    out = k.allreduce(inputs[r].numpy().astype(np.float32), op=k.Adasum)
    assert out.dtype == np.float32
    _check(torch.from_numpy(out), [x.float() for x in inputs])


def test_errors(hvd):
    r = hvd.rank()
    with pytest.raises(ValueError, match="int32"):
        hvd.allreduce(torch.ones(3, dtype=torch.int32), op=hvd.Adasum)
    with pytest.raises(ValueError, match="adasum"):
        hvd.grouped_allreduce([torch.ones(2), torch.ones(2, dtype=torch.int64)], op=hvd.Adasum)
    # Horovod's reducescatter refuses Adasum with a RuntimeError.
    with pytest.raises(RuntimeError, match="Adasum"):
        hvd.reducescatter(torch.ones(4), op=hvd.Adasum)
    with pytest.raises(RuntimeError, match="Adasum"):
        hvd.grouped_reducescatter([torch.ones(4), torch.ones(2)], op=hvd.Adasum)
    with pytest.raises(RuntimeError, match="Adasum"):
        hvd.reducescatter_async(torch.ones(4), op=hvd.Adasum)
    # Ranks that disagree on the op fail the op on every rank, naming it.
    with pytest.raises(hvd.HorovodInternalError, match="op_mismatch"):
        hvd.allreduce(torch.ones(3), op=hvd.Adasum if r == 0 else hvd.Sum, name="op_mismatch")
    assert torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Adasum), torch.ones(2))


def test_autograd(hvd):
    x = torch.arange(4, dtype=torch.float64).requires_grad_()
    y = hvd.allreduce(x, op=hvd.Adasum)
    assert torch.equal(y, x.detach())  # every rank holds the same x
    (y * 2).sum().backward()
    # Horovod's backward: the same op on the gradients (all equal here).
    assert torch.equal(x.grad, torch.full((4,), 2.0, dtype=torch.float64))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_tensors_go_through_the_host(hvd):
    n, r = hvd.size(), hvd.rank()
    inputs = _inputs(n, (50,), 7, torch.float32)
    dev = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
    got = hvd.allreduce(inputs[r].to(dev), op=hvd.Adasum)
    assert got.device == dev
    _check(got.cpu(), inputs)


def test_host_path_round_trip(hvd):
    """The CUDA route (kolo.torch._adasum_host: copy to the host, reduce, copy back), driven
    with CPU tensors so it runs without a GPU: same results as the direct op, in place too."""
    from kolo.torch import _adasum_host
    n, r = hvd.size(), hvd.rank()
    a, b = _inputs(n, (9,), 8, torch.float32), _inputs(n, (4, 2), 9, torch.float64)
    want_a = hvd.allreduce(a[r], op=hvd.Adasum)
    got = hvd.synchronize(_adasum_host.allreduce([a[r]], False, None, hvd.Adasum, 1.0, 1.0,
                                                 hvd.global_process_set, False))
    assert torch.equal(got, want_a) and got is not a[r]
    xs = [a[r].clone(), b[r].clone()]
    outs = hvd.synchronize(_adasum_host.allreduce(xs, True, "host.grouped", hvd.Adasum, 1.0,
                                                  1.0, hvd.global_process_set, True))
    assert outs[0] is xs[0] and outs[1] is xs[1]
    _check(xs[0], a)
    _check(xs[1], b)
    assert not _adasum_host.needs_host([a[r]], hvd.Adasum)
    # In place into a parameter (a leaf that requires grad), as hvd.allreduce_(param,
    # op=hvd.Adasum) on a CUDA parameter does: the copy back must not be recorded by autograd.
    param = torch.nn.Parameter(a[r].clone())
    out = hvd.synchronize(_adasum_host.allreduce([param], True, "host.param", hvd.Adasum, 1.0,
                                                 1.0, hvd.global_process_set, False))
    assert out is param and param.requires_grad
    _check(param.detach(), a)


def _model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 1))


def _batch(rank, step):
    gen = torch.Generator().manual_seed(100 * step + rank)
    x = torch.randn(16, 4, generator=gen)
    return x, (x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])).tanh()


def test_optimizer_step_is_adasum_of_the_updates(hvd):
    r = hvd.rank()
    lr = 0.1
    m = _model(0)
    before = [p.detach().clone() for p in m.parameters()]
    x, y = _batch(r, 0)
    grads = torch.autograd.grad(((m(x) - y) ** 2).mean(), list(m.parameters()))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=lr),
                                   named_parameters=m.named_parameters(), op=hvd.Adasum)
    opt.zero_grad()
    ((m(x) - y) ** 2).mean().backward()
    opt.step()
    for p, p0, g in zip(m.parameters(), before, grads):
        updates = hvd.allgather((-lr * g).reshape(1, -1)).double().numpy()
        want = p0.double().numpy().ravel() + adasum_reference(list(updates))
        np.testing.assert_allclose(p.detach().double().numpy().ravel(), want, rtol=1e-5,
                                   atol=1e-6)
        _same_everywhere(hvd, p.detach())


def test_optimizer_trains(hvd):
    r = hvd.rank()
    m = _model(1)
    opt = hvd.DistributedOptimizer(torch.optim.Adam(m.parameters(), lr=0.05),
                                   named_parameters=m.named_parameters(), op=hvd.Adasum,
                                   backward_passes_per_step=2)
    hvd.broadcast_parameters(m.state_dict(), root_rank=0)
    losses = []
    for step in range(30):
        opt.zero_grad()
        for half in range(2):
            x, y = _batch(r, 2 * step + half)
            loss = ((m(x) - y) ** 2).mean()
            loss.backward()
        opt.step()
        losses.append(float(loss))
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5]), losses
    for p in m.parameters():
        _same_everywhere(hvd, p.detach())
    with pytest.raises(AssertionError, match="Adasum"):
        with opt.skip_synchronize():
            pass
