import math

import torch
from torch import nn

from ..layers import ROIAlign
from ..layers.roi_align import multilevel_roi_align
from ..structures.bounding_box import TO_REMOVE


class LevelMapper:
    """FPN level of each ROI (Feature Pyramid Networks, eq. 1), as in the reference.

    ``level = floor(4 + log2(sqrt(area) / 224 + 1e-6))`` with the "+1" area, clamped to the available levels.
    A box whose "+1" area is negative (an inverted box) has no level: -1 (the reference pools nothing for it,
    its features stay zero).
    """

    def __init__(self, k_min, k_max, canonical_scale=224, canonical_level=4, eps=1e-6):
        self.k_min, self.k_max = k_min, k_max
        self.s0, self.lvl0, self.eps = canonical_scale, canonical_level, eps

    def __call__(self, boxes):
        area = (boxes[:, 2] - boxes[:, 0] + TO_REMOVE) * (boxes[:, 3] - boxes[:, 1] + TO_REMOVE)
        target = torch.floor(self.lvl0 + torch.log2(area.sqrt() / self.s0 + self.eps))
        level = (target.clamp(self.k_min, self.k_max) - self.k_min).nan_to_num(-1.0)
        return level.to(torch.int64)


class Pooler(nn.Module):
    """Multi-level ROIAlign: each ROI is pooled from its FPN level.

    One op for all levels (:func:`~maskrcnn_benchmark.layers.roi_align.multilevel_roi_align`): inside, on the CPU
    sparse products over every level, on CUDA torchvision's kernel per level with each ROI's own level selected;
    outside, its output shape is fixed, so a compiled step sees one node, not a graph break per level.
    """

    def __init__(self, output_size, scales, sampling_ratio):
        super().__init__()
        self.output_size = output_size if isinstance(output_size, (tuple, list)) else (output_size, output_size)
        self.scales = [float(s) for s in scales]
        self.sampling_ratio = int(sampling_ratio)
        self.poolers = nn.ModuleList(ROIAlign(self.output_size, s, sampling_ratio) for s in scales)
        lvl_min = -math.log2(scales[0])
        lvl_max = -math.log2(scales[-1])
        self.map_levels = LevelMapper(int(round(lvl_min)), int(round(lvl_max)))

    def forward(self, features, rois):
        """``features``: list of ``(N, C, H, W)`` maps; ``rois``: ``(K, 5)`` (batch index, x1, y1, x2, y2)."""
        if len(self.poolers) == 1:
            return self.poolers[0](features[0], rois)
        if self.output_size[0] != self.output_size[1]:
            raise ValueError("the multi-level pooler needs a square output size")
        levels = self.map_levels(rois[:, 1:])
        out = multilevel_roi_align(list(features[: len(self.poolers)]), rois, levels, self.output_size[0],
                                   self.scales, self.sampling_ratio)
        return out.to(features[0].dtype)
