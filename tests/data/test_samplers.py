import pytest
import torch

from helpers import empty_target
from maskrcnn_benchmark.data.collate_batch import BatchCollator
from maskrcnn_benchmark.structures import BoxList, SegmentationMask
from maskrcnn_benchmark.data.samplers import DistributedSampler, GroupedBatchSampler, IterationBasedBatchSampler


def test_grouped_batch_sampler_reference_semantics():
    sampler = list(range(10))
    groups = [0, 0, 1, 0, 1, 1, 0, 1, 1, 0]
    batches = list(GroupedBatchSampler(sampler, groups, 2))
    assert batches == [[0, 1], [2, 4], [3, 6], [5, 7], [8], [9]]
    assert list(GroupedBatchSampler(sampler, groups, 2, drop_uneven=True)) == [[0, 1], [2, 4], [3, 6], [5, 7]]
    shuffled = [9, 2, 0, 4, 1, 7, 3, 5, 8, 6]
    batches = list(GroupedBatchSampler(shuffled, groups, 3))
    assert batches == [[9, 0, 1], [2, 4, 7], [3, 6], [5, 8]]
    assert all(len({groups[i] for i in b}) == 1 for b in batches)


def test_distributed_sampler_partitions_and_reshuffles():
    parts = [list(DistributedSampler(10, 3, r, shuffle=True, seed=7)) for r in range(3)]
    assert all(len(p) == 4 for p in parts)
    flat = sum(parts, [])
    assert set(flat) == set(range(10)) and len(flat) == 12  # padded with repeats
    s = DistributedSampler(10, 3, 0, shuffle=True, seed=7)
    first = list(s)
    s.set_epoch(1)
    assert list(s) != first
    assert list(DistributedSampler(5, 2, 1, shuffle=False)) == [1, 3, 0]


def test_a_dataset_smaller_than_half_the_ranks_still_gives_every_rank_its_share():
    """Padding repeated the indices at most once: 3 images on 8 ranks left ranks 6 and 7 empty shards (while their
    length said 1), and the iteration sampler of such a rank looped forever looking for a batch."""
    parts = [list(DistributedSampler(3, 8, r, shuffle=True, seed=1)) for r in range(8)]
    assert [len(p) for p in parts] == [1] * 8
    assert set(sum(parts, [])) == {0, 1, 2}
    batches = IterationBasedBatchSampler(GroupedBatchSampler(DistributedSampler(3, 8, 7), [0, 0, 0], 1), 2)
    assert [len(b) for b in batches] == [1, 1]


def test_an_iteration_sampler_over_no_batches_is_an_error_not_a_hang():
    batches = IterationBasedBatchSampler(GroupedBatchSampler(DistributedSampler(0, 2, 1), [], 1), 2)
    with pytest.raises(ValueError, match="no batch"):
        next(iter(batches))


def test_runs_with_nearby_seeds_never_share_an_epochs_order():
    """The shuffle was seeded with seed + epoch, so the run with seed s saw in epoch e + 1 the order the run with
    seed s + 1 saw in epoch e: five runs launched with --seed 1..5 trained on shifted copies of one another's data
    orders (NVIDIA's reference draws each pass's seed from a generator seeded with the run's seed). Every (seed,
    epoch) pair of nearby seeds now has its own order; the process seeds of nearby (seed, rank) pairs likewise."""
    from maskrcnn_benchmark.engine.run import process_seed

    orders = {}
    for seed in range(1, 6):
        s = DistributedSampler(1000, 1, 0, shuffle=True, seed=seed)
        for epoch in range(8):
            s.set_epoch(epoch)
            orders[(seed, epoch)] = tuple(s)
    assert len(set(orders.values())) == len(orders)
    again = DistributedSampler(1000, 1, 0, shuffle=True, seed=3)
    again.set_epoch(5)
    assert tuple(again) == orders[(3, 5)]  # still a function of (seed, epoch): a resumed run replays it
    seeds = {process_seed(seed, rank) for seed in range(1, 6) for rank in range(64)}
    assert len(seeds) == 5 * 64 and all(0 <= v < 2 ** 32 for v in seeds)


