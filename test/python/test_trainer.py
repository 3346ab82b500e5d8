# SPDX-License-Identifier: Apache-2.0
"""kolo.torch.Trainer end to end on N ranks (run under `kolorun -np 2` and `-np 3`), and the
Lightning strategy (its test skips on every rank when Lightning is not importable).

The reference for data-parallel training is one local model trained on the whole batch: with
a non-shuffled loader, DistributedSampler gives rank r the samples r, r+N, r+2N, ..., so batch
k of all ranks together is the contiguous chunk k of size N*B, and N ranks with batch B must
match one process with batch N*B."""

import io
import os
import re
import sys

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed for this interpreter")
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

BATCH = 4
N_SAMPLES = 48  # a multiple of BATCH * size for 2 and 3 ranks: the ranks' shards are disjoint


def _data(seed=7):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N_SAMPLES, 3, generator=g, dtype=torch.float64)
    y = x @ torch.tensor([[1.5], [-2.0], [0.5]], dtype=torch.float64) + 0.1
    return x, y


def _net(seed=1234):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(3, 6), torch.nn.Tanh(),
                               torch.nn.Linear(6, 1)).double()


def _module_class(hvd):
    class Regression(hvd.KoloModule):
        """Linear regression through a small MLP, logging per-rank-distinct metrics."""

        def __init__(self, shuffle=False, lr=0.1, perturb=True, scheduler=True):
            super().__init__()
            self.net = _net()
            if perturb and hvd.rank() != 0:  # the Trainer's broadcast must undo this
                with torch.no_grad():
                    for p in self.net.parameters():
                        p.add_(1.0 + hvd.rank())
            self.shuffle, self.lr, self.scheduler = shuffle, lr, scheduler
            self.seen = {}      # epoch -> sample indices seen by this rank, in order
            self.losses = {}    # epoch -> losses logged by this rank
            self.hooks = []

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, batch_idx):
            x, y, idx = batch
            loss = torch.nn.functional.mse_loss(self(x), y)
            self.seen.setdefault(self.current_epoch, []).extend(idx.tolist())
            self.losses.setdefault(self.current_epoch, []).append(loss.item())
            self.log("loss", loss)
            self.log("rank_step", 100.0 * hvd.rank() + batch_idx)
            self.log("count", 1, reduce_fx="sum")
            self.log("top_rank", float(hvd.rank()), reduce_fx="max", logger=False)
            self.log("root_only", 5.0 + self.current_epoch, rank_zero_only=True)
            return loss

        def validation_step(self, batch, batch_idx):
            x, y, idx = batch
            self.log("val_loss", torch.nn.functional.mse_loss(self(x), y))
            self.log("val_samples", float(len(idx)), reduce_fx="sum")

        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)
            if not self.scheduler:
                return opt
            return {"optimizer": opt,
                    "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)}

        def _loader(self, shuffle):
            x, y = _data()
            ds = TensorDataset(x, y, torch.arange(N_SAMPLES))
            return DataLoader(ds, batch_size=BATCH, shuffle=shuffle)

        def train_dataloader(self):
            return self._loader(self.shuffle)

        def val_dataloader(self):
            return self._loader(False)

        def on_train_epoch_start(self):
            self.hooks.append(("train_start", self.current_epoch))

        def on_fit_end(self):
            self.hooks.append(("fit_end", self.current_epoch))

    return Regression


def _reference(n, epochs, accumulate=1, clip=None, scheduler=True, order=None):
    """One process, batch n*BATCH*accumulate, same start and schedule. order(epoch) gives the
    epoch's sample order when the ranks' DistributedSampler shuffles (the ranks' batches k
    together are then the k-th chunk of that permutation); None: in order."""
    net = _net()
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5) if scheduler else None
    x0, y0 = _data()
    step = n * BATCH * accumulate
    for epoch in range(epochs):
        idx = torch.arange(N_SAMPLES) if order is None else order(epoch)
        x, y = x0[idx], y0[idx]
        for s in range(0, N_SAMPLES, step):
            opt.zero_grad()
            torch.nn.functional.mse_loss(net(x[s:s + step]), y[s:s + step]).backward()
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(net.parameters(), clip)
            opt.step()
        if sched is not None:
            sched.step()
    return [p.detach() for p in net.parameters()]


