"""A batch's tensors in one buffer, so it crosses from a loader worker to the training process and on to the
device in one piece: one shared-memory handover (torch shares a storage once, however many views of it are
pickled), one pinned copy, one copy to the device."""
import math

import torch

_ALIGN = 128  # bytes: each part of a packed batch starts at a multiple (what a GPU kernel's vector loads want)


def packed_empty(specs):
    """Empty tensors of ``specs`` (``(shape, dtype)`` pairs) laid out in one ``uint8`` buffer, each at a multiple
    of 128 bytes: one storage, so one shared-memory handover from a loader worker, one pinned copy, one copy to the
    device (:func:`map_storages`)."""
    offsets, total = [], 0
    for shape, dtype in specs:
        offsets.append(total)
        total += -(-math.prod(shape) * dtype.itemsize // _ALIGN) * _ALIGN
    buffer = torch.empty(max(total, 1), dtype=torch.uint8)
    return [buffer[o:o + math.prod(shape) * dtype.itemsize].view(dtype).view(shape)
            for o, (shape, dtype) in zip(offsets, specs)]


def map_storages(tensors, fn):
    """``fn`` (a copy: ``to``, ``pin_memory``) applied once to each storage the tensors are views of, as bytes, and
    each tensor rebuilt as the same view of the result: a packed batch moves in one piece."""
    done, out = {}, []
    for t in tensors:
        storage = t.untyped_storage()
        key = storage._cdata  # the storage itself (two storages may start at one address: views of one buffer)
        if key not in done:
            done[key] = fn(torch.empty(0, dtype=torch.uint8, device=t.device).set_(storage))
        moved = done[key]
        out.append(torch.empty(0, dtype=t.dtype, device=moved.device).set_(
            moved.untyped_storage(), t.storage_offset(), t.shape, t.stride()))
    return out


def handed_over_storages(obj):
    """How many storages pickling ``obj`` for another process hands over (torch's reductions, as a DataLoader
    worker's queue pickles a batch): one shared-memory handshake each. What bench/input_pipeline.py and the tests
    count."""
    from multiprocessing.reduction import ForkingPickler

    import torch.multiprocessing.reductions as reductions

    count = []
    original = reductions.reduce_storage
    try:
        ForkingPickler.register(torch.UntypedStorage, lambda s: (count.append(1), original(s))[1])
        ForkingPickler.dumps(obj)
    finally:
        ForkingPickler.register(torch.UntypedStorage, original)
    return len(count)
