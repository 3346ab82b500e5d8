#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
r"""Elastic training with kolo, Horovod style (horovod.torch.elastic with one changed import):
workers may die, be added or be removed while the job trains; after a death the survivors roll
back to the last commit, take new ranks, receive the state from the new rank 0 and go on; added
and removed workers are taken in or let go at the next commit, without a rollback. It trains a
small MLP on synthetic Gaussian blobs (no download) and exits non-zero if the model did not
learn.

Run it on this machine with a discovery script whose host list you change while it trains:

    printf '#!/bin/sh\ncat /tmp/kolo_hosts\n' > /tmp/discover.sh; chmod +x /tmp/discover.sh
    echo localhost:2 > /tmp/kolo_hosts
    kolorun -np 2 --min-np 1 --max-np 4 --host-discovery-script /tmp/discover.sh \
        python3 examples/elastic_train.py --epochs 30
    # meanwhile, in another shell:
    echo localhost:4 > /tmp/kolo_hosts     # two more workers join at the next commit
    echo localhost:1 > /tmp/kolo_hosts     # three leave at the next commit; one goes on
    pkill -9 -f elastic_train.py -n        # or kill one: the others restore and go on

--kill-rank R --kill-step N makes rank R of the first round SIGKILL itself at step N (a demo of
a lost worker without a second shell); --log-steps prints a timestamped line per step on rank 0
(bench/elastic_bench.py measures recovery and scale-up times from them).

docs/elastic.md explains the rest: the elastic API, kolorun's elastic flags, and what happens
when workers die, join or leave.
"""

import argparse
import os
import signal
import sys
import time

START = time.time()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

try:
    import kolo.torch as hvd  # was: import horovod.torch as hvd
except ImportError:  # running from a source checkout without `cmake --install`
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                                    "bindings", "python"))
    import kolo.torch as hvd

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=10)
p.add_argument("--batch-size", type=int, default=32)
p.add_argument("--lr", type=float, default=0.05)
p.add_argument("--commit-every", type=int, default=5, help="batches between commits")
p.add_argument("--step-sleep", type=float, default=0.0, help="seconds; slows a step down")
p.add_argument("--kill-rank", type=int, default=-1)
p.add_argument("--kill-step", type=int, default=-1)
p.add_argument("--log-steps", action="store_true")
args = p.parse_args()

hvd.init()
print("worker %s started %.3f, first round at %.3f" % (
    os.environ.get("KOLO_ELASTIC_WORKER_ID", "-"), START, time.time()), flush=True)

# The same data everywhere: four Gaussian blobs in 16 dimensions.
g = torch.Generator().manual_seed(0)
centers = torch.randn(4, 16, generator=g) * 3
labels = torch.randint(0, 4, (2048,), generator=g)
features = centers[labels] + torch.randn(2048, 16, generator=g)
dataset = torch.utils.data.TensorDataset(features, labels)

model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=1)
loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)
state = hvd.elastic.TorchState(model=model, optimizer=optimizer, sampler=sampler, epoch=0,
                               step=0)


# Only Horovod 0.28's API from here on, so that the script runs under Horovod too. The resets
# this process saw stand in for kolo's round number (hvd.elastic.current_round()).
resets = 0
first_worker = None  # whether this process started with the job (not added later)


def on_reset():
    # The world changed: scale the learning rate to the new size (Horovod's recipe).
    global resets
    resets += 1
    for group in optimizer.param_groups:
        group["lr"] = args.lr * hvd.size()
    if hvd.rank() == 0:
        print("reset: now %d workers (round %d) at %.3f" % (
            hvd.size(), resets, time.time()), flush=True)


state.register_reset_callbacks([on_reset])


def accuracy():
    with torch.no_grad():
        return float((model(features).argmax(1) == labels).float().mean())


@hvd.elastic.run
def train(state):
    global first_worker
    if first_worker is None:
        first_worker = state.epoch == 0 and state.step == 0
    while state.epoch < args.epochs:
        # After every reset the sampler holds only the rest of the epoch (re-sharded over the
        # current size), so each (re)entry iterates the loader from its start.
        for b, (x, y) in enumerate(loader):
            if (hvd.rank() == args.kill_rank and state.step == args.kill_step
                    and first_worker and resets == 0):
                print("rank %d kills itself at step %d at %.3f" % (
                    hvd.rank(), state.step, time.time()), flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            state.sampler.record_batch(b, args.batch_size)
            state.step += 1
            if args.log_steps and hvd.rank() == 0:
                print("STEP %.3f round %d size %d step %d" % (
                    time.time(), resets, hvd.size(), state.step),
                    flush=True)
            if args.step_sleep:
                time.sleep(args.step_sleep)
            if state.step % args.commit_every == 0:
                state.commit()
        state.epoch += 1
        state.sampler.set_epoch(state.epoch)
        state.commit()
        if hvd.rank() == 0:
            print("epoch %d done on %d workers: accuracy %.3f" % (
                state.epoch, hvd.size(), accuracy()), flush=True)


train(state)
acc = accuracy()
if hvd.rank() == 0:
    print("final accuracy %.3f after %d steps" % (acc, state.step), flush=True)
hvd.shutdown()
sys.exit(0 if acc > 0.9 else 1)