def _assert_same_everywhere(hvd, tensors, what):
    # Every broadcast first, then the verdict: a failing rank leaves no collective behind.
    roots = [hvd.broadcast(t.detach().clone(), 0, name="trainer_test.same.%s.%d" % (what, i))
             for i, t in enumerate(tensors)]
    differ = [i for i, (root, t) in enumerate(zip(roots, tensors))
              if not torch.equal(root, t.detach())]
    assert not differ, "rank %d: %s %s differ from rank 0" % (hvd.rank(), what, differ)


def test_fit_matches_one_process_and_params_identical(hvd):
    module = _module_class(hvd)()
    trainer = hvd.Trainer(max_epochs=3, verbose=False)
    trainer.fit(module)
    _assert_same_everywhere(hvd, list(module.parameters()), "param")
    reference = _reference(hvd.size(), 3)
    for p, q in zip(module.net.parameters(), reference):
        torch.testing.assert_close(p.detach(), q, rtol=1e-10, atol=1e-10)
    assert trainer.global_step == 3 * N_SAMPLES // (BATCH * hvd.size())
    assert trainer.current_epoch == 2
    # StepLR stepped the wrapped optimizer's learning rate: 0.1 * 0.5 ** 3.
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(0.0125, abs=1e-15)
    assert module.hooks == [("train_start", 0), ("train_start", 1), ("train_start", 2),
                            ("fit_end", 2)]
    assert module.trainer is trainer


def test_metrics_identical_and_mean_of_ranks(hvd):
    n = hvd.size()
    module = _module_class(hvd)()
    trainer = hvd.Trainer(max_epochs=2, verbose=False, log_every_n_steps=2)
    trainer.fit(module)
    steps = N_SAMPLES // (BATCH * n)
    m = {k: v.item() for k, v in trainer.callback_metrics.items()}
    # rank_step: rank r logs 100 r + batch_idx; its epoch mean is 100 r + (steps - 1) / 2.
    assert m["rank_step"] == pytest.approx(100.0 * (n - 1) / 2 + (steps - 1) / 2, abs=1e-12)
    assert m["count"] == n * steps  # sum over steps, then over ranks
    assert m["top_rank"] == n - 1
    assert m["root_only"] == 6.0  # rank 0's value of the last epoch
    assert "top_rank" not in trainer.logged_metrics and "top_rank" in trainer.callback_metrics
    # loss: the mean over ranks of each rank's mean over its steps of the last epoch.
    mine = sum(module.losses[1]) / len(module.losses[1])
    per_rank = hvd.allgather_object(mine, name="trainer_test.loss_means")
    assert m["loss"] == pytest.approx(sum(per_rank) / n, rel=1e-12)
    # validation after each epoch: every sample counted once over the ranks.
    assert m["val_samples"] == N_SAMPLES
    everyone = hvd.allgather_object((m, trainer.metrics_history, trainer.step_metrics),
                                    name="trainer_test.metrics")
    assert all(e == everyone[0] for e in everyone), everyone
    assert [h["epoch"] for h in trainer.metrics_history] == [0, 1]
    assert [s for s, _ in trainer.step_metrics] == list(range(2, 2 * steps + 1, 2))
    # a step record: batch_idx = global_step - 1 - epoch * steps, on every rank.
    step, values = trainer.step_metrics[0]
    assert values["rank_step"] == pytest.approx(100.0 * (n - 1) / 2 + (step - 1), abs=1e-12)


