"""Datasets and data loaders from the config."""
import bisect
import functools
import logging
import multiprocessing
import os

import torch

from ..utils import comm
from ..utils.errors import BatchNotDivisible, ConfigError
from ..utils.processes import die_with_parent, keep_freed_memory, quiet_when_requests_are_left
from ..utils.rng import LOADER, derived_seed
from . import datasets as D
from .catalog import NUM_CLASSES_KEY, catalog_entries, describe_categories
from .collate_batch import BatchCollator
from .device_loader import DeviceLoader
from .shapes import polygon_slots
from .static import static_sizes
from .samplers import DistributedSampler, GroupedBatchSampler, IterationBasedBatchSampler
from .transforms import build_transforms
from .transforms.device import DeviceTransform

logger = logging.getLogger(__name__)


def _worker_init(worker_id, parent=None):
    """A loader worker never outlives its process: if that is killed (SIGKILL included) the kernel ends the
    worker too, instead of leaving it re-parented to PID 1 on a cluster node. It keeps freed memory for the next
    image (:func:`~maskrcnn_benchmark.utils.processes.keep_freed_memory`), and prints nothing when its process
    stops in the middle of fetching a batch from it
    (:func:`~maskrcnn_benchmark.utils.processes.quiet_when_requests_are_left`)."""
    die_with_parent(parent=parent)
    keep_freed_memory()
    quiet_when_requests_are_left()


def _worker_context():
    """Loader workers are forked where the platform forks (Linux: as torch's loaders were before Python 3.14, whose
    default there, forkserver, pickles the dataset to every worker: COCO train's parsed annotations, a gigabyte or
    more, per worker and rank, after run_start); elsewhere the default."""
    return multiprocessing.get_context("fork") if "fork" in multiprocessing.get_all_start_methods() else None


def _worker_parent(context=None):
    """The pid a loader worker's parent has: this process's where the start method makes it the parent (fork,
    spawn); None (no check) under forkserver, whose server forks them."""
    method = (context or multiprocessing.get_context()).get_start_method()  # the default, not fixed by asking
    return os.getpid() if method in ("fork", "spawn") else None


def use_hybrid(cfg):
    """``DATALOADER.HYBRID`` as :func:`~maskrcnn_benchmark.engine.resolve.resolve` fixed it (on for CUDA); an
    unresolved config (None) reads as the reference path."""
    return bool(cfg.DATALOADER.HYBRID)


def build_dataset(cfg, names, is_train, hybrid=None):
    hybrid = use_hybrid(cfg) if hybrid is None else hybrid
    out = []
    for _, entry in catalog_entries(cfg, names, is_train):
        factory = getattr(D, entry["factory"])
        kwargs = {"hybrid": True} if hybrid else {}  # a dataset of another factory may not know the hybrid path
        out.append(factory(remove_images_without_annotations=is_train, transforms=build_transforms(cfg, is_train),
                           **entry["args"], **kwargs))
    return out


def _collator(cfg, static):
    if not static:
        return BatchCollator(cfg.DATALOADER.SIZE_DIVISIBILITY)
    return BatchCollator(cfg.DATALOADER.SIZE_DIVISIBILITY, static_sizes(cfg),
                         cfg.DATALOADER.MAX_ANNOTATIONS_PER_IMAGE, polygon_slots(cfg))


def make_device_loader(cfg, loader, device, is_train=True, static=False):
    """``loader`` with its batches on ``device``, raw (hybrid) batches transformed there
    (:class:`~maskrcnn_benchmark.data.device_loader.DeviceLoader`); ``static``: padded to :func:`static_sizes`."""
    fixed = static_sizes(cfg) if static and is_train else ()
    return DeviceLoader(loader, device, DeviceTransform.from_config(cfg, fixed),
                        cache=not is_train and cfg.DATALOADER.CACHE_EVAL_IMAGES)


# -- the datasets' categories ----------------------------------------------------------------------------------
def categories_of(dataset):
    """``[(id, name), ...]`` of a built dataset in its file's order, which numbers its labels (all parts of a
    concatenated one must agree, order included)."""
    if isinstance(dataset, torch.utils.data.ConcatDataset):
        parts = [categories_of(d) for d in dataset.datasets]
        for d, cats in zip(dataset.datasets[1:], parts[1:]):
            if cats != parts[0]:
                raise D.DatasetError(f"training datasets '{dataset.datasets[0].ann_file}' and '{d.ann_file}' have "
                                     f"different categories ({describe_categories(parts[0])} vs "
                                     f"{describe_categories(cats)})")
        return parts[0]
    return [(c["id"], str(c.get("name", c["id"]))) for c in dataset.coco.dataset.get("categories", [])]


