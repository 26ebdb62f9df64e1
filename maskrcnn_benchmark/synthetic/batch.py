"""One synthetic training batch in memory, for the benchmarks and counters in bench/ (no files, no decoding).

:func:`synthetic_batch` gives ``batch`` random images of ``height x width`` with ``objects`` elliptical objects
each (12-vertex polygons), as the three inputs a step needs: the image tensors, per-image BoxList targets (what
the data loader's collator takes: ``BatchCollator.collate``) and torchvision's target dicts (for comparing with
its Mask R-CNN).
"""
import math

import torch

from ..structures.bounding_box import BoxList
from ..structures.segmentation_mask import SegmentationMask


def synthetic_batch(batch, height, width, num_classes, objects=6, seed=0):
    """``(images [(3, H, W)], targets [BoxList], torchvision_targets [dict])``, deterministic in ``seed``."""
    g = torch.Generator().manual_seed(seed)
    images, targets, tv_targets = [], [], []
    for _ in range(batch):
        images.append(torch.randn(3, height, width, generator=g) * 50)
        xy = torch.rand(objects, 2, generator=g) * torch.tensor([width * 0.7, height * 0.7])
        wh = torch.rand(objects, 2, generator=g) * torch.tensor([width * 0.3, height * 0.3]) + 16
        boxes = torch.cat((xy, xy + wh), 1)
        labels = torch.randint(1, num_classes, (objects,), generator=g)
        polys = []
        for (x1, y1, x2, y2) in boxes.tolist():
            cx, cy, rx, ry = (x1 + x2) / 2, (y1 + y2) / 2, (x2 - x1) / 2, (y2 - y1) / 2
            polys.append([[v for k in range(12) for v in (cx + rx * math.cos(k * math.pi / 6),
                                                          cy + ry * math.sin(k * math.pi / 6))]])
        t = BoxList(boxes, (width, height))
        t.add_field("labels", labels)
        t.add_field("masks", SegmentationMask(polys, (width, height)))
        targets.append(t)
        tv_targets.append({"boxes": boxes, "labels": labels, "masks": t.get_field("masks").get_mask_tensor()})
    return images, targets, tv_targets

