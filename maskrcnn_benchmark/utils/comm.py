"""The distributed bootstrap and collectives, in one place.

Processes are started by bind_launch/torchrun/srun with ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR``, ``MASTER_PORT`` in the environment (Slurm's ``SLURM_PROCID``/``SLURM_NTASKS``/``SLURM_LOCALID``
are used when those are missing). The device is pinned before ``init_process_group`` (NCCL needs it), the
backend is NCCL on GPU and gloo on CPU, and a barrier ends the setup so a rank that cannot join fails early.
"""
import datetime
import logging
import os

import torch
import torch.distributed as dist

logger = logging.getLogger(__name__)


def _env_int(*names, default=None):
    for n in names:
        if os.environ.get(n, "").strip():
            return int(os.environ[n])
    return default


def init_distributed(local_rank=None, device="cuda", timeout_s=1800):
    """Initialise torch.distributed from the environment; returns ``(rank, world_size, local_rank, device)``."""
    world = _env_int("WORLD_SIZE", "SLURM_NTASKS", default=1)
    rank = _env_int("RANK", "SLURM_PROCID", default=0)
    if local_rank is None or local_rank < 0:
        local_rank = _env_int("LOCAL_RANK", "SLURM_LOCALID", default=0)
    use_cuda = device == "cuda" and torch.cuda.is_available()
    if device == "cuda" and not use_cuda:
        logger.warning("MODEL.DEVICE is cuda but no GPU is visible: running on CPU")
    dev = torch.device("cuda", local_rank % max(torch.cuda.device_count(), 1)) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(dev)
    if world > 1 and not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29500")
        dist.init_process_group(backend="nccl" if use_cuda else "gloo", init_method="env://", rank=rank,
                                world_size=world, timeout=datetime.timedelta(seconds=timeout_s))
        synchronize()
    return rank, world, local_rank, dev


def get_world_size():
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def get_rank():
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def is_main_process():
    return get_rank() == 0


def synchronize():
    if get_world_size() > 1:
        if dist.get_backend() == "nccl":
            dist.barrier(device_ids=[torch.cuda.current_device()])
        else:
            dist.barrier()


def all_gather(data):
    """Gather a picklable object from every rank (list indexed by rank)."""
    if get_world_size() == 1:
        return [data]
    out = [None] * get_world_size()
    dist.all_gather_object(out, data)
    return out


def broadcast_object(obj, src=0):
    if get_world_size() == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def reduce_dict(values, average=True):
    """Sum (or mean) a dict of scalar tensors over ranks, for logging."""
    if get_world_size() == 1:
        return values
    keys = sorted(values)
    stacked = torch.stack([values[k].detach().float() for k in keys])
    dist.all_reduce(stacked)
    if average:
        stacked /= get_world_size()
    return dict(zip(keys, stacked))


def destroy():
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


__all__ = ["init_distributed", "get_rank", "get_world_size", "is_main_process", "synchronize", "all_gather",
           "broadcast_object", "reduce_dict", "destroy"]
