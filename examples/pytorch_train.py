#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Data-parallel training with kolo, Horovod style: the script is a horovod.torch script with
one changed import. It trains a small MLP to classify synthetic Gaussian blobs (no download)
and exits non-zero if the model did not learn.

    python3 examples/pytorch_train.py                     # one process
    kolorun -np 2 python3 examples/pytorch_train.py       # two ranks, same script

Every rank builds the same dataset from the same seed; DistributedSampler gives each rank its
share; DistributedOptimizer averages the gradients; rank 0 prints and saves.
"""

import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

try:
    import kolo.torch as hvd  # was: import horovod.torch as hvd
except ImportError:  # running from a source checkout without `cmake --install`
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                                    "bindings", "python"))
    import kolo.torch as hvd


def make_blobs(n, classes, features, seed):
    """n points around `classes` random centers; the label is the center's index."""
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(classes, features, generator=g)
    labels = torch.randint(0, classes, (n,), generator=g)
    points = centers[labels] + torch.randn(n, features, generator=g)
    return points, labels


def build_model(features, classes):
    return torch.nn.Sequential(torch.nn.Linear(features, 64), torch.nn.ReLU(),
                               torch.nn.Linear(64, 64), torch.nn.ReLU(),
                               torch.nn.Linear(64, classes))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--lr", type=float, default=0.02, help="per rank; scaled by the rank count")
    p.add_argument("--samples", type=int, default=4096)
    p.add_argument("--classes", type=int, default=4)
    p.add_argument("--features", type=int, default=16)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--min-accuracy", type=float, default=0.9,
                   help="exit with status 1 below this test accuracy")
    p.add_argument("--checkpoint", default=None, help="rank 0 saves the model here")
    return p.parse_args()


def main():
    args = parse_args()
    hvd.init()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # the ranks share this machine's cores

    x, y = make_blobs(args.samples, args.classes, args.features, args.seed)
    split = args.samples * 3 // 4
    train_set = TensorDataset(x[:split], y[:split])
    test_set = TensorDataset(x[split:], y[split:])
    # Partition the dataset among the ranks.
    train_sampler = DistributedSampler(train_set, num_replicas=hvd.size(), rank=hvd.rank(),
                                       shuffle=True, seed=args.seed)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, sampler=train_sampler)
    test_sampler = DistributedSampler(test_set, num_replicas=hvd.size(), rank=hvd.rank(),
                                      shuffle=False)
    test_loader = DataLoader(test_set, batch_size=256, sampler=test_sampler)

    model = build_model(args.features, args.classes)
    # Scale the learning rate by the number of ranks (the global batch grew as much).
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    # Start every rank from rank 0's weights and optimizer state.
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    started = time.monotonic()
    for epoch in range(args.epochs):
        model.train()
        train_sampler.set_epoch(epoch)  # a different shuffle every epoch, the same on all ranks
        total, batches = 0.0, 0
        for data, target in train_loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(data), target)
            loss.backward()
            optimizer.step()
            total += loss.item()
            batches += 1
        # The mean over the ranks of each rank's mean loss.
        epoch_loss = hvd.allreduce(torch.tensor(total / max(batches, 1)), name="epoch_loss")
        if hvd.rank() == 0:
            print("epoch %d/%d  loss %.4f" % (epoch + 1, args.epochs, epoch_loss.item()),
                  flush=True)

    model.eval()
    correct = torch.zeros(2, dtype=torch.float64)  # [correct, seen] on this rank
    with torch.no_grad():
        for data, target in test_loader:
            correct[0] += (model(data).argmax(dim=1) == target).sum().item()
            correct[1] += len(target)
    correct = hvd.allreduce(correct, name="test_accuracy", op=hvd.Sum)
    accuracy = (correct[0] / correct[1]).item()
    if hvd.rank() == 0:
        print("test accuracy %.4f on %d samples (%d ranks, %.1fs)"
              % (accuracy, int(correct[1]), hvd.size(), time.monotonic() - started), flush=True)
        if args.checkpoint:
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()},
                       args.checkpoint)
    if accuracy < args.min_accuracy:
        print("rank %d: the model did not learn (accuracy %.4f < %.2f)"
              % (hvd.rank(), accuracy, args.min_accuracy), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
