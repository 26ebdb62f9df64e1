"""Samplers with maskrcnn-benchmark's semantics."""
import math

import torch
from torch.utils.data.sampler import BatchSampler, Sampler

from ...utils.rng import SHUFFLE, derived_seed


class DistributedSampler(Sampler):
    """This rank's share of the (per-epoch shuffled) indices, padded so every rank gets the same count. Each epoch's
    order is a function of the run's seed and the epoch (:func:`derived_seed`), the same on every rank, as NVIDIA's
    reference draws each pass's seed from a generator seeded with the run's seed."""

    def __init__(self, dataset_len, num_replicas, rank, shuffle=True, seed=0):
        self.dataset_len = dataset_len
        self.num_replicas = num_replicas
        self.rank = rank
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.num_samples = int(math.ceil(dataset_len / num_replicas))
        self.total_size = self.num_samples * num_replicas

    def __iter__(self):
        if self.shuffle:
            g = torch.Generator().manual_seed(derived_seed(SHUFFLE, self.seed, self.epoch))
            indices = torch.randperm(self.dataset_len, generator=g).tolist()
        else:
            indices = list(range(self.dataset_len))
        if indices:  # repeated as often as it takes: a dataset smaller than the ranks still fills every share
            indices = (indices * math.ceil(self.total_size / len(indices)))[:self.total_size]
        return iter(indices[self.rank:self.total_size:self.num_replicas])

    def __len__(self):
        return self.num_samples

    def set_epoch(self, epoch):
        self.epoch = epoch


class GroupedBatchSampler(BatchSampler):
    """Batches whose images share a group (aspect-ratio bin), as in maskrcnn-benchmark.

    Elements keep the sampler's order within each group and are cut into batches; the batches are then
    ordered by the sampler position of their first element. With ``drop_uneven`` incomplete batches are
    dropped. The batches depend on the sampler's epoch; they are computed for the epoch in force when asked
    (never kept from an earlier ``set_epoch``).
    """

    def __init__(self, sampler, group_ids, batch_size, drop_uneven=False):
        self.sampler = sampler
        self.group_ids = list(group_ids)
        self.batch_size = batch_size
        self.drop_uneven = drop_uneven
        self._cache = (None, None)  # (epoch, batches)

    def _batches(self):
        epoch = getattr(self.sampler, "epoch", None)
        if self._cache[1] is not None and self._cache[0] == epoch and epoch is not None:
            return self._cache[1]
        order = list(self.sampler)
        by_group = {}
        for pos, idx in enumerate(order):
            by_group.setdefault(self.group_ids[idx], []).append((pos, idx))
        batches = []
        for members in by_group.values():
            for s in range(0, len(members), self.batch_size):
                chunk = members[s:s + self.batch_size]
                if self.drop_uneven and len(chunk) < self.batch_size:
                    continue
                batches.append((chunk[0][0], [idx for _, idx in chunk]))
        batches = [b for _, b in sorted(batches, key=lambda x: x[0])]
        self._cache = (epoch, batches)
        return batches

    def __iter__(self):
        return iter(self._batches())

    def __len__(self):
        return len(self._batches())


def augmentation_seed(seed, rank, iteration, slot):
    """The random seed of one training sample's augmentation: a function of where it sits in the run, so a
    resumed run (or a restarted loader worker) draws exactly what the uninterrupted run drew."""
    return derived_seed(seed, rank, iteration, slot)


class IterationBasedBatchSampler(BatchSampler):
    """Re-iterates a batch sampler until ``num_iterations`` batches were produced, calling ``set_epoch`` on the
    underlying sampler at each pass so shuffling differs per epoch.

    ``start_iter`` resumes exactly: iteration ``start_iter + 1`` gets the batch the uninterrupted run gave it
    (the epochs before are replayed in the sampler only, an epoch's batch count may differ per epoch with
    aspect-ratio grouping). With ``seed`` set, every element is ``(index, augmentation seed)``.
    """

    def __init__(self, batch_sampler, num_iterations, start_iter=0, seed=None, rank=0):
        self.batch_sampler = batch_sampler
        self.num_iterations = num_iterations
        self.start_iter = start_iter
        self.seed = seed
        self.rank = rank

    def _set_epoch(self, epoch):
        sampler = getattr(self.batch_sampler, "sampler", None)
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)

    def __iter__(self):
        epoch, done = 0, 0
        while True:  # find the epoch and the batch the run stopped in
            self._set_epoch(epoch)
            n = len(self.batch_sampler)
            if done + n > self.start_iter or n == 0:
                break
            done += n
            epoch += 1
        skip = self.start_iter - done
        iteration = self.start_iter
        while iteration < self.num_iterations:
            self._set_epoch(epoch)
            if len(self.batch_sampler) == 0:  # no epoch would ever yield one: an error, not an endless loop
                raise ValueError("the training data loader has no batch to give (an empty dataset or shard)")
            for batch in self.batch_sampler:
                if skip:
                    skip -= 1
                    continue
                if iteration >= self.num_iterations:
                    return
                iteration += 1
                if self.seed is None:
                    yield batch
                else:
                    yield [(idx, augmentation_seed(self.seed, self.rank, iteration, k)) for k, idx in enumerate(batch)]
            epoch += 1

    def __len__(self):
        return self.num_iterations - self.start_iter
