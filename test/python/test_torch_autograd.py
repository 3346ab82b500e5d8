# SPDX-License-Identifier: Apache-2.0
"""Gradients of kolo.torch's differentiable collectives, checked against closed forms. Each
rank r uses a loss weighted by (r + 1), so the expected gradients involve W = sum(r + 1)."""

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed for this interpreter")


def _world(hvd):
    n, r = hvd.size(), hvd.rank()
    return n, r, n * (n + 1) / 2.0


def test_allreduce_sum_average_scaled(hvd):
    n, r, w = _world(hvd)
    for op, factor in ((hvd.Sum, 1.0), (hvd.Average, 1.0 / n)):
        x = torch.full((3, 2), float(r), dtype=torch.float64, requires_grad=True)
        y = hvd.allreduce(x, op=op, prescale_factor=2.0, postscale_factor=0.5)
        (y * (r + 1)).sum().backward()
        torch.testing.assert_close(x.grad, torch.full((3, 2), w * factor, dtype=torch.float64))
    x = torch.ones(4, requires_grad=True)
    with pytest.warns(DeprecationWarning):
        y = hvd.allreduce(x, average=False)
    (y * (r + 1)).sum().backward()
    torch.testing.assert_close(x.grad, torch.full((4,), w))


def test_allreduce_min_max_product(hvd):
    n, r, w = _world(hvd)
    x = torch.tensor([float(r), -float(r), 5.0 + (r == 0)], requires_grad=True)
    y = hvd.allreduce(x, op=hvd.Max)
    (y * (r + 1)).sum().backward()
    expect = [w if r == n - 1 else 0.0, w if r == 0 else 0.0, w if r == 0 else 0.0]
    if n == 1:
        expect = [w, w, w]
    torch.testing.assert_close(x.grad, torch.tensor(expect))

    x = torch.tensor([float(r), -float(r)], requires_grad=True)
    y = hvd.allreduce(x, op=hvd.Min)
    (y * (r + 1)).sum().backward()
    expect = [w if r == 0 else 0.0, w if r == n - 1 else 0.0]
    if n == 1:
        expect = [w, w]
    torch.testing.assert_close(x.grad, torch.tensor(expect))

    x = torch.tensor([float(r + 1), 0.0 if r == 0 else 2.0, 3.0], dtype=torch.float64,
                     requires_grad=True)
    y = hvd.allreduce(x, op=hvd.Product)
    (y * (r + 1)).sum().backward()
    all_prod = 1.0
    for q in range(n):
        all_prod *= q + 1
    others0 = all_prod / (r + 1)
    others1 = 2.0 ** (n - 1) if r == 0 else 0.0
    others2 = 3.0 ** (n - 1)
    torch.testing.assert_close(x.grad, torch.tensor([w * others0, w * others1, w * others2],
                                                    dtype=torch.float64))


def test_grouped_allreduce_grad(hvd):
    n, r, w = _world(hvd)
    a = torch.ones(2, requires_grad=True)
    b = torch.ones(3, 1, requires_grad=True)
    ya, yb = hvd.grouped_allreduce([a, b], op=hvd.Sum)
    ((ya * (r + 1)).sum() + (yb * 2 * (r + 1)).sum()).backward()
    torch.testing.assert_close(a.grad, torch.full((2,), w))
    torch.testing.assert_close(b.grad, torch.full((3, 1), 2 * w))


def test_fp16_compressed_allreduce_grad(hvd):
    n, r, w = _world(hvd)
    x = torch.full((5,), 0.5, requires_grad=True)
    y = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16)
    assert y.dtype == torch.float32
    torch.testing.assert_close(y.detach(), torch.full((5,), 0.5 * n))
    (y * (r + 1)).sum().backward()
    torch.testing.assert_close(x.grad, torch.full((5,), w))