def check_num_classes(num_classes, train_dataset=None, test_datasets=()):
    """One line when the model's class count does not fit the data: ``NUM_CLASSES`` must be the number of
    categories + 1 (background), and the training and test datasets must have the same categories in the same order
    (the model's labels are positions in the file's category list, as the reference numbers them)."""
    reference = train_dataset if train_dataset is not None else (test_datasets[0] if test_datasets else None)
    if reference is None:
        return
    cats = categories_of(reference)
    for t in test_datasets:
        other = categories_of(t)
        if reference is not t and other != cats:
            raise D.DatasetError(f"the training dataset '{_name(reference)}' and the test dataset '{_name(t)}' have "
                                 f"different categories ({describe_categories(cats)} vs "
                                 f"{describe_categories(other)}): the model's labels would mean different things")
    if num_classes != len(cats) + 1:
        raise ConfigError(f"{NUM_CLASSES_KEY} is {num_classes}, but the dataset '{_name(reference)}' has "
                          f"{describe_categories(cats)}: set {NUM_CLASSES_KEY} {len(cats) + 1} (its categories + "
                          "background), or leave it unset to derive it")


def _name(dataset):
    if isinstance(dataset, torch.utils.data.ConcatDataset):
        return dataset.datasets[0].ann_file
    return getattr(dataset, "ann_file", type(dataset).__name__)


def _aspect_group_ids(dataset, bins=(1,)):
    ids = []
    for i in range(len(dataset)):
        info = dataset.get_img_info(i)
        ids.append(bisect.bisect_right(bins, float(info["height"]) / float(info["width"])))
    return ids


class _Concat(torch.utils.data.ConcatDataset):
    """The training datasets as one; an index may carry its augmentation seed (``(index, seed)``, what the
    training sampler yields), passed on to the member dataset that holds the index."""

    def _locate(self, idx):
        d = bisect.bisect_right(self.cumulative_sizes, idx)
        return self.datasets[d], idx - (self.cumulative_sizes[d - 1] if d else 0)

    def __getitem__(self, idx):
        if not isinstance(idx, tuple):
            return super().__getitem__(idx)
        idx, seed = idx
        dataset, local = self._locate(idx)
        return dataset[(local, seed)]

    def get_img_info(self, idx):
        dataset, local = self._locate(idx)
        return dataset.get_img_info(local)


def make_data_loader(cfg, is_train=True, is_distributed=False, start_iter=0, num_replicas=None, rank=None,
                     max_iter=None, seed=0, datasets=None, static=False):
    """One DataLoader per dataset for test, a single (concatenated) one for training.

    Training: images per GPU = SOLVER.IMS_PER_BATCH / world size, aspect-ratio grouping, an iteration-based
    sampler over ``max_iter`` (default SOLVER.MAX_ITER). Test: TEST.IMS_PER_BATCH / world size, in order, grouped
    by aspect ratio too (the reference's: a batch of one orientation is padded less).
    The shard is ``rank`` of ``num_replicas``; when they are not given, the reference's ``is_distributed`` says
    whether to take them from the initialized process group (else one process). ``static`` (training): batches
    of fixed shapes for a compiled step (:func:`static_sizes`, DATALOADER.MAX_ANNOTATIONS_PER_IMAGE).
    """
    if num_replicas is None:
        num_replicas = comm.get_world_size() if is_distributed else 1
    if rank is None:
        rank = comm.get_rank() if is_distributed else 0
    ims = cfg.SOLVER.IMS_PER_BATCH if is_train else cfg.TEST.IMS_PER_BATCH
    if ims % num_replicas:
        key = "SOLVER.IMS_PER_BATCH" if is_train else "TEST.IMS_PER_BATCH"
        raise BatchNotDivisible(f"{key} ({ims}) must be divisible by the number of processes ({num_replicas})")
    per_gpu = ims // num_replicas
    if datasets is None:
        datasets = build_dataset(cfg, cfg.DATASETS.TRAIN if is_train else cfg.DATASETS.TEST, is_train)
    if is_train and len(datasets) > 1:
        datasets = [_Concat(datasets)]
    loaders = []
    for dataset in datasets:
        sampler = DistributedSampler(len(dataset), num_replicas, rank, shuffle=is_train, seed=seed)
        if cfg.DATALOADER.ASPECT_RATIO_GROUPING:  # the test set's batches too, as the reference's
            batch_sampler = GroupedBatchSampler(sampler, _aspect_group_ids(dataset), per_gpu, drop_uneven=False)
        else:
            batch_sampler = torch.utils.data.BatchSampler(sampler, per_gpu, drop_last=False)
        if is_train:
            batch_sampler = IterationBasedBatchSampler(batch_sampler, max_iter or cfg.SOLVER.MAX_ITER, start_iter,
                                                       seed=seed, rank=rank)
        workers = cfg.DATALOADER.NUM_WORKERS
        context = _worker_context() if workers > 0 else None
        loaders.append(torch.utils.data.DataLoader(
            dataset, num_workers=workers, batch_sampler=batch_sampler,
            collate_fn=_collator(cfg, static and is_train),
            pin_memory=torch.cuda.is_available() and cfg.MODEL.DEVICE == "cuda",
            # test loaders too: every epoch's evaluation iterates again, and forking the workers each time cost
            # the demo's evaluation about 60 ms (its first batch 80 -> 20 ms)
            persistent_workers=workers > 0,
            # its own generator: creating the loader must not draw from the global RNG a resumed run restores
            generator=torch.Generator().manual_seed(derived_seed(LOADER, seed, rank)),
            worker_init_fn=functools.partial(_worker_init, parent=_worker_parent(context)) if workers > 0 else None,
            multiprocessing_context=context,
        ))
    return loaders[0] if is_train else loaders
