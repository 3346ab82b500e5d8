# SPDX-License-Identifier: Apache-2.0
"""Data plumbing of kolo.torch.Trainer: sharding a DataLoader over the ranks, moving batches to
the model's device, and refusing (on every rank, with the counts) a job whose ranks would run
different numbers of batches -- that is the classic way a data-parallel job hangs.
"""

import inspect

import torch
from torch.utils.data import (BatchSampler, DataLoader, IterableDataset, RandomSampler,
                              SequentialSampler)
from torch.utils.data.distributed import DistributedSampler

from kolo.torch.mpi_ops import allreduce
from kolo.common import Max

# DataLoader settings carried over to the re-made loader, when this torch version has them.
_CARRIED = ("num_workers", "collate_fn", "pin_memory", "drop_last", "timeout", "worker_init_fn",
            "multiprocessing_context", "generator", "prefetch_factor", "persistent_workers",
            "pin_memory_device")
# Settings that DataLoader rejects unless num_workers > 0 (their defaults differ by version).
_WORKER_ONLY = ("prefetch_factor", "persistent_workers", "multiprocessing_context")


def _loader_parameters():
    try:
        return set(inspect.signature(DataLoader.__init__).parameters)
    except (TypeError, ValueError):  # pragma: no cover - C-implemented or odd signatures
        return set(_CARRIED) | {"batch_size", "sampler", "shuffle"}


def shard_loader(loader, rank, size, seed, what, shuffle=None, elastic=False):
    """Returns (loader, sampler): `loader` re-made over DistributedSampler(num_replicas=size,
    rank=rank, shuffle=<as the original loader>) with its batch size, collate_fn, workers etc.

    shuffle=False forces an ordered shard (validation: every sample once, in order). With
    elastic, the sampler is a kolo.torch.elastic.ElasticSampler(shuffle, seed) instead, which
    shards over the current rank and size at each reset.
    A loader that already uses a DistributedSampler (or, with elastic, an ElasticSampler) is
    returned as it is. `what` names the
    loader in errors ("train_dataloader"). Raises TypeError/ValueError for what cannot be
    sharded this way (not a DataLoader, an IterableDataset, a custom sampler or batch sampler);
    the message says how to opt out (use_distributed_sampler=False)."""
    hint = ("; shard it yourself and pass use_distributed_sampler=False to the Trainer (then "
            "every rank must yield the same number of batches)")
    if not isinstance(loader, DataLoader):
        raise TypeError("%s returned a %s, not a torch.utils.data.DataLoader%s"
                        % (what, type(loader).__name__, hint))
    from kolo.torch.elastic.sampler import ElasticSampler
    if isinstance(loader.sampler, DistributedSampler) or (
            elastic and isinstance(loader.sampler, ElasticSampler)):
        return loader, loader.sampler
    if isinstance(loader.dataset, IterableDataset):
        raise ValueError("%s wraps an IterableDataset, which DistributedSampler cannot shard%s"
                         % (what, hint))
    if loader.batch_sampler is not None and type(loader.batch_sampler) is not BatchSampler:
        raise ValueError("%s uses a custom batch_sampler (%s)%s"
                         % (what, type(loader.batch_sampler).__name__, hint))
    sampler = loader.sampler
    if type(sampler) is RandomSampler:
        if sampler.replacement or sampler._num_samples is not None:
            raise ValueError("%s samples with replacement or a num_samples; DistributedSampler "
                             "cannot reproduce that%s" % (what, hint))
        shuffled = True
    elif type(sampler) is SequentialSampler:
        shuffled = False
    else:
        raise ValueError("%s uses a custom sampler (%s)%s" % (what, type(sampler).__name__, hint))

    shuffle = shuffled if shuffle is None else bool(shuffle)
    if elastic:
        dist = ElasticSampler(loader.dataset, shuffle=shuffle, seed=seed)
    else:
        dist = DistributedSampler(loader.dataset, num_replicas=size, rank=rank, shuffle=shuffle,
                                  seed=seed, drop_last=False)
    accepted = _loader_parameters()
    kwargs = {"batch_size": loader.batch_size, "sampler": dist, "shuffle": False}
    for key in _CARRIED:
        if key not in accepted or not hasattr(loader, key):
            continue
        if key in _WORKER_ONLY and loader.num_workers == 0:
            continue
        kwargs[key] = getattr(loader, key)
    if loader.batch_size is None:  # no automatic batching: drop_last must stay at its default
        kwargs.pop("drop_last", None)
    return DataLoader(loader.dataset, **kwargs), dist


def num_batches(loader, limit):
    """How many batches this rank will run from `loader` (None when it has no length)."""
    try:
        n = len(loader)
    except TypeError:
        n = None
    if limit is not None:
        n = limit if n is None else min(n, limit)
    return n


def check_same_count(n, what, tag):
    """Raises ValueError on every rank when the ranks would run different numbers of batches.

    One allreduce (Max of [n, -n]); a rank whose count is unknown (None) takes no part in the
    comparison, so an iterable without a length is trusted."""
    known = n is not None
    value = torch.tensor([n if known else -1, -n if known else -(2 ** 62)], dtype=torch.int64)
    out = allreduce(value, name="kolo.trainer.batches.%s" % tag, op=Max)
    most, least = int(out[0]), -int(out[1])
    if most >= 0 and least != 2 ** 62 and most != least:
        raise ValueError("%s: the ranks would run different numbers of batches (from %d to %d) "
                         "and the job would hang in the gradient allreduce; with "
                         "use_distributed_sampler=False every rank must yield as many batches "
                         "(or set limit_%s_batches)" % (what, least, most, tag))


def to_device(batch, device):
    """`batch` with every tensor in it (nested in lists, tuples, dicts) moved to `device`."""
    if torch.is_tensor(batch):
        return batch.to(device)
    if isinstance(batch, dict):
        return type(batch)((k, to_device(v, device)) for k, v in batch.items())
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # namedtuple
        return type(batch)(*(to_device(v, device) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(v, device) for v in batch)
    return batch
