#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Per-step cost of kolo.torch.DistributedOptimizer against torch's DistributedDataParallel
(Gloo) and against no communication at all, in the same job on the same model.

    kolorun -np 2 /usr/bin/python3 bench/optimizer_bench.py [--layers 50 --width 64 ...]

The model is an MLP of --layers Linear layers (2 parameter tensors each: 100 tensors by
default), the case where per-tensor overheads (hooks, negotiation, fusion) show. Each rank
runs three identical copies of the model, one per mode, each with SGD:

  local   forward + backward + step, no communication (the floor);
  kolo    optimizer = kolo.torch.DistributedOptimizer(SGD) (allreduce from backward hooks);
  kolo_grouped  the same with groups=1: one grouped allreduce of all gradients per step
          (one Python call and one negotiation instead of one per tensor);
  ddp     torch.nn.parallel.DistributedDataParallel over torch.distributed's "gloo"
          process group (MASTER_ADDR/MASTER_PORT chosen on rank 0 and sent over kolo).

Modes alternate in rounds (--rounds x --steps steps each) so that a machine whose load
drifts hurts them alike. A round's time is the slowest rank's (the job waits for it). Printed
per mode: median and min over rounds of ms/step, and the overhead over `local` (median
difference). After the run the kolo and ddp parameters are checked to be identical on every
rank, so a mode that did not communicate cannot report a fast time. --csv appends the rows.
"""

import argparse
import os
import socket
import statistics
import sys
import time

import torch

try:
    import kolo.torch as hvd
except ImportError:  # a source checkout without `cmake --install`
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                                    "bindings", "python"))
    import kolo.torch as hvd


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=50, help="Linear layers (2 tensors each)")
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--batch", type=int, default=32, help="samples per rank per step")
    p.add_argument("--warmup", type=int, default=10, help="steps per mode before timing")
    p.add_argument("--steps", type=int, default=20, help="timed steps per mode per round")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank")
    p.add_argument("--csv", default=None, help="rank 0 appends one row per mode here")
    return p.parse_args()


def make_model(layers, width, seed=0):
    torch.manual_seed(seed)
    mods = []
    for _ in range(layers - 1):
        mods += [torch.nn.Linear(width, width), torch.nn.Tanh()]
    mods.append(torch.nn.Linear(width, width))
    return torch.nn.Sequential(*mods)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def init_gloo():
    """torch.distributed over Gloo with kolo's rank and size; rank 0 picks the address."""
    import torch.distributed as dist
    if hvd.local_size() == hvd.size():
        addr = "127.0.0.1"
    else:
        addr = socket.gethostbyname(socket.gethostname())
    addr, port = hvd.broadcast_object((addr, free_port()) if hvd.rank() == 0 else None, 0,
                                      name="bench.master")
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = addr, str(port)
    dist.init_process_group("gloo", rank=hvd.rank(), world_size=hvd.size())
    return dist


class Mode:
    def __init__(self, name, model, optimizer, forward):
        self.name, self.model, self.optimizer, self.forward = name, model, optimizer, forward
        self.rounds = []  # ms/step of the slowest rank, per round

    def run(self, x, y, steps):
        for _ in range(steps):
            self.optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(self.forward(x), y)
            loss.backward()
            self.optimizer.step()


def main():
    args = parse_args()
    hvd.init()
    torch.set_num_threads(args.threads)
    dist = init_gloo()
    n_tensors = 2 * args.layers
    g = torch.Generator().manual_seed(1 + hvd.rank())  # each rank its own data
    x = torch.randn(args.batch, args.width, generator=g)
    y = torch.randn(args.batch, args.width, generator=g)

    local_model = make_model(args.layers, args.width)
    local = Mode("local", local_model, torch.optim.SGD(local_model.parameters(), lr=1e-3),
                 local_model)

    kolo_model = make_model(args.layers, args.width)
    kolo_opt = hvd.DistributedOptimizer(torch.optim.SGD(kolo_model.parameters(), lr=1e-3),
                                        named_parameters=kolo_model.named_parameters())
    hvd.broadcast_parameters(kolo_model.state_dict(), root_rank=0)
    kolo = Mode("kolo", kolo_model, kolo_opt, kolo_model)

    grouped_model = make_model(args.layers, args.width)
    grouped_opt = hvd.DistributedOptimizer(
        torch.optim.SGD(grouped_model.parameters(), lr=1e-3),
        named_parameters=grouped_model.named_parameters(), groups=1)
    hvd.broadcast_parameters(grouped_model.state_dict(), root_rank=0)
    grouped = Mode("kolo_grouped", grouped_model, grouped_opt, grouped_model)

    ddp_model = make_model(args.layers, args.width)
    ddp_wrapped = torch.nn.parallel.DistributedDataParallel(ddp_model)
    ddp = Mode("ddp_gloo", ddp_model, torch.optim.SGD(ddp_model.parameters(), lr=1e-3),
               ddp_wrapped)
    modes = [local, kolo, grouped, ddp]

    for m in modes:
        m.run(x, y, args.warmup)
    hvd.barrier()
    for r in range(args.rounds):
        order = modes[r % len(modes):] + modes[:r % len(modes)]  # rotate who goes first
        for m in order:
            hvd.barrier()
            t0 = time.perf_counter()
            m.run(x, y, args.steps)
            ms = (time.perf_counter() - t0) * 1e3 / args.steps
            slowest = hvd.allreduce(torch.tensor([ms], dtype=torch.float64), op=hvd.Max,
                                    name="bench.time.%s" % m.name)
            m.rounds.append(slowest.item())

    # Both communicating modes must have kept the ranks' parameters identical.
    for m in (kolo, grouped, ddp):
        for i, p in enumerate(m.model.parameters()):
            root = hvd.broadcast(p.detach().clone(), 0, name="bench.check.%s.%d" % (m.name, i))
            if not torch.equal(root, p.detach()):
                raise SystemExit("%s: parameter %d differs between ranks" % (m.name, i))
    dist.destroy_process_group()

    if hvd.rank() == 0:
        base = statistics.median(local.rounds)
        n_params = sum(p.numel() for p in local_model.parameters())
        print("optimizer_bench: %d ranks, %d parameter tensors (%d values, %.2f MB fp32), "
              "batch %d/rank, %d rounds x %d steps, %s transport"
              % (hvd.size(), n_tensors, n_params, n_params * 4 / 1e6, args.batch, args.rounds,
                 args.steps, _transport()))
        print("%-13s %10s %10s %12s %9s" % ("mode", "median ms", "min ms", "overhead ms",
                                             "overhead"))
        rows = []
        for m in modes:
            med, best = statistics.median(m.rounds), min(m.rounds)
            over = med - base
            print("%-13s %10.3f %10.3f %12.3f %8.1f%%" % (m.name, med, best, over,
                                                         100.0 * over / base))
            rows.append((m.name, hvd.size(), n_tensors, n_params, args.batch, med, best, over))
        if args.csv:
            new = not os.path.exists(args.csv)
            with open(args.csv, "a") as f:
                if new:
                    f.write("mode,ranks,tensors,values,batch,median_ms,min_ms,overhead_ms\n")
                for row in rows:
                    f.write("%s,%d,%d,%d,%d,%.4f,%.4f,%.4f\n" % row)
    return 0


def _transport():
    try:
        import kolo
        return kolo.transport_name()
    except Exception:  # informational only
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
