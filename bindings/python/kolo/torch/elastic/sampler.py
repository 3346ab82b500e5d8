# SPDX-License-Identifier: Apache-2.0
"""ElasticSampler (horovod.torch.elastic.ElasticSampler, Horovod 0.23 to 0.28): shards a dataset
over the current world and resumes an epoch where the committed state left it.

The sampler keeps the epoch and processed_num, the number of samples of the epoch that the
whole job processed (record_batch adds batch_size * num_replicas). The epoch's order is the same
on every rank: list(range(len(dataset))) shuffled in place by random.Random(seed + epoch), as
Horovod's. At every reset (load_state_dict, set_epoch, and TorchState's restore, sync and
on_reset) the samples of that order from position processed_num on are sharded over the current
size: padded to a multiple of the size, rank r taking every size-th index from r. The first
processed_num samples of the order are thus those that full batches of every rank took, whatever
the sizes of the rounds that took them. The state_dict is Horovod's: {"epoch", "processed_num"}.
Not thread-safe.
"""

import math
import random

import torch
import torch.utils.data

from kolo.basics import is_initialized, rank, size


class ElasticSampler(torch.utils.data.Sampler):
    """Shards a dataset over the current ranks and resumes an epoch where the last commit was.

    A drop-in for horovod.torch.elastic.ElasticSampler of Horovod 0.23 to 0.28, with the
    same arguments, methods, state_dict and order. Put it in a TorchState, call
    record_batch() after each batch, and set_epoch() at the end of each epoch. The order of
    an epoch is list(range(len(dataset))) shuffled by random.Random(seed + epoch). At each
    reset the samples after the first processed_num of that order are sharded again over
    the new size: padded to a multiple of the size, rank r takes every size-th index from r.

    Args:
        dataset (torch.utils.data.Dataset): a dataset with len(), of constant size.
        shuffle (bool): whether to permute the indices each epoch.
        seed (int): the seed of the permutation, the same on every rank.
    """
    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        # Horovod 0.28 keeps this attribute, always empty; processed_num replaced it.
        self.processed_indices = set()
        self.num_replicas = 0
        self.rank = 0
        self.remaining_indices = []
        self.indices = []
        self.num_samples = 0
        self.total_size = 0
        self.processed_num = 0
        self.reset()

    def set_epoch(self, epoch):
        """Starts epoch `epoch` with nothing of it processed, then re-shards (reset()).

        Call it at the end of an epoch, as Horovod asks, so that a reset in the middle of an
        epoch does not process its samples again.

        Args:
            epoch (int): the epoch number; the order is seeded with seed + epoch.
        """
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Counts one batch of every rank as processed: processed_num += batch_size * size.

        Args:
            batch_idx (int): the batch number; unused, as in Horovod.
            batch_size (int): the samples per batch of each rank.
        """
        self.processed_num += batch_size * self.num_replicas

    def record_indices(self, indices):
        """Counts `indices`, this rank's next samples, as processed on every rank.

        Kept from Horovod 0.22 for kolo scripts; Horovod 0.28 has no such method. It adds
        len(indices) * size to processed_num, as record_batch does for a batch of that size.
        It no longer marks those very indices: pass the rank's next batch, in order.

        Args:
            indices (list): the dataset indices of this rank's batch.
        """
        self.processed_num += len(list(indices)) * self.num_replicas

    def get_indices(self, batch_idx, batch_size):
        """Returns the dataset indices of this rank's batch number batch_idx.

        Kept from Horovod 0.22 for kolo scripts; Horovod 0.28 has no such method.

        Args:
            batch_idx (int): the batch number in this rank's shard since the last reset.
            batch_size (int): the samples per batch; the last batch may be shorter.

        Returns:
            indices (list): the dataset indices of the batch.
        """
        start = batch_idx * batch_size
        return self.indices[start:min(start + batch_size, len(self.indices))]

    def load_state_dict(self, state_dict):
        """Sets the epoch and processed_num, then re-shards (reset()).

        A Horovod 0.22 state_dict ("processed_indices") loads only when that set is empty.

        Args:
            state_dict (dict): {"epoch": int, "processed_num": int}, as state_dict() returns.
        """
        if "processed_num" not in state_dict and "processed_indices" in state_dict:
            if state_dict["processed_indices"]:
                raise ValueError("ElasticSampler.load_state_dict: a Horovod 0.22 state "
                                 "(processed_indices) cannot resume the middle of an epoch; "
                                 "the state needs processed_num (Horovod 0.23 and later)")
            state_dict = dict(state_dict, processed_num=0)
        self.epoch = state_dict["epoch"]
        self.processed_num = state_dict["processed_num"]
        self.reset()

    def state_dict(self):
        """Returns Horovod's state: the epoch and processed_num.

        Returns:
            state (dict): {"epoch": int, "processed_num": int}.
        """
        return dict(epoch=self.epoch, processed_num=self.processed_num)

    def reset(self):
        """Re-shards the epoch's samples after the first processed_num over the current size."""
        self.num_replicas = size() if is_initialized() else 1
        self.rank = rank() if is_initialized() else 0
        all_indices = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(all_indices)
        self.remaining_indices = all_indices[self.processed_num:]
        self.num_samples = int(math.ceil(len(self.remaining_indices) * 1.0 / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas
        self.indices = self._shard()

    def _shard(self):
        indices = self.remaining_indices[:]
        # Padding as Horovod's; repeated when fewer samples are left than ranks minus one.
        while indices and len(indices) < self.total_size:
            indices += indices[:self.total_size - len(indices)]
        return indices[self.rank:self.total_size:self.num_replicas]

    def __iter__(self):
        self.indices = self._shard()
        return iter(self.indices)

    def __len__(self):
        return self.num_samples
