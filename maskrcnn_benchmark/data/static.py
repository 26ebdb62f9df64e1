"""Batches of fixed shapes for a compiled training step (``COMPILE``)."""
import math

import torch

from ..structures.bounding_box import BoxList
from ..structures.segmentation_mask import SegmentationMask
from .collate_batch import BatchCollator
from .shapes import POLYGON_SLOTS


def static_sizes(cfg, images_per_gpu=None):
    """The fixed image sizes of a compiled training step, smallest first in each orientation (a batch is padded to
    the first it fits in): landscape ``(S, L_k)`` and portrait ``(L_k, S)``, ``S`` the largest of
    INPUT.MIN_SIZE_TRAIN, the long sides ``L_k`` DATALOADER.STATIC_SHAPES_PER_ORIENTATION widths evenly from the
    4:3 size to INPUT.MAX_SIZE_TRAIN, all rounded up to DATALOADER.SIZE_DIVISIBILITY. COCO with 3 per orientation:
    800x1088, 800x1216, 800x1344 and the portrait ones; a 4:3 image (most of COCO) is padded to 800x1088 instead of
    800x1344 (NVIDIA's padding to a few shapes per orientation). Padding to them is a larger SIZE_DIVISIBILITY:
    zeros are added, no image pixel changes. Without DATALOADER.ASPECT_RATIO_GROUPING a batch may mix orientations:
    the square ``(L, L)`` of the largest long side comes last, so such a batch too has a fixed size (else it
    padded to a size of its own: one more compile, and past dynamo's recompile limit the eager step). With
    ``images_per_gpu`` 1 no batch mixes orientations, and the square, the largest size to warm up, is left out."""
    d = cfg.DATALOADER.SIZE_DIVISIBILITY or 1
    up = lambda v: -(-int(math.ceil(v)) // d) * d  # noqa: E731
    long_side = cfg.INPUT.MAX_SIZE_TRAIN
    short_side = min(max(cfg.INPUT.MIN_SIZE_TRAIN), long_side)
    s, l_ = up(short_side), up(long_side)
    k = max(1, int(cfg.DATALOADER.STATIC_SHAPES_PER_ORIENTATION))
    low = min(up(short_side * 4 / 3), l_)
    longs = sorted({up(low + i * (l_ - low) / (k - 1)) if k > 1 else l_ for i in range(k)} | {l_})
    longs = [v for v in longs if v >= s] or [s]
    mixes = not cfg.DATALOADER.ASPECT_RATIO_GROUPING and (images_per_gpu is None or images_per_gpu > 1)
    mixed = [(longs[-1], longs[-1])] if mixes else []
    return tuple(dict.fromkeys([(s, v) for v in longs] + [(v, s) for v in longs] + mixed))  # one size when square


def warm_up_batch(n, height, width, max_gt, device, polygon_slots=POLYGON_SLOTS):
    """``(ImageList, TargetBatch)`` of ``n`` zero images of ``height x width`` with one square object each: what
    the compiler needs to see the shapes of a real batch, without touching the dataset. Made by the loader's
    collator, as a real batch is: its polygons padded to ``polygon_slots``, the shape of every batch whose
    polygons fit in them."""
    targets = []
    for _ in range(n):
        t = BoxList(torch.tensor([[8.0, 8.0, 72.0, 72.0]]), (width, height))
        t.add_field("labels", torch.ones(1, dtype=torch.int64))
        t.add_field("masks", SegmentationMask([[[8, 8, 72, 8, 72, 72, 8, 72]]], (width, height)))
        targets.append(t)
    collate = BatchCollator(0, ((height, width),), max_gt, polygon_slots).collate
    images, targets = collate([torch.zeros((3, height, width))] * n, targets)
    return images.to(device), targets.to(device)
