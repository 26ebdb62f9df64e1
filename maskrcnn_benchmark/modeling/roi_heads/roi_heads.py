"""The ROI heads: ``roi_heads.box`` and ``roi_heads.mask`` (the reference's CombinedROIHeads and names)."""
from torch import nn

from .box_head import build_roi_box_head
from .mask_head import build_roi_mask_head


class CombinedROIHeads(nn.Module):
    def __init__(self, cfg, in_channels):
        super().__init__()
        self.box = build_roi_box_head(cfg, in_channels)
        self.mask_on = cfg.MODEL.MASK_ON
        if self.mask_on:
            self.mask = build_roi_mask_head(cfg, in_channels)

    def forward(self, features, proposals, targets=None):
        """Training (``targets`` a :class:`TargetBatch`): ``(x, samples, losses)``; eval: ``(x, detections, {})``
        with ``mask`` fields."""
        x, result, losses = self.box(features, proposals, targets)
        if self.mask_on:
            losses = {**losses, **self.mask(features, result, targets)}
        return x, result, losses


def build_roi_heads(cfg, in_channels):
    return CombinedROIHeads(cfg, in_channels)
