#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The same training as pytorch_train.py, written as a LightningModule-style module and fitted
by kolo.torch.Trainer (sharding, DistributedOptimizer, broadcasts, metric averaging and rank-0
checkpoints are the Trainer's job). Exits non-zero if the model did not learn.

    python3 examples/trainer_train.py
    kolorun -np 2 python3 examples/trainer_train.py [--checkpoint-dir DIR]
    kolorun -np 2 python3 examples/trainer_train.py --lightning   # Lightning + KoloStrategy
"""

import argparse
import os
import sys

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

try:
    import kolo.torch as hvd
except ImportError:  # running from a source checkout without `cmake --install`
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                                    "bindings", "python"))
    import kolo.torch as hvd


def make_blobs(n, classes, features, seed):
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(classes, features, generator=g)
    labels = torch.randint(0, classes, (n,), generator=g)
    return centers[labels] + torch.randn(n, features, generator=g), labels


class BlobTask:
    """The LightningModule methods of the task, mixed into kolo.torch.KoloModule (for
    kolo.torch.Trainer) or into Lightning's LightningModule (for --lightning)."""

    def build(self, args):
        self.args = args
        self.net = torch.nn.Sequential(
            torch.nn.Linear(args.features, 64), torch.nn.ReLU(),
            torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, args.classes))
        x, y = make_blobs(args.samples, args.classes, args.features, args.seed)
        split = args.samples * 3 // 4
        self.train_set = TensorDataset(x[:split], y[:split])
        self.val_set = TensorDataset(x[split:], y[split:])

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("loss", loss, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y), sync_dist=True)
        self.log("val_acc", (logits.argmax(dim=1) == y).float().mean(), sync_dist=True)

    def configure_optimizers(self):
        # The global batch grows with the rank count: so does the learning rate.
        opt = torch.optim.SGD(self.parameters(), lr=self.args.lr * hvd.size(), momentum=0.9)
        return {"optimizer": opt,
                "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)}

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.args.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=256)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--lr", type=float, default=0.02, help="per rank; scaled by the rank count")
    p.add_argument("--samples", type=int, default=4096)
    p.add_argument("--classes", type=int, default=4)
    p.add_argument("--features", type=int, default=16)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--min-accuracy", type=float, default=0.9)
    p.add_argument("--checkpoint-dir", default=None, help="rank 0 writes epoch=<n>.ckpt here")
    p.add_argument("--lightning", action="store_true",
                   help="fit with Lightning's Trainer and kolo.torch.lightning.KoloStrategy")
    return p.parse_args()


class BlobClassifier(BlobTask, hvd.KoloModule):
    def __init__(self, args):
        super().__init__()
        self.build(args)


def fit_with_kolo(args):
    model = BlobClassifier(args)
    trainer = hvd.Trainer(max_epochs=args.epochs, checkpoint_dir=args.checkpoint_dir,
                          seed=args.seed)
    trainer.fit(model)
    # validate() returns the metrics averaged over the ranks (the same on every rank).
    return trainer.validate(model)[0]["val_acc"]


def fit_with_lightning(args):
    from kolo.torch import lightning as kolo_lightning
    if not kolo_lightning.LIGHTNING_AVAILABLE:
        raise SystemExit("--lightning: neither lightning nor pytorch_lightning is installed")
    if kolo_lightning.LIGHTNING_PACKAGE == "lightning":
        import lightning.pytorch as pl
    else:
        import pytorch_lightning as pl

    class LitBlobClassifier(BlobTask, pl.LightningModule):
        def __init__(self, args):
            super().__init__()
            self.build(args)

    trainer = pl.Trainer(strategy=kolo_lightning.KoloStrategy(), accelerator="cpu", devices=1,
                         max_epochs=args.epochs, logger=False,
                         enable_checkpointing=args.checkpoint_dir is not None,
                         default_root_dir=args.checkpoint_dir, enable_progress_bar=False)
    trainer.fit(LitBlobClassifier(args))
    return float(trainer.callback_metrics["val_acc"])


def main():
    args = parse_args()
    hvd.init()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # the ranks share this machine's cores
    accuracy = fit_with_lightning(args) if args.lightning else fit_with_kolo(args)
    if hvd.rank() == 0:
        print("validation accuracy %.4f (%d ranks)" % (accuracy, hvd.size()), flush=True)
    if accuracy < args.min_accuracy:
        print("rank %d: the model did not learn (accuracy %.4f < %.2f)"
              % (hvd.rank(), accuracy, args.min_accuracy), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
