"""Datasets and data loaders from the config."""
import bisect
import logging

import torch

from ..utils import comm
from ..utils.imports import load_catalog
from ..utils.processes import die_with_parent
from . import datasets as D
from .collate_batch import BatchCollator
from .samplers import DistributedSampler, GroupedBatchSampler, IterationBasedBatchSampler
from .transforms import build_transforms

logger = logging.getLogger(__name__)


def _worker_init(worker_id):
    """A loader worker never outlives its process: if that is killed (SIGKILL included) the kernel ends the
    worker too, instead of leaving it re-parented to PID 1 on a cluster node."""
    die_with_parent()


def build_dataset(cfg, names, is_train):
    catalog = load_catalog(cfg.PATHS_CATALOG).DatasetCatalog
    if not names:
        raise D.DatasetError(f"DATASETS.{'TRAIN' if is_train else 'TEST'} is empty")
    out = []
    for name in names:
        try:
            entry = catalog.get(name, cfg.DATASETS.DATA_DIR)
        except KeyError as e:  # the catalog's message names the dataset and the known ones
            raise D.DatasetError(f"DATASETS.{'TRAIN' if is_train else 'TEST'}: {e.args[0] if e.args else e}") \
                from None
        factory = getattr(D, entry["factory"])
        out.append(factory(remove_images_without_annotations=is_train, transforms=build_transforms(cfg, is_train),
                           **entry["args"]))
    return out


def _aspect_group_ids(dataset, bins=(1,)):
    ids = []
    for i in range(len(dataset)):
        info = dataset.get_img_info(i)
        ids.append(bisect.bisect_right(bins, float(info["height"]) / float(info["width"])))
    return ids


class _Concat(torch.utils.data.ConcatDataset):
    def get_img_info(self, idx):
        d = bisect.bisect_right(self.cumulative_sizes, idx)
        return self.datasets[d].get_img_info(idx - (self.cumulative_sizes[d - 1] if d else 0))


def make_data_loader(cfg, is_train=True, is_distributed=False, start_iter=0, num_replicas=None, rank=None,
                     max_iter=None, seed=0, datasets=None):
    """One DataLoader per dataset for test, a single (concatenated) one for training.

    Training: images per GPU = SOLVER.IMS_PER_BATCH / world size, aspect-ratio grouping, an iteration-based
    sampler over ``max_iter`` (default SOLVER.MAX_ITER). Test: TEST.IMS_PER_BATCH / world size, in order.
    The shard is ``rank`` of ``num_replicas``; when they are not given, the reference's ``is_distributed`` says
    whether to take them from the initialized process group (else one process).
    """
    if num_replicas is None:
        num_replicas = comm.get_world_size() if is_distributed else 1
    if rank is None:
        rank = comm.get_rank() if is_distributed else 0
    ims = cfg.SOLVER.IMS_PER_BATCH if is_train else cfg.TEST.IMS_PER_BATCH
    if ims % num_replicas:
        key = "SOLVER.IMS_PER_BATCH" if is_train else "TEST.IMS_PER_BATCH"
        raise ValueError(f"{key} ({ims}) must be divisible by the number of processes ({num_replicas})")
    per_gpu = ims // num_replicas
    if datasets is None:
        datasets = build_dataset(cfg, cfg.DATASETS.TRAIN if is_train else cfg.DATASETS.TEST, is_train)
    if is_train and len(datasets) > 1:
        datasets = [_Concat(datasets)]
    loaders = []
    for dataset in datasets:
        sampler = DistributedSampler(len(dataset), num_replicas, rank, shuffle=is_train, seed=seed)
        if is_train and cfg.DATALOADER.ASPECT_RATIO_GROUPING:
            batch_sampler = GroupedBatchSampler(sampler, _aspect_group_ids(dataset), per_gpu, drop_uneven=False)
        else:
            batch_sampler = torch.utils.data.BatchSampler(sampler, per_gpu, drop_last=False)
        if is_train:
            batch_sampler = IterationBasedBatchSampler(batch_sampler, max_iter or cfg.SOLVER.MAX_ITER, start_iter,
                                                       seed=seed, rank=rank)
        workers = cfg.DATALOADER.NUM_WORKERS
        loaders.append(torch.utils.data.DataLoader(
            dataset, num_workers=workers, batch_sampler=batch_sampler,
            collate_fn=BatchCollator(cfg.DATALOADER.SIZE_DIVISIBILITY),
            pin_memory=torch.cuda.is_available() and cfg.MODEL.DEVICE == "cuda",
            persistent_workers=workers > 0 and is_train,
            # its own generator: creating the loader must not draw from the global RNG a resumed run restores
            generator=torch.Generator().manual_seed(int(seed) + rank),
            worker_init_fn=_worker_init if workers > 0 else None,
        ))
    return loaders[0] if is_train else loaders