def test_data_sharded_disjoint_covering_with_set_epoch(hvd):
    n, r = hvd.size(), hvd.rank()
    module = _module_class(hvd)(shuffle=True, scheduler=False)
    trainer = hvd.Trainer(max_epochs=2, verbose=False)
    trainer.fit(module)
    sampler = trainer.train_sampler
    assert isinstance(sampler, torch.utils.data.distributed.DistributedSampler)
    assert (sampler.num_replicas, sampler.rank, sampler.shuffle) == (n, r, True)
    assert sampler.epoch == 1  # set_epoch ran before the last epoch
    assert trainer.train_dataloader.batch_size == BATCH
    seen = hvd.allgather_object(module.seen, name="trainer_test.seen")
    for epoch in (0, 1):
        shards = [s[epoch] for s in seen]
        flat = [i for s in shards for i in s]
        assert len(flat) == len(set(flat)) == N_SAMPLES, "shards overlap or miss samples"
        assert sorted(flat) == list(range(N_SAMPLES))
        # Exactly DistributedSampler's order for (rank, epoch): set_epoch(epoch) was called.
        expected = torch.utils.data.distributed.DistributedSampler(
            range(N_SAMPLES), num_replicas=n, rank=r, shuffle=True, seed=0)
        expected.set_epoch(epoch)
        assert module.seen[epoch] == list(expected)
    assert module.seen[0] != module.seen[1], "the shuffle did not change between epochs"


def test_collate_fn_and_batch_size_are_kept(hvd):
    calls = []

    def collate(samples):
        calls.append(len(samples))
        xs, ys, idx = zip(*samples)
        return torch.stack(xs), torch.stack(ys), torch.stack(idx)

    Regression = _module_class(hvd)

    class Collated(Regression):
        def train_dataloader(self):
            x, y = _data()
            return DataLoader(TensorDataset(x, y, torch.arange(N_SAMPLES)), batch_size=3,
                              collate_fn=collate)

    module = Collated(scheduler=False)
    trainer = hvd.Trainer(max_epochs=1, verbose=False)
    trainer.fit(module)
    per_rank = N_SAMPLES // hvd.size()
    assert sum(calls) == per_rank and max(calls) == 3
    assert trainer.train_dataloader.collate_fn is collate


def test_accumulation_and_clipping_match_one_process(hvd):
    module = _module_class(hvd)(scheduler=False)
    trainer = hvd.Trainer(max_epochs=2, verbose=False, accumulate_grad_batches=2,
                          gradient_clip_val=0.5)
    trainer.fit(module)
    _assert_same_everywhere(hvd, list(module.parameters()), "accumulated")
    reference = _reference(hvd.size(), 2, accumulate=2, clip=0.5, scheduler=False)
    for p, q in zip(module.net.parameters(), reference):
        torch.testing.assert_close(p.detach(), q, rtol=1e-10, atol=1e-10)
    assert trainer.global_step == 2 * N_SAMPLES // (2 * BATCH * hvd.size())


def test_checkpoint_only_on_rank0_and_resume(hvd, tmp_path, monkeypatch):
    folder = hvd.broadcast_object(str(tmp_path / "ckpt"), 0, name="trainer_test.ckpt_dir")
    saves = []
    real_save = torch.save
    monkeypatch.setattr(torch, "save", lambda obj, f, *a, **k: (saves.append(str(f)),
                                                                 real_save(obj, f, *a, **k)))
    Regression = _module_class(hvd)
    full = Regression(shuffle=True)
    trainer = hvd.Trainer(max_epochs=2, checkpoint_dir=folder, verbose=False)
    trainer.fit(full)
    expected = [os.path.join(folder, "epoch=0.ckpt"), os.path.join(folder, "epoch=1.ckpt")]
    assert trainer.checkpoint_paths == expected  # the same list on every rank
    if hvd.rank() == 0:
        assert len(saves) == 2
        for path in expected:
            assert os.path.isfile(path)
        ckpt = torch.load(expected[1])
        assert ckpt["epoch"] == 1 and ckpt["world_size"] == hvd.size()
        for name, value in full.state_dict().items():
            assert torch.equal(ckpt["state_dict"][name], value)
        assert ckpt["metrics"]["loss"] == trainer.callback_metrics["loss"].item()
    else:
        assert saves == [], "rank %d wrote %s" % (hvd.rank(), saves)
    monkeypatch.setattr(torch, "save", real_save)

    # Resuming from epoch 0 (read on rank 0 only) and training epoch 1 gives the same model.
    resumed = Regression(shuffle=True)
    again = hvd.Trainer(max_epochs=2, verbose=False)
    again.fit(resumed, ckpt_path=expected[0])
    assert sorted(resumed.seen) == [1], "the resumed run trained epochs %s" % sorted(resumed.seen)
    assert again.optimizer.param_groups[0]["lr"] == pytest.approx(0.025, abs=1e-15)
    for p, q in zip(resumed.parameters(), full.parameters()):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-12, atol=1e-12)


