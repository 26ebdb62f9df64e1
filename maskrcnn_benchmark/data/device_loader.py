"""Batches that arrive on the training device ready to use.

:class:`DeviceLoader` wraps a DataLoader. Each batch is copied to the device, and a raw ``uint8`` batch of the
hybrid path (:class:`~maskrcnn_benchmark.structures.image_list.RawImageBatch`) is resized, flipped and normalized
there by :class:`~maskrcnn_benchmark.data.transforms.device.DeviceTransform`, in one call. On CUDA this happens on
a side stream, one batch ahead: the copy of batch i + 1 (from pinned memory) and its transform are issued to run
while step i trains, and the step waits for them only when it needs them (the overlap has not been measured on a
GPU; gpu-check's input check times the device side alone). On the CPU everything happens in line.

``cache=True`` (``DATALOADER.CACHE_EVAL_IMAGES``, for the evaluation loader of the hybrid path) keeps the raw
device batches of the first pass; later passes skip decoding and copying and only transform again (NVIDIA's
``CACHE_EVAL_IMAGES``: on COCO val about 0.6 GB of ``uint8`` per GPU with 8 GPUs).
"""
import torch

from ..structures.image_list import RawImageBatch


def _record_stream(images, targets, stream):
    """Tell the caching allocator that the batch's tensors, made on the side stream, are used on ``stream``."""
    for t in (images.tensors, images.sizes, *targets.tensors()):
        if t.is_cuda:
            t.record_stream(stream)


class DeviceLoader:
    """The one place a batch moves to the device: ``(ImageList, TargetBatch, ids)`` on ``device``, a raw hybrid
    batch transformed there; the training step and the evaluation loop use what it yields as it is."""

    def __init__(self, loader, device, transform=None, cache=False):
        self.loader = loader
        self.device = torch.device(device)
        self.transform = transform
        self.cache = cache
        self._cached = None
        self._side = None  # the side stream, one per loader (made on the first CUDA pass)

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
        return images.to(self.device, non_blocking=True), targets.to(self.device, non_blocking=True), ids

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
        # one side stream for every pass (the evaluation loader passes every epoch): the caching allocator reuses a
        # freed block only on the stream that allocated it, so a new stream per pass would strand each pass's buffers
        if self._side is None:
            self._side = torch.cuda.Stream(self.device)
        side = self._side
        side.wait_stream(main)  # after what the main stream did before this pass (a cached batch's earlier use)
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
            _record_stream(images, targets, main)
            upcoming = issue()  # the next batch's copy and transform overlap this step
            yield images, targets, ids
