import math

import torch

from ..structures.bounding_box import TO_REMOVE


class BoxCoder:
    """Encodes boxes as ``(dx, dy, dw, dh)`` deltas relative to reference boxes, and decodes them back.

    Reference numerics: widths are ``x2 - x1 + 1``, centres ``x1 + 0.5 * w``, decoded ``x2 = ctr + 0.5 w - 1``;
    ``dw``/``dh`` are clamped at ``log(1000 / 16)`` before ``exp``. Works on any leading shape ``(..., 4)``.
    """

    def __init__(self, weights, bbox_xform_clip=math.log(1000.0 / 16)):
        self.weights = tuple(float(w) for w in weights)
        self.bbox_xform_clip = bbox_xform_clip

    def encode(self, reference_boxes, proposals):
        """Deltas that turn ``proposals`` into ``reference_boxes`` (the targets)."""
        ex_w = proposals[..., 2] - proposals[..., 0] + TO_REMOVE
        ex_h = proposals[..., 3] - proposals[..., 1] + TO_REMOVE
        ex_x = proposals[..., 0] + 0.5 * ex_w
        ex_y = proposals[..., 1] + 0.5 * ex_h
        gt_w = reference_boxes[..., 2] - reference_boxes[..., 0] + TO_REMOVE
        gt_h = reference_boxes[..., 3] - reference_boxes[..., 1] + TO_REMOVE
        gt_x = reference_boxes[..., 0] + 0.5 * gt_w
        gt_y = reference_boxes[..., 1] + 0.5 * gt_h
        wx, wy, ww, wh = self.weights
        return torch.stack((
            wx * (gt_x - ex_x) / ex_w,
            wy * (gt_y - ex_y) / ex_h,
            ww * torch.log(gt_w / ex_w),
            wh * torch.log(gt_h / ex_h),
        ), dim=-1)

    def decode(self, rel_codes, boxes):
        """Apply deltas ``rel_codes`` (``(..., 4k)``, k classes) to ``boxes`` (``(..., 4)``)."""
        boxes = boxes.to(rel_codes.dtype)
        widths = (boxes[..., 2] - boxes[..., 0] + TO_REMOVE)[..., None]
        heights = (boxes[..., 3] - boxes[..., 1] + TO_REMOVE)[..., None]
        ctr_x = boxes[..., 0, None] + 0.5 * widths
        ctr_y = boxes[..., 1, None] + 0.5 * heights
        wx, wy, ww, wh = self.weights
        dx = rel_codes[..., 0::4] / wx
        dy = rel_codes[..., 1::4] / wy
        dw = (rel_codes[..., 2::4] / ww).clamp(max=self.bbox_xform_clip)
        dh = (rel_codes[..., 3::4] / wh).clamp(max=self.bbox_xform_clip)
        pred_ctr_x = dx * widths + ctr_x
        pred_ctr_y = dy * heights + ctr_y
        pred_w = torch.exp(dw) * widths
        pred_h = torch.exp(dh) * heights
        out = torch.stack((
            pred_ctr_x - 0.5 * pred_w,
            pred_ctr_y - 0.5 * pred_h,
            pred_ctr_x + 0.5 * pred_w - 1,
            pred_ctr_y + 0.5 * pred_h - 1,
        ), dim=-1)
        return out.flatten(-2)