def test_checkpoint_failure_raises_on_every_rank(hvd, tmp_path):
    blocker = hvd.broadcast_object(str(tmp_path / "not_a_folder"), 0, name="trainer_test.blk")
    if hvd.rank() == 0:
        with open(blocker, "w") as f:
            f.write("a file where the checkpoint folder should be")
    module = _module_class(hvd)(scheduler=False)
    trainer = hvd.Trainer(max_epochs=1, checkpoint_dir=os.path.join(blocker, "sub"),
                          verbose=False)
    with pytest.raises(RuntimeError, match="rank 0 could not write the checkpoint"):
        trainer.fit(module)


def test_optimizer_state_broadcast_from_rank0(hvd):
    class WithState(hvd.KoloModule):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 2).double()

        def training_step(self, batch, batch_idx):
            return self.lin(batch[0]).sum()

        def configure_optimizers(self):
            opt = torch.optim.Adam(self.parameters(), lr=0.01 * (1 + hvd.rank()))
            for p in self.parameters():  # a rank-dependent state, as after a local warm-up
                p.grad = torch.full_like(p, float(hvd.rank() + 1))
            opt.step()
            opt.zero_grad()
            return opt

        def train_dataloader(self):
            return DataLoader(TensorDataset(torch.zeros(6, 3, dtype=torch.float64)), batch_size=1)

    module = WithState()
    trainer = hvd.Trainer(max_epochs=0, verbose=False)
    trainer.fit(module)
    opt = trainer.optimizer
    assert opt.param_groups[0]["lr"] == 0.01
    states = [opt.state[p][k] for p in module.parameters() for k in ("exp_avg", "exp_avg_sq")]
    _assert_same_everywhere(hvd, states + list(module.parameters()), "adam_state")
    assert torch.all(states[0] == states[0].flatten()[0])
    assert states[0].flatten()[0].item() == pytest.approx(0.1)  # (1 - beta1) * rank 0's grad 1


def test_duck_typed_module_and_validate(hvd):
    n = hvd.size()

    class Plain(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 1).double()

        def training_step(self, batch, batch_idx):
            x, y, _ = batch
            loss = torch.nn.functional.mse_loss(self.lin(x), y)
            self.log("plain_loss", loss)
            return {"loss": loss}

        def validation_step(self, batch, batch_idx):
            self.log("val_rank", float(hvd.rank()))
            self.log("val_n", float(len(batch[2])), reduce_fx="sum")

        def configure_optimizers(self):
            return [torch.optim.SGD(self.parameters(), lr=0.05)]

        def train_dataloader(self):
            x, y = _data()
            return DataLoader(TensorDataset(x, y, torch.arange(N_SAMPLES)), batch_size=BATCH,
                              shuffle=True)

        def val_dataloader(self):
            return self.train_dataloader()

    module = Plain()
    trainer = hvd.Trainer(max_epochs=1, verbose=False)
    trainer.fit(module)
    assert "plain_loss" in trainer.logged_metrics
    assert not hasattr(module, "log") and not hasattr(module, "trainer")  # lent, given back
    result = trainer.validate(module)
    assert result == [{"val_rank": pytest.approx((n - 1) / 2), "val_n": N_SAMPLES}]
    # validate() shards without shuffling, even for a shuffled loader.
    assert trainer.val_sampler.shuffle is False


