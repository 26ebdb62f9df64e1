"""Samplers with maskrcnn-benchmark's semantics."""
import math

import torch
from torch.utils.data.sampler import BatchSampler, Sampler


class DistributedSampler(Sampler):
    """This rank's share of the (per-epoch shuffled) indices, padded so every rank gets the same count."""

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
            g = torch.Generator().manual_seed(self.seed + self.epoch)
            indices = torch.randperm(self.dataset_len, generator=g).tolist()
        else:
            indices = list(range(self.dataset_len))
        indices += indices[: self.total_size - len(indices)]
        return iter(indices[self.rank:self.total_size:self.num_replicas])

    def __len__(self):
        return self.num_samples

    def set_epoch(self, epoch):
        self.epoch = epoch


class GroupedBatchSampler(BatchSampler):
    """Batches whose images share a group (aspect-ratio bin), as in maskrcnn-benchmark.

    Elements keep the sampler's order within each group and are cut into batches; the batches are then
    ordered by the sampler position of their first element. With ``drop_uneven`` incomplete batches are
    dropped.
    """

    def __init__(self, sampler, group_ids, batch_size, drop_uneven=False):
        self.sampler = sampler
        self.group_ids = list(group_ids)
        self.batch_size = batch_size
        self.drop_uneven = drop_uneven
        self._batches = None

    def _prepare_batches(self):
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
        return [b for _, b in sorted(batches, key=lambda x: x[0])]

    def __iter__(self):
        batches = self._batches if self._batches is not None else self._prepare_batches()
        self._batches = None
        return iter(batches)

    def __len__(self):
        if self._batches is None:
            self._batches = self._prepare_batches()
        return len(self._batches)


class IterationBasedBatchSampler(BatchSampler):
    """Re-iterates a batch sampler until ``num_iterations`` batches were produced, calling
    ``set_epoch`` on the underlying sampler at each pass so shuffling differs per epoch."""

    def __init__(self, batch_sampler, num_iterations, start_iter=0):
        self.batch_sampler = batch_sampler
        self.num_iterations = num_iterations
        self.start_iter = start_iter

    def __iter__(self):
        iteration = self.start_iter
        epoch = self.start_iter // max(len(self.batch_sampler), 1)  # a resumed run continues the epoch order
        while iteration < self.num_iterations:
            sampler = getattr(self.batch_sampler, "sampler", None)
            if hasattr(sampler, "set_epoch"):
                sampler.set_epoch(epoch)
            for batch in self.batch_sampler:
                if iteration >= self.num_iterations:
                    return
                iteration += 1
                yield batch
            epoch += 1

    def __len__(self):
        return self.num_iterations - self.start_iter
