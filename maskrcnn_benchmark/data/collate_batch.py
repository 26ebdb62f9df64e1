from ..structures.image_list import RawImage, RawImageBatch, to_image_list
from ..structures.target_batch import TargetBatch
from .transforms.device import resize_tables


class BatchCollator:
    """The one batch form: ``(images, targets, ids)`` with the images padded into one ImageList (multiple of
    ``size_divisible``), or, on the hybrid path (decoded ``uint8`` :class:`RawImage` s), into one
    :class:`RawImageBatch` that the device loader transforms into the ImageList; the targets are always one
    :class:`~maskrcnn_benchmark.structures.target_batch.TargetBatch`, built here, in the loader worker, so the
    training process only copies it.

    A static batch (a compiled training step, ``max_gt`` > 0): the images are padded to the first of
    ``fixed_sizes`` they fit in and the targets to ``max_gt`` slots per image (``TargetBatch.static``), each mask's
    polygons to at least ``polygon_slots`` (vertices, parts)."""

    def __init__(self, size_divisible=0, fixed_sizes=(), max_gt=0, polygon_slots=(16, 4)):
        self.size_divisible = size_divisible
        self.fixed_sizes = tuple(fixed_sizes or ())
        self.max_gt = max_gt
        self.polygon_slots = tuple(polygon_slots)

    def __call__(self, batch):
        images, targets, ids = zip(*batch)
        targets = TargetBatch.from_boxlists(list(targets), max_gt=self.max_gt,
                                            polygon_slots=self.polygon_slots).packed()  # one buffer: one copy
        if isinstance(images[0], RawImage):  # the resize's tables made here too, off the training process
            tables = resize_tables([r.tensor.shape[-2:] for r in images], [r.image_size for r in images],
                                   [r.flip for r in images])
            return RawImageBatch.from_raw(images, tables), targets, ids
        return to_image_list(images, self.size_divisible, self.fixed_sizes), targets, ids

    def collate(self, images, targets):
        """``(images, TargetBatch)`` of in-memory ``images`` and BoxList ``targets``, as a loader batch has them
        (benchmarks, warm-up batches)."""
        images, targets, _ = self(list(zip(images, targets, range(len(images)))))
        return images, targets
