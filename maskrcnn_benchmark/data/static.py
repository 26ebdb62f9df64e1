"""Batches of fixed shapes for a compiled training step (``COMPILE``)."""
import torch

from ..structures.bounding_box import BoxList
from ..structures.image_list import to_image_list
from ..structures.segmentation_mask import SegmentationMask
from ..structures.target_batch import TargetBatch


def static_sizes(cfg):
    """The fixed image sizes of a compiled training step: every training image fits one of two padded shapes,
    landscape ``(S, L)`` and portrait ``(L, S)``, ``S`` the largest of INPUT.MIN_SIZE_TRAIN and ``L``
    INPUT.MAX_SIZE_TRAIN, both rounded up to DATALOADER.SIZE_DIVISIBILITY (COCO: 800x1344 and 1344x800, NVIDIA's
    shapes). Padding to them is a larger SIZE_DIVISIBILITY: zeros are added, no image pixel changes."""
    d = cfg.DATALOADER.SIZE_DIVISIBILITY or 1
    long_side = cfg.INPUT.MAX_SIZE_TRAIN
    short_side = min(max(cfg.INPUT.MIN_SIZE_TRAIN), long_side)
    s, l_ = -(-short_side // d) * d, -(-long_side // d) * d
    return tuple(dict.fromkeys(((s, l_), (l_, s))))  # one size when square


def warm_up_batch(n, height, width, max_gt, device):
    """``(ImageList, TargetBatch)`` of ``n`` zero images of ``height x width`` with one square object each: what
    the compiler needs to see the shapes of a real batch, without touching the dataset."""
    images = to_image_list(torch.zeros((n, 3, height, width), device=device))
    targets = []
    for _ in range(n):
        t = BoxList(torch.tensor([[8.0, 8.0, 72.0, 72.0]]), (width, height))
        t.add_field("labels", torch.ones(1, dtype=torch.int64))
        t.add_field("masks", SegmentationMask([[[8, 8, 72, 8, 72, 72, 8, 72]]], (width, height)))
        targets.append(t)
    return images, TargetBatch.from_boxlists(targets, max_gt=max_gt).to(device)
