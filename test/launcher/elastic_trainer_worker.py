# SPDX-License-Identifier: Apache-2.0
"""kolo.torch.Trainer(elastic=True) under kolorun's elastic mode (test_elastic.py): a linear
regression module over 252 samples in batches of 6 (so no shard of 2 or 3 ranks is ever
padded). Rank 0 of round 0 prints "GROW" at step --grow-step, for the test to add a host slot;
round 0 then slows down until that new worker joins. Rank --die-rank of round --die-round
SIGKILLs itself 4 steps into that round. Each step allgathers the sample ids every rank trains
and counts them in a buffer of the module (`seen`, one row per epoch), so a commit keeps them
and a rollback forgets them with the model. Prints "RESULT {json}" (rank, size, round, final
parameters, loss before/after, global step, epochs in the history, and the count of each sample
in each epoch) on every rank of the last round."""

import argparse
import json
import os
import signal
import time

import torch

import elastic_hold

import kolo.torch as hvd

p = argparse.ArgumentParser()
p.add_argument("--die-rank", type=int, default=-1)
p.add_argument("--die-round", type=int, default=0)
p.add_argument("--die-step", type=int, default=-1,
               help="with --die-round 0: the global step; later: steps into the round")
p.add_argument("--grow-step", type=int, default=-1)
p.add_argument("--epochs", type=int, default=4)
elastic_hold.add_argument(p)
args = p.parse_args()

N, BS = 252, 6
torch.manual_seed(5)
X = torch.randn(N, 4)
Y = X @ torch.randn(4, 1) - 1.0
IDS = torch.arange(N)


class Module(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
        self.register_buffer("seen", torch.zeros(args.epochs, N, dtype=torch.int64))
        self.round_start = {}

    def training_step(self, batch, batch_idx):
        trainer = self.trainer
        rnd, step = hvd.elastic.current_round(), trainer.global_step
        start = self.round_start.setdefault(rnd, step)
        die_at = args.die_step if args.die_round == 0 else start + args.die_step
        if rnd == args.die_round and hvd.rank() == args.die_rank and step == die_at:
            print("rank %d dies at step %d of round %d" % (hvd.rank(), step, rnd), flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        if rnd == 0 and hvd.rank() == 0 and step == args.grow_step:
            print("GROW at step %d" % step, flush=True)
        if rnd == 0 and args.grow_step >= 0 and step >= args.grow_step:
            time.sleep(0.2)  # round 0 lasts until the new worker joins
        elif args.grow_step >= 0:
            time.sleep(0.05)
        x, y, ids = batch
        # every rank's ids, counted on every rank: the buffer is the same everywhere
        every = hvd.allgather(ids, name="trained_ids")
        self.seen[trainer.current_epoch].index_add_(0, every, torch.ones_like(every))
        loss = torch.nn.functional.mse_loss(self.lin(x), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)

    def train_dataloader(self):
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, Y, IDS),
                                           batch_size=BS, shuffle=True)


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
    "params": [float(v) for prm in module.lin.parameters() for v in prm.detach().flatten()],
    "loss0": loss0, "loss": loss, "steps": trainer.global_step,
    "epochs": [h["epoch"] for h in trainer.metrics_history],
    "seen": module.seen.tolist()}), flush=True)