def test_uneven_batches_fail_on_every_rank_instead_of_hanging(hvd):
    Regression = _module_class(hvd)

    class Uneven(Regression):
        def train_dataloader(self):
            x, y = _data()
            k = 8 + 4 * hvd.rank()  # every rank a different number of batches
            return DataLoader(TensorDataset(x[:k], y[:k], torch.arange(k)), batch_size=BATCH)

    trainer = hvd.Trainer(max_epochs=1, verbose=False, use_distributed_sampler=False)
    if hvd.size() == 1:
        pytest.skip("needs two ranks")
    with pytest.raises(ValueError, match="different numbers of batches"):
        trainer.fit(Uneven(scheduler=False))


def test_bad_modules_are_refused(hvd):
    trainer = hvd.Trainer(verbose=False)
    with pytest.raises(TypeError, match="does not define configure_optimizers"):
        trainer.fit(type("NoOpt", (torch.nn.Module,), {"training_step": lambda s, b, i: None,
                                                         "train_dataloader": lambda s: []})())

    class TwoOpts(_module_class(hvd)):
        def configure_optimizers(self):
            return [torch.optim.SGD(self.parameters(), lr=0.1),
                    torch.optim.SGD(self.parameters(), lr=0.2)]
    with pytest.raises(ValueError, match="exactly one torch.optim.Optimizer"):
        trainer.fit(TwoOpts())


# ---- progress bar -------------------------------------------------------------------------------
class _Terminal(io.StringIO):
    """A stream that says it is a terminal: stderr as the progress bar sees it in a console."""

    def isatty(self):
        return True


def _fit_with_stderr(hvd, monkeypatch, stream, **kwargs):
    """fit() of a 2-epoch Regression that also logs a prog_bar value, with sys.stderr replaced
    by `stream` for the duration; returns the module and the trainer."""
    class WithProgBar(_module_class(hvd)):
        def training_step(self, batch, batch_idx):
            self.log("shown", 0.25 + batch_idx, prog_bar=True)
            return super().training_step(batch, batch_idx)

    module = WithProgBar()
    trainer = hvd.Trainer(max_epochs=2, verbose=False, **kwargs)
    with monkeypatch.context() as m:
        m.setattr(sys, "stderr", stream)
        trainer.fit(module)
    return module, trainer


def test_progress_bar_on_a_terminal_is_drawn_on_rank0_only(hvd, monkeypatch):
    pytest.importorskip("tqdm")
    stream = _Terminal()
    module, trainer = _fit_with_stderr(hvd, monkeypatch, stream)
    assert trainer.enable_progress_bar  # Lightning's default
    out = stream.getvalue()
    if hvd.rank() != 0:
        assert out == ""
        return
    steps = N_SAMPLES // (BATCH * hvd.size())
    for epoch in (0, 1):
        # The epoch's final line: every batch done, the last loss, the prog_bar value, the rate.
        last = "loss=%.4g" % module.losses[epoch][-1]
        line = [ln for ln in re.split(r"[\r\n]", out)
                if ln.startswith("Epoch %d" % epoch) and "%d/%d" % (steps, steps) in ln]
        assert line, out
        assert last in line[-1] and "shown=%.4g" % (0.25 + steps - 1) in line[-1], line[-1]
        assert re.search(r"(it/s|s/it)", line[-1]), line[-1]


def test_progress_bar_not_on_a_pipe(hvd, monkeypatch):
    pytest.importorskip("tqdm")
    read_end, write_end = os.pipe()
    with os.fdopen(write_end, "w") as stream:
        _fit_with_stderr(hvd, monkeypatch, stream)
    with os.fdopen(read_end, "rb") as r:
        assert r.read() == b""


def test_progress_bar_turned_off(hvd, monkeypatch):
    stream = _Terminal()
    _, trainer = _fit_with_stderr(hvd, monkeypatch, stream, enable_progress_bar=False)
    assert trainer.enable_progress_bar is False
    assert stream.getvalue() == ""