def test_allgather_grad(hvd):
    n, r, w = _world(hvd)
    x = torch.zeros(r + 1, 2, dtype=torch.float64, requires_grad=True)
    y = hvd.allgather(x)
    rows = n * (n + 1) // 2
    weights = torch.arange(rows, dtype=torch.float64).unsqueeze(1).repeat(1, 2)
    (y * weights * (r + 1)).sum().backward()
    offset = r * (r + 1) // 2
    # Horovod's gradient: the ranks' output gradients averaged (w / n), this rank's rows.
    expect = (w / n) * torch.arange(offset, offset + r + 1, dtype=torch.float64).unsqueeze(1)
    torch.testing.assert_close(x.grad, expect.repeat(1, 2))


def test_broadcast_grad(hvd):
    n, r, w = _world(hvd)
    for root in range(n):
        x = torch.full((2, 2), float(r), requires_grad=True)
        y = hvd.broadcast(x, root)
        torch.testing.assert_close(y.detach(), torch.full((2, 2), float(root)))
        (y * (r + 1)).sum().backward()
        expect = w / n if r == root else 0.0  # averaged over the ranks, as Horovod
        torch.testing.assert_close(x.grad, torch.full((2, 2), expect))


def test_alltoall_grad(hvd):
    n, r, _ = _world(hvd)
    x = torch.zeros(2 * n, dtype=torch.float64, requires_grad=True)
    y = hvd.alltoall(x)
    positions = torch.arange(1, 2 * n + 1, dtype=torch.float64)
    (y * positions * (r + 1)).sum().backward()
    # x_r[2q + i] lands on rank q at position 2r + i.
    expect = torch.tensor([(q + 1) * (2 * r + i + 1) for q in range(n) for i in range(2)],
                          dtype=torch.float64)
    torch.testing.assert_close(x.grad, expect)
    x = torch.zeros(n * (n + 1) // 2, dtype=torch.float64, requires_grad=True)
    y, received = hvd.alltoall(x, splits=[q + 1 for q in range(n)])
    assert not received.requires_grad
    (y * (r + 1)).sum().backward()
    expect = torch.cat([torch.full((q + 1,), float(q + 1), dtype=torch.float64)
                        for q in range(n)])
    torch.testing.assert_close(x.grad, expect)
    # Splits summing to less than dim 0: the unsent trailing rows get a zero gradient.
    x = torch.zeros(n + 2, 2, dtype=torch.float64, requires_grad=True)
    y, _ = hvd.alltoall(x, splits=[1] * n)
    (y * (r + 1)).sum().backward()
    expect = torch.cat([torch.tensor([[q + 1.0] * 2 for q in range(n)], dtype=torch.float64),
                        torch.zeros(2, 2, dtype=torch.float64)])
    torch.testing.assert_close(x.grad, expect)


def test_reducescatter_grad(hvd):
    n, r, _ = _world(hvd)
    rows = 2 * n + 1
    owner = [q for q in range(n) for _ in range(3 if q == 0 else 2)] if n > 1 else [0] * 3
    # As Horovod: the allgathered output gradient, times the set size for Sum, unscaled for
    # Average; prescale and postscale multiply it like the forward.
    for op, factor in ((hvd.Sum, float(n)), (hvd.Average, 1.0)):
        for pre, post in ((1.0, 1.0), (2.0, 0.25)):
            x = torch.ones(rows, 2, dtype=torch.float64, requires_grad=True)
            y = hvd.reducescatter(x, op=op, prescale_factor=pre, postscale_factor=post)
            (y * (r + 1)).sum().backward()
            expect = torch.tensor([(q + 1) * factor * pre * post for q in owner],
                                  dtype=torch.float64).unsqueeze(1).repeat(1, 2)
            torch.testing.assert_close(x.grad, expect)
        xs = [torch.ones(rows, 2, dtype=torch.float64, requires_grad=True),
              torch.ones(n, dtype=torch.float64, requires_grad=True)]
        ys = hvd.grouped_reducescatter(xs, op=op)
        (ys[0] * (r + 1)).sum().backward()
        (ys[1] * (r + 1)).sum().backward()
        expect = torch.tensor([(q + 1) * factor for q in owner],
                              dtype=torch.float64).unsqueeze(1).repeat(1, 2)
        torch.testing.assert_close(xs[0].grad, expect)
        torch.testing.assert_close(xs[1].grad, torch.tensor([(q + 1) * factor for q in range(n)],
                                                            dtype=torch.float64))
    x = torch.tensor([[float(r)], [float(-r)]] * n, requires_grad=True)
    y = hvd.reducescatter(x, op=hvd.Max)
    (y * (r + 1)).sum().backward()
    # Rows 2q, 2q+1 belong to rank q; the max of row 2q is on rank n-1, of 2q+1 on rank 0.
    expect = []
    for q in range(n):
        expect.append(float(q + 1) if (r == n - 1 or n == 1) else 0.0)
        expect.append(float(q + 1) if r == 0 else 0.0)
    torch.testing.assert_close(x.grad, torch.tensor(expect).unsqueeze(1))


def test_sync_batch_norm_matches_global_batch(hvd):
    n, r, _ = _world(hvd)
    g = torch.Generator().manual_seed(7)
    full = torch.randn(4 * n, 3, 5, generator=g, dtype=torch.float64)
    target = torch.randn(4 * n, 3, 5, generator=g, dtype=torch.float64)
    reference = torch.nn.BatchNorm1d(3).double()
    sync = hvd.SyncBatchNorm(3).double()
    with torch.no_grad():
        for bn in (reference, sync):
            bn.weight.copy_(torch.tensor([0.5, 1.0, 2.0]))
            bn.bias.copy_(torch.tensor([0.1, -0.2, 0.3]))
    x_ref = full.clone().requires_grad_(True)
    y_ref = reference(x_ref)
    ((y_ref - target) ** 2).sum().backward()
    rows = slice(4 * r, 4 * (r + 1))
    x = full[rows].clone().requires_grad_(True)
    y = sync(x)
    ((y - target[rows]) ** 2).sum().backward()
    torch.testing.assert_close(y.detach(), y_ref.detach()[rows])
    torch.testing.assert_close(x.grad, x_ref.grad[rows])
    # Parameter gradients are per-rank partial sums; their allreduce is the full-batch one.
    torch.testing.assert_close(hvd.allreduce(sync.weight.grad, op=hvd.Sum), reference.weight.grad)
    torch.testing.assert_close(hvd.allreduce(sync.bias.grad, op=hvd.Sum), reference.bias.grad)
    torch.testing.assert_close(sync.running_mean, reference.running_mean)
    torch.testing.assert_close(sync.running_var, reference.running_var)
    sync.eval()
    reference.eval()
    torch.testing.assert_close(sync(full[rows]), reference(full[rows]))


def test_sync_batch_norm_keeps_its_precision_when_the_mean_is_large(hvd):
    # float32 features around 1e4 with unit spread: the variance from E[x^2] - mean^2 lost every
    # digit (outputs off by hundreds); two passes match torch's batch norm of the global batch.
    n, r, _ = _world(hvd)
    g = torch.Generator().manual_seed(11)
    full = torch.randn(8 * n, 2, generator=g) + torch.tensor([1e4, -3e3])
    reference = torch.nn.BatchNorm1d(2)
    sync = hvd.SyncBatchNorm(2)
    rows = slice(8 * r, 8 * (r + 1))
    y_ref = reference(full)
    y = sync(full[rows])
    torch.testing.assert_close(y.detach(), y_ref.detach()[rows], atol=2e-3, rtol=1e-3)
    torch.testing.assert_close(sync.running_var, reference.running_var, atol=1e-3, rtol=1e-3)


def test_sync_batch_norm_without_running_stats_uses_the_global_batch_in_eval_too(hvd):
    # Horovod takes the local path only in eval mode WITH running statistics; without them
    # (track_running_stats=False) eval normalizes by the global batch, as training does.
    n, r, _ = _world(hvd)
    g = torch.Generator().manual_seed(5)
    full = torch.randn(4 * n, 3, generator=g, dtype=torch.float64) * (1.0 + torch.arange(3.0))
    reference = torch.nn.BatchNorm1d(3, track_running_stats=False).double().eval()
    sync = hvd.SyncBatchNorm(3, track_running_stats=False).double().eval()
    rows = slice(4 * r, 4 * (r + 1))
    with torch.no_grad():
        torch.testing.assert_close(sync(full[rows]), reference(full)[rows])
