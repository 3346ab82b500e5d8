# SPDX-License-Identifier: Apache-2.0
"""A Horovod 0.28 elastic training script (test_horovod_elastic_script.py): it uses only
Horovod's public API (hvd.init, hvd.elastic.ElasticSampler, hvd.elastic.TorchState,
@hvd.elastic.run, state.commit(), state.check_host_updates(), sampler.record_batch,
sampler.set_epoch, hvd.DistributedOptimizer, hvd.broadcast_parameters, hvd.allgather) and a
torch DataLoader over the sampler. The one line that differs from a Horovod script is the
import: `import kolo.torch as hvd` for `import horovod.torch as hvd`.

252 synthetic samples, batches of 6 per rank, a commit every --commit-every batches and at the
end of each epoch. Every rank trains 6 samples a step, so each commit leaves a multiple of 6
samples of the epoch, which 2 and 3 ranks share evenly: ElasticSampler pads nothing when it
re-shards them, and any sample trained twice was trained again. Each step allgathers the sample
ids of every rank and adds them to `state.counts`, a tensor in the state: a commit keeps them, a
rollback drops them. The counts are replaced, never changed in place, because Horovod's
ObjectState saves a reference, not a copy. At the end of each epoch rank 0 prints
"EPOCH {json}" with that epoch's counts; at the end it prints "DONE {json}" with the sizes of the
worlds this process trained in, one per call of the training function.

Test plumbing, through flags only (the worker id is KOLO_ELASTIC_WORKER_ID, which kolorun sets
in each elastic worker; no kolo call):
  --die-worker W --die-at-step N [--die-size S]   worker W SIGKILLs itself before its N-th step
                                                  (from 1) in a world of S ranks (any size: 0)
  --hold-workers-from W   a worker with id >= W (a replacement) sleeps 60 s before hvd.init, so
                          it joins no round of a job that ends sooner
Rank 0 prints "PROGRESS step S size Z" after each step, for the test to change the hosts.
"""

import argparse
import json
import os
import signal
import time

import torch
import torch.utils.data

import kolo.torch as hvd

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=4)
p.add_argument("--batch-size", type=int, default=6)
p.add_argument("--commit-every", type=int, default=2)
p.add_argument("--lr", type=float, default=0.02)
p.add_argument("--step-sleep", type=float, default=0.0)
p.add_argument("--die-worker", type=int, default=-1)
p.add_argument("--die-at-step", type=int, default=-1)
p.add_argument("--die-size", type=int, default=0)
p.add_argument("--hold-workers-from", type=int, default=-1)
args = p.parse_args()

WORKER = int(os.environ.get("KOLO_ELASTIC_WORKER_ID", "-1"))
if 0 <= args.hold_workers_from <= WORKER:
    time.sleep(60)

N = 252
hvd.init()
torch.manual_seed(7)
torch.set_num_threads(1)

X = torch.randn(N, 4)
Y = X @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.25
IDS = torch.arange(N)
dataset = torch.utils.data.TensorDataset(X, Y, IDS)
sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=11)
loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)

model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size())
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())


def on_state_reset():
    for group in optimizer.param_groups:
        group["lr"] = args.lr * hvd.size()


state = hvd.elastic.TorchState(model=model, optimizer=optimizer, sampler=sampler, epoch=0,
                               step=0, counts=torch.zeros(N, dtype=torch.int64))
state.register_reset_callbacks([on_state_reset])

sizes = []  # the size of each world this process trained in
steps_at_size = {}


@hvd.elastic.run
def train(state):
    sizes.append(hvd.size())
    # state.sync() already gave every rank rank 0's model; a Horovod script may do it again
    hvd.broadcast_parameters(state.model.state_dict(), root_rank=0)
    while state.epoch < args.epochs:
        # Nothing is uncommitted here: a change of the hosts is taken before the epoch goes on.
        state.check_host_updates()
        for batch_idx, (x, y, ids) in enumerate(loader):
            n = steps_at_size[hvd.size()] = steps_at_size.get(hvd.size(), 0) + 1
            if WORKER == args.die_worker and args.die_size in (0, hvd.size()) and \
                    n == args.die_at_step:
                print("worker %d kills itself at its step %d at size %d (rank %d)" % (
                    WORKER, n, hvd.size(), hvd.rank()), flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            state.optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(state.model(x), y)
            loss.backward()
            state.optimizer.step()
            every = hvd.allgather(ids, name="sample_ids")
            state.counts = state.counts + torch.bincount(every, minlength=N)
            state.sampler.record_batch(batch_idx, args.batch_size)
            state.step += 1
            if hvd.rank() == 0:
                print("PROGRESS step %d size %d" % (state.step, hvd.size()), flush=True)
            if args.step_sleep:
                time.sleep(args.step_sleep)
            if state.step % args.commit_every == 0:
                state.commit()
        if hvd.rank() == 0:
            print("EPOCH " + json.dumps({"epoch": state.epoch, "size": hvd.size(),
                                         "counts": state.counts.tolist()}), flush=True)
        state.counts = torch.zeros(N, dtype=torch.int64)
        state.epoch += 1
        state.sampler.set_epoch(state.epoch)
        state.commit()


train(state)
with torch.no_grad():
    final_loss = float(torch.nn.functional.mse_loss(model(X), Y))
if hvd.rank() == 0:
    print("DONE " + json.dumps({"sizes": sizes, "size": hvd.size(), "steps": state.step,
                                "loss": final_loss}), flush=True)
