"""Batches that arrive on the training device ready to use.

:class:`DeviceLoader` wraps a DataLoader. Each batch is copied to the device, and a raw ``uint8`` batch of the
hybrid path (:class:`~maskrcnn_benchmark.structures.image_list.RawImageBatch`) is resized, flipped and normalized
there by :class:`~maskrcnn_benchmark.data.transforms.device.DeviceTransform`, in one call. On CUDA this happens on
a side stream, one batch ahead: the copy of batch i + 1 (from pinned memory) and its transform run while step i
trains, and the step waits for them only when it needs them. On the CPU everything happens in line.

``cache=True`` (``DATALOADER.CACHE_EVAL_IMAGES``, for the evaluation loader of the hybrid path) keeps the raw
device batches of the first pass; later passes skip decoding and copying and only transform again (NVIDIA's
``CACHE_EVAL_IMAGES``: on COCO val about 0.6 GB of ``uint8`` per GPU with 8 GPUs).
"""
import torch

from ..structures.image_list import RawImageBatch
from ..structures.target_batch import TargetBatch


def _record_stream(obj, stream):
    """Tell the caching allocator that tensors made on the side stream are used on ``stream``."""
    if isinstance(obj, torch.Tensor):
        if obj.is_cuda:
            obj.record_stream(stream)
        return
    if isinstance(obj, RawImageBatch):
        for t in obj.images:
            _record_stream(t, stream)
        return
    if isinstance(obj, TargetBatch):
        for t in obj.tensors():
            _record_stream(t, stream)
        return
    tensors = getattr(obj, "tensors", None)
    if isinstance(tensors, torch.Tensor):
        _record_stream(tensors, stream)
    bbox = getattr(obj, "bbox", None)
    if isinstance(bbox, torch.Tensor):
        _record_stream(bbox, stream)
        for value in getattr(obj, "extra_fields", {}).values():
            _record_stream(value, stream)
    packed = getattr(obj, "_packed", None)
    if packed is not None:
        for t in packed:
            _record_stream(t, stream)
    masks = getattr(obj, "masks", None)
    if isinstance(masks, torch.Tensor):
        _record_stream(masks, stream)


def move_targets(targets, device):
    """A batch's targets (BoxLists, or one :class:`TargetBatch` of a static batch) on ``device``."""
    if isinstance(targets, TargetBatch):
        return targets.to(device, non_blocking=True)
    return [t.to(device, non_blocking=True) for t in targets]


class DeviceLoader:
    def __init__(self, loader, device, transform=None, cache=False):
        self.loader = loader
        self.device = torch.device(device)
        self.transform = transform
        self.cache = cache
        self._cached = None

    @property
    def dataset(self):
        return self.loader.dataset

    @property
    def batch_sampler(self):
        return self.loader.batch_sampler

    def __len__(self):
        return len(self.loader)

    def _to_device(self, batch):
        images, targets, ids = batch
        images = images.to(self.device, non_blocking=True)
        targets = move_targets(targets, self.device)
        return images, targets, ids

    def _finish(self, batch):
        images, targets, ids = batch
        if isinstance(images, RawImageBatch):
            if self.transform is None:
                raise ValueError("a raw (hybrid) batch needs a DeviceTransform")
            images = self.transform(images)
        return images, targets, ids

    def _batches(self):
        if self._cached is not None:
            yield from self._cached
            return
        kept = [] if self.cache else None
        for batch in self.loader:
            batch = self._to_device(batch)
            if kept is not None and isinstance(batch[0], RawImageBatch):
                kept.append(batch)
            yield batch
        if kept:
            self._cached = kept

    def __iter__(self):
        if self.device.type != "cuda":
            for batch in self._batches():
                yield self._finish(batch)
            return
        main = torch.cuda.current_stream(self.device)
        side = torch.cuda.Stream(self.device)
        source = self._batches()

        def issue():
            with torch.cuda.stream(side):
                try:
                    batch = next(source)
                except StopIteration:
                    return None
                return self._finish(batch)

        upcoming = issue()
        while upcoming is not None:
            main.wait_stream(side)
            images, targets, ids = upcoming
            _record_stream(images, main)
            for t in targets if isinstance(targets, (list, tuple)) else [targets]:
                _record_stream(t, main)
            upcoming = issue()  # the next batch's copy and transform overlap this step
            yield images, targets, ids