def test_derived_seeds_are_a_fixed_function_of_any_integers():
    """A resumed run replays its data order from (seed, epoch): the mix must not depend on the interpreter (Python's
    hash of a tuple is CPython's, 64-bit builds only, and changes with it), and any --seed gives its own
    (hash(-1) == hash(-2) in CPython: two runs with the same order)."""
    from maskrcnn_benchmark.utils.rng import derived_seed

    assert derived_seed(1, 5, 0) == 4872696139908373673  # pinned: a resumed run's order on any machine
    assert derived_seed(-1) != derived_seed(-2) and derived_seed(1, 2) != derived_seed(12) != derived_seed(2, 1)
    assert 0 <= derived_seed(2 ** 100, -(2 ** 70)) < 2 ** 63


def test_iteration_based_sampler_reiterates_with_new_epochs():
    s = DistributedSampler(6, 1, 0, shuffle=True, seed=0)
    batch = torch.utils.data.BatchSampler(s, 4, drop_last=False)
    it = IterationBasedBatchSampler(batch, num_iterations=5, start_iter=0)
    out = list(it)
    assert len(out) == 5 and len(it) == 5
    assert sorted(out[0] + out[1]) == list(range(6))
    assert out[0] + out[1] != out[2] + out[3]  # second epoch shuffled differently
    assert len(list(IterationBasedBatchSampler(batch, 5, start_iter=3))) == 2


def test_collator_pads_to_size_divisibility():
    t0, t1 = empty_target(41, 30), BoxList(torch.tensor([[1.0, 2.0, 10.0, 12.0]]), (20, 50))
    t1.add_field("labels", torch.tensor([3]))
    t1.add_field("masks", SegmentationMask([[[1.0, 2.0, 10.0, 2.0, 10.0, 12.0]]], (20, 50)))
    batch = [(torch.ones(3, 30, 41), t0, 0), (torch.ones(3, 50, 20), t1, 1)]
    images, targets, ids = BatchCollator(32)(batch)
    assert images.tensors.shape == (2, 3, 64, 64) and images.image_sizes == [(30, 41), (50, 20)]
    assert ids == (0, 1)
    # the targets: one TargetBatch, tightly padded (the largest count, 1), not static
    assert targets.boxes.shape == (2, 1, 4) and targets.valid.tolist() == [[False], [True]]
    assert targets.labels.tolist() == [[0], [3]] and targets.image_wh.tolist() == [[41.0, 30.0], [20.0, 50.0]]
    assert not targets.static and BatchCollator(32, max_gt=4)(batch)[1].static


def _run_batches(num_iterations, start_iter, seed=5, groups=None):
    sampler = DistributedSampler(23, 2, 1, shuffle=True, seed=seed)
    groups = groups or [i % 3 == 0 for i in range(23)]  # two aspect-ratio groups of different sizes
    grouped = GroupedBatchSampler(sampler, groups, 3)
    return list(IterationBasedBatchSampler(grouped, num_iterations, start_iter, seed=seed, rank=1))


def test_resumed_sampler_continues_exactly_mid_epoch_and_at_epoch_boundaries():
    full = _run_batches(30, 0)
    per_epoch = len(GroupedBatchSampler(DistributedSampler(23, 2, 1, seed=5), [i % 3 == 0 for i in range(23)], 3))
    assert per_epoch < 30 // 2  # the run spans several epochs
    for start in (1, 4, per_epoch - 1, per_epoch, per_epoch + 2, 2 * per_epoch):
        assert _run_batches(30, start) == full[start:], start
    # every element carries its own augmentation seed; the same (index, seed) pairs come back after a resume
    assert all(isinstance(x, tuple) and len(x) == 2 for batch in full for x in batch)
    assert len({x[1] for batch in full for x in batch}) == sum(len(b) for b in full)


def test_grouped_batches_follow_the_epoch_set_after_len():
    """len() before set_epoch must not freeze the previous epoch's batches (the resumed epoch replayed the
    previous one)."""
    sampler = DistributedSampler(12, 1, 0, shuffle=True, seed=0)
    grouped = GroupedBatchSampler(sampler, [0] * 12, 4)
    assert len(grouped) == 3
    epoch0 = list(grouped)
    sampler.set_epoch(1)
    assert list(grouped) != epoch0
    assert sorted(sum(list(grouped), [])) == list(range(12))
