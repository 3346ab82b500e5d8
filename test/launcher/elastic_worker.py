# SPDX-License-Identifier: Apache-2.0
"""A worker for the elastic tests (test_elastic*.py): trains a small linear regression with
kolo.torch.elastic (TorchState, ElasticSampler, DistributedOptimizer) under kolorun's elastic
mode, and prints one "RESULT {json}" line at the end: rank, size, round, worker id, the final
parameters (exact floats), the loss over the whole dataset before and after, the sizes seen.

Faults, for the tests (each a worker killing itself with SIGKILL, so kolorun sees a real death):
  --die ROUND:RANK:STEP      the rank RANK of round ROUND dies before global step STEP
  --die-in-sync ROUND:RANK   the rank RANK of round ROUND dies inside State.sync (after the
                             model's broadcast, before the optimizer's)
  --die-new-in-sync R        every worker joining at round >= R as a new worker dies in sync
  --stop ROUND:RANK:STEP     the rank RANK of round ROUND freezes (SIGSTOP to itself) before
                             global step STEP, after writing its pid to --pid-file
  --mismatch-at STEP         every rank, in every round, allreduces a tensor whose shape
                             depends on its rank before global step STEP (a bug in the
                             training code: the same error after every reset)
--linger S waits S seconds after the training (past the last commit) before the RESULT line.
And --hold-replacements N keeps the workers kolorun starts after the first round out of the job.
"""

import argparse
import json
import os
import signal
import sys
import time

import torch

import elastic_hold

import kolo.torch as hvd

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--samples", type=int, default=192)
p.add_argument("--batch", type=int, default=8)
p.add_argument("--commit-every", type=int, default=2)
p.add_argument("--step-sleep", type=float, default=0.0)
p.add_argument("--die", action="append", default=[])
p.add_argument("--die-in-sync", action="append", default=[])
p.add_argument("--stop", action="append", default=[])
p.add_argument("--pid-file", default="")
p.add_argument("--mismatch-at", type=int, default=-1)
p.add_argument("--die-new-in-sync", type=int, default=-1)
p.add_argument("--until-sizes", default="",
               help="train past --epochs (at most 40 more) until the sizes seen begin with "
                    "this list, e.g. 2,3: the test changes the hosts while the job trains")
p.add_argument("--die-after-join", default="",
               help="ROUND:RANK: that rank of that round dies after joining it, before its "
                    "init: the others wait in the round's rendezvous for a rank that never comes")
p.add_argument("--linger", type=float, default=0.0,
               help="seconds to wait after training, before RESULT (as a rank 0 writing the "
                    "final checkpoint): prints LINGER first")
elastic_hold.add_argument(p)
args = p.parse_args()

if args.die_after_join:
    from kolo.elastic import _worker
    _join = _worker.join
    _die_round, _die_rank = (int(x) for x in args.die_after_join.split(":"))

    def join(min_round):
        n, place = _join(min_round)
        if n == _die_round and place["rank"] == _die_rank:
            print("worker %s dies after joining round %d as rank %d" % (
                os.environ.get("KOLO_ELASTIC_WORKER_ID"), n, _die_rank), flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        return n, place

    _worker.join = join

elastic_hold.hold(args)
hvd.init()
WID = os.environ.get("KOLO_ELASTIC_WORKER_ID", "?")
FIRST_ROUND = hvd.elastic.current_round()


def die_now(why):
    print("worker %s dies: %s" % (WID, why), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def faults(kind):
    out = []
    for spec in getattr(args, kind):
        out.append(tuple(int(x) for x in spec.split(":")))
    return out


torch.manual_seed(1234)  # the same data and initial model everywhere
X = torch.randn(args.samples, 8)
W_TRUE = torch.randn(8, 1)
Y = X @ W_TRUE + 0.5
dataset = torch.utils.data.TensorDataset(X, Y)
model = torch.nn.Linear(8, 1)
torch.manual_seed(100 + hvd.rank())  # different on purpose: sync must make them equal
with torch.no_grad():
    for prm in model.parameters():
        prm.add_(torch.randn_like(prm))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.5)
opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=7)


def full_loss():
    with torch.no_grad():
        return float(torch.nn.functional.mse_loss(model(X), Y))


