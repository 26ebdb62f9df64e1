from ..structures.image_list import RawImage, RawImageBatch, to_image_list
from ..structures.target_batch import TargetBatch


class BatchCollator:
    """Pads the images of a batch into one ImageList (multiple of ``size_divisible``), or, on the hybrid path
    (decoded ``uint8`` :class:`RawImage` s), into one :class:`RawImageBatch` for the device to transform.

    A static batch (a compiled training step, ``max_gt`` > 0): the images are padded to the first of
    ``fixed_sizes`` they fit in and the targets become one :class:`TargetBatch` of ``max_gt`` slots per image,
    built here, in the loader worker, so the training process only copies it."""

    def __init__(self, size_divisible=0, fixed_sizes=(), max_gt=0):
        self.size_divisible = size_divisible
        self.fixed_sizes = tuple(fixed_sizes or ())
        self.max_gt = max_gt

    def __call__(self, batch):
        images, targets, ids = zip(*batch)
        if self.max_gt:
            targets = TargetBatch.from_boxlists(list(targets), max_gt=self.max_gt)
        if isinstance(images[0], RawImage):
            return RawImageBatch.from_raw(images), targets, ids
        return to_image_list(images, self.size_divisible, self.fixed_sizes), targets, ids
