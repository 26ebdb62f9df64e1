from ..structures.image_list import RawImage, RawImageBatch, to_image_list


class BatchCollator:
    """Pads the images of a batch into one ImageList (multiple of ``size_divisible``), or, on the hybrid path
    (decoded ``uint8`` :class:`RawImage` s), into one :class:`RawImageBatch` for the device to transform."""

    def __init__(self, size_divisible=0):
        self.size_divisible = size_divisible

    def __call__(self, batch):
        images, targets, ids = zip(*batch)
        if isinstance(images[0], RawImage):
            return RawImageBatch.from_raw(images), targets, ids
        return to_image_list(images, self.size_divisible), targets, ids
