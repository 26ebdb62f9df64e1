from ..structures.image_list import to_image_list


class BatchCollator:
    """Pads the images of a batch into one ImageList (multiple of ``size_divisible``)."""

    def __init__(self, size_divisible=0):
        self.size_divisible = size_divisible

    def __call__(self, batch):
        images, targets, ids = zip(*batch)
        return to_image_list(images, self.size_divisible), targets, ids