def test_progress_bar_without_tqdm(hvd, monkeypatch):
    """tqdm not installed (an import of it fails): the Trainer trains and draws nothing."""
    stream = _Terminal()
    monkeypatch.setitem(sys.modules, "tqdm", None)
    _, trainer = _fit_with_stderr(hvd, monkeypatch, stream)
    assert stream.getvalue() == ""
    assert trainer.global_step == 2 * N_SAMPLES // (BATCH * hvd.size())


# ---- Lightning ----------------------------------------------------------------------------------
def test_lightning_collectives_without_lightning(hvd):
    """The strategy's reduce/all_gather, which need no Lightning to run."""
    from kolo.torch import lightning as kl
    n, r = hvd.size(), hvd.rank()
    x = torch.tensor([float(r), 2.0 * r])
    assert torch.equal(kl.reduce_tensor(x, reduce_op="sum"), torch.tensor([n * (n - 1) / 2,
                                                                           n * (n - 1.0)]))
    assert torch.equal(kl.reduce_tensor(x), torch.tensor([(n - 1) / 2, n - 1.0]))
    assert kl.reduce_tensor(torch.tensor(r), reduce_op="max").item() == n - 1
    assert kl.reduce_tensor(3.5) == 3.5
    with pytest.raises(ValueError, match="unsupported reduce_op"):
        kl.reduce_tensor(x, reduce_op="median")
    gathered = kl.gather_tensor(torch.tensor([r, 10 * r]))
    assert gathered.shape == (n, 2)
    assert gathered.tolist() == [[i, 10 * i] for i in range(n)]


def test_lightning_absent_gives_a_clear_error(hvd):
    from kolo.torch import lightning as kl
    if kl.LIGHTNING_AVAILABLE:
        pytest.skip("Lightning is installed (the strategy test covers it)")
    with pytest.raises(ImportError, match="needs Lightning"):
        kl.KoloStrategy()


def test_lightning_strategy_fit(hvd):
    from kolo.torch import lightning as kl
    if not kl.LIGHTNING_AVAILABLE:
        pytest.skip("neither lightning nor pytorch_lightning is importable")
    if kl.LIGHTNING_PACKAGE == "lightning":
        import lightning.pytorch as pl
    else:
        import pytorch_lightning as pl

    class LitRegression(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = _net()
            if hvd.rank() != 0:
                with torch.no_grad():
                    for p in self.net.parameters():
                        p.add_(1.0)

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.log("loss", loss, on_epoch=True, sync_dist=True)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)

        def train_dataloader(self):
            x, y = _data()
            return DataLoader(TensorDataset(x, y), batch_size=BATCH)

    module = LitRegression()
    trainer = pl.Trainer(strategy=kl.KoloStrategy(), accelerator="cpu", devices=1,
                         max_epochs=2, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(module)
    _assert_same_everywhere(hvd, list(module.parameters()), "lightning")
    # Lightning puts a DistributedSampler on the training loader and shuffles it (seed
    # PL_GLOBAL_SEED or 0, set_epoch per epoch) whether or not the loader shuffled: the
    # reference takes the same permutation per epoch.
    sampler = trainer.train_dataloader.sampler
    assert isinstance(sampler, torch.utils.data.DistributedSampler), type(sampler)
    assert (sampler.num_replicas, sampler.rank) == (hvd.size(), hvd.rank())
    assert trainer.global_step == 2 * N_SAMPLES // (BATCH * hvd.size())

    def order(epoch):
        if not sampler.shuffle:
            return torch.arange(N_SAMPLES)
        return torch.randperm(N_SAMPLES, generator=torch.Generator().manual_seed(sampler.seed +
                                                                               epoch))
    reference = _reference(hvd.size(), 2, scheduler=False, order=order)
    for p, q in zip(module.net.parameters(), reference):
        torch.testing.assert_close(p.detach(), q, rtol=1e-10, atol=1e-10)
    losses = hvd.allgather_object(float(trainer.callback_metrics["loss_epoch"]),
                                  name="trainer_test.lightning_loss")
    assert all(v == losses[0] for v in losses)
