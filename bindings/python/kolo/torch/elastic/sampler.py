# SPDX-License-Identifier: Apache-2.0
"""ElasticSampler (horovod.torch.elastic.ElasticSampler): shards a dataset over the current
world and resumes an epoch where the committed state left it.

The sampler keeps the epoch and the indices this rank processed in it (record_batch /
record_indices); TorchState's commit saves those of every rank together (state.py). At every
reset (load_state_dict, as TorchState's restore and sync do) it re-shards the indices not yet
processed over the new size: the same permutation on every rank (seeded by seed + epoch),
padded to a multiple of the size, rank r taking every size-th index from r. Not thread-safe.
"""

import math

import torch
import torch.utils.data

from kolo.basics import is_initialized, rank, size


class ElasticSampler(torch.utils.data.Sampler):
    """Shards a dataset over the current ranks and resumes an epoch where the last commit was.

    A drop-in for horovod.torch.elastic.ElasticSampler. Put it in a TorchState, and record
    each batch with record_batch(). At each reset the indices not processed yet in the epoch
    are sharded again over the new size. Every rank draws the same permutation, seeded with
    seed + epoch. The list is padded to a multiple of the size, and rank r takes every
    size-th index from r.

    Args:
        dataset (torch.utils.data.Dataset): a dataset with len().
        shuffle (bool): whether to permute the indices each epoch.
        seed (int): the seed of the permutation, the same on every rank.
    """
    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_indices = set()
        self.num_replicas = 1
        self.rank = 0
        self.remaining_indices = []
        self.indices = []
        self.num_samples = 0
        self.total_size = 0
        self.reset()

    def set_epoch(self, epoch):
        """Starts epoch `epoch` (nothing of it processed yet)."""
        self.epoch = epoch
        self.processed_indices = set()
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Marks this rank's batch number batch_idx (of batch_size samples) as processed."""
        self.record_indices(self.get_indices(batch_idx, batch_size))

    def record_indices(self, indices):
        """Marks dataset indices as processed by this rank.

        Args:
            indices (list): dataset indices.
        """
        self.processed_indices.update(indices)

    def get_indices(self, batch_idx, batch_size):
        """Returns the dataset indices of this rank's batch number batch_idx.

        Args:
            batch_idx (int): the batch number in this rank's shard.
            batch_size (int): the samples per batch; the last batch may be shorter.

        Returns:
            indices (list): the dataset indices of the batch.
        """
        start = batch_idx * batch_size
        return self.indices[start:min(start + batch_size, len(self.indices))]

    def load_state_dict(self, state_dict):
        """Sets the epoch and the processed indices, then re-shards (reset()).

        Args:
            state_dict (dict): a dict that state_dict() returned.
        """
        self.epoch = state_dict["epoch"]
        self.processed_indices = set(state_dict["processed_indices"])
        self.reset()

    def state_dict(self):
        """Returns the epoch and a copy of the processed indices.

        Returns:
            state (dict): {"epoch": int, "processed_indices": set}.
        """
        return {"epoch": self.epoch, "processed_indices": set(self.processed_indices)}

    def reset(self):
        """Re-shards the epoch's unprocessed indices over the current rank and size."""
        self.num_replicas = size() if is_initialized() else 1
        self.rank = rank() if is_initialized() else 0
        remaining = [i for i in range(len(self.dataset)) if i not in self.processed_indices]
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)
            order = torch.randperm(len(remaining), generator=g).tolist()
            remaining = [remaining[i] for i in order]
        self.num_samples = int(math.ceil(len(remaining) / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas
        if remaining:
            while len(remaining) < self.total_size:
                remaining += remaining[:self.total_size - len(remaining)]
        self.remaining_indices = remaining
        self.indices = remaining[self.rank:self.total_size:self.num_replicas]

    def __iter__(self):
        return iter(self.indices)

    def __len__(self):
        return self.num_samples
