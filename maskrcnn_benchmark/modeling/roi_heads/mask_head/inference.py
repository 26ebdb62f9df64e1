"""Mask inference: paste the M x M mask probabilities of the detections into their images (the reference's
``Masker``, on :func:`~maskrcnn_benchmark.layers.paste_masks_in_image`)."""
from ....layers.mask_paste import expand_boxes, paste_masks_in_image

__all__ = ["Masker", "expand_boxes"]


class Masker:
    """Pastes ``(D, 1, M, M)`` mask probabilities into ``(D, 1, H, W)`` bool image masks, all detections at once,
    with the reference's geometry (see :mod:`maskrcnn_benchmark.layers.mask_paste`)."""

    def __init__(self, threshold=0.5, padding=1):
        self.threshold = threshold
        self.padding = padding

    def paste(self, masks, boxes, height, width):
        return paste_masks_in_image(masks, boxes, height, width, self.threshold, self.padding)

    def __call__(self, masks, boxlists):
        """Paste the ``"mask"`` field of each BoxList (resized to its image) into its image size."""
        return [self.paste(m, b.convert("xyxy").bbox, b.size[1], b.size[0]) for m, b in zip(masks, boxlists)]
