# SPDX-License-Identifier: Apache-2.0
"""kolo.torch.Trainer(elastic=True) under kolorun's elastic mode (test_elastic.py): a linear
regression module; rank --die-rank of the first round SIGKILLs itself at optimizer step
--die-step. Prints "RESULT {json}" (rank, size, round, final parameters, loss before/after,
global step, epochs in the history) on every rank of the last round."""

import argparse
import json
import os
import signal

import torch

import elastic_hold

import kolo.torch as hvd

p = argparse.ArgumentParser()
p.add_argument("--die-rank", type=int, default=-1)
p.add_argument("--die-step", type=int, default=-1)
p.add_argument("--epochs", type=int, default=4)
elastic_hold.add_argument(p)
args = p.parse_args()

torch.manual_seed(5)
X = torch.randn(256, 4)
Y = X @ torch.randn(4, 1) - 1.0


class Module(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        trainer = self.trainer
        if (hvd.elastic.current_round() == 0 and hvd.rank() == args.die_rank
                and trainer.global_step == args.die_step):
            print("rank %d dies at step %d" % (hvd.rank(), trainer.global_step), flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.lin(x), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)

    def train_dataloader(self):
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, Y), batch_size=8,
                                           shuffle=True)


elastic_hold.hold(args)
module = Module()
with torch.no_grad():
    loss0 = float(torch.nn.functional.mse_loss(module.lin(X), Y))
trainer = hvd.Trainer(max_epochs=args.epochs, elastic=True, elastic_commit_every_n_steps=3,
                      verbose=False)
trainer.fit(module)
with torch.no_grad():
    loss = float(torch.nn.functional.mse_loss(module.lin(X), Y))
print("RESULT " + json.dumps({
    "rank": hvd.rank(), "size": hvd.size(), "round": hvd.elastic.current_round(),
    "params": [float(v) for prm in module.parameters() for v in prm.detach().flatten()],
    "loss0": loss0, "loss": loss, "steps": trainer.global_step,
    "epochs": [h["epoch"] for h in trainer.metrics_history], "coverage_gaps": 0}), flush=True)