class State(hvd.elastic.TorchState):
    def sync(self):
        r = hvd.elastic.current_round()
        self._handlers["model"].sync()
        for rnd, rank in faults("die_in_sync"):
            if r == rnd and hvd.rank() == rank:
                die_now("in sync of round %d as rank %d" % (r, rank))
        if 0 <= args.die_new_in_sync <= r and FIRST_ROUND == r and r > 0:
            die_now("new worker in sync of round %d" % r)
        super().sync()


state = State(model=model, optimizer=opt, sampler=sampler, epoch=0, batch=0, step=0,
              loss0=full_loss(), sizes=[], coverage_gaps=0, trained=[])


def on_reset():
    print("worker %s: reset: round %d, rank %d of %d" % (
        WID, hvd.elastic.current_round(), hvd.rank(), hvd.size()), flush=True)


state.register_reset_callbacks([on_reset])


@hvd.elastic.run
def train(state):
    if not state.sizes or state.sizes[-1] != hvd.size():
        state.sizes.append(hvd.size())
    want = [int(x) for x in args.until_sizes.split(",")] if args.until_sizes else []

    def more():
        if state.epoch < args.epochs:
            return True
        return state.epoch < args.epochs + 40 and state.sizes[:len(want)] != want

    while more():
        batches = (len(state.sampler) + args.batch - 1) // args.batch
        # After every sync the sampler holds only the rest of the epoch, re-sharded over the
        # current size: each (re)entry starts at its batch 0.
        for b in range(batches):
            for rnd, rank, step in faults("die"):
                if (hvd.elastic.current_round() == rnd and hvd.rank() == rank
                        and state.step == step):
                    die_now("round %d rank %d step %d" % (rnd, rank, step))
            for rnd, rank, step in faults("stop"):
                if (hvd.elastic.current_round() == rnd and hvd.rank() == rank
                        and state.step == step):
                    if args.pid_file:
                        with open(args.pid_file, "w") as f:
                            f.write("%d\n" % os.getpid())
                    print("worker %s stops itself (SIGSTOP, pid %d): round %d rank %d step %d"
                          % (WID, os.getpid(), rnd, rank, step), flush=True)
                    os.kill(os.getpid(), signal.SIGSTOP)
            if state.step == args.mismatch_at:
                hvd.allreduce(torch.zeros(3 + hvd.rank()), name="shape_by_rank")
            idx = state.sampler.get_indices(b, args.batch)
            xb, yb = X[idx], Y[idx]
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            loss.backward()
            opt.step()
            # the ids every rank trained, committed and rolled back with the model
            state.trained += hvd.allgather(torch.as_tensor(idx, dtype=torch.int64),
                                           name="trained_ids").tolist()
            state.sampler.record_batch(b, args.batch)
            state.step += 1
            state.batch = b + 1
            if args.step_sleep:
                time.sleep(args.step_sleep)
            if state.step % args.commit_every == 0:
                if hvd.rank() == 0:
                    print("PROGRESS round %d size %d step %d" % (
                        hvd.elastic.current_round(), hvd.size(), state.step), flush=True)
                state.commit()
        # Every sample of the epoch was trained by some rank despite the resets.
        done = set(state.trained)
        if done != set(range(args.samples)):
            state.coverage_gaps += 1
            print("epoch %d: %d samples never processed" % (
                state.epoch, args.samples - len(done)), flush=True)
        state.epoch += 1
        state.batch = 0
        state.trained = []
        state.sampler.set_epoch(state.epoch)
        state.commit()
    return full_loss()


loss = train(state)
if args.linger:
    print("LINGER round %d rank %d" % (hvd.elastic.current_round(), hvd.rank()), flush=True)
    time.sleep(args.linger)
params = [float(v) for prm in model.parameters() for v in prm.detach().flatten()]
print("RESULT " + json.dumps({
    "rank": hvd.rank(), "size": hvd.size(), "round": hvd.elastic.current_round(),
    "wid": WID, "params": params, "loss0": state.loss0, "loss": loss,
    "steps": state.step, "sizes": state.sizes, "coverage_gaps": state.coverage_gaps}),
    flush=True)
hvd.shutdown()
