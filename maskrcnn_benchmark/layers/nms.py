"""Non-maximum suppression with the legacy "+1" IoU of maskrcnn-benchmark, on torchvision's kernels.

torchvision computes box areas as ``(x2 - x1) * (y2 - y1)``; the reference uses ``(x2 - x1 + 1) * (y2 - y1 + 1)``
and an intersection width ``min(x2) - max(x1) + 1``. Shifting ``x2, y2`` by +1 turns one into the other exactly,
so the legacy IoU costs one add and no kernel of our own.
"""
import torch
from torchvision.ops import batched_nms as _tv_batched_nms
from torchvision.ops import nms as _tv_nms


def _legacy(boxes):
    return torch.cat((boxes[:, :2], boxes[:, 2:] + 1), dim=1)


def nms(boxes, scores, iou_threshold):
    """Indices of the kept boxes, sorted by decreasing score ("+1" IoU)."""
    return _tv_nms(_legacy(boxes.float()), scores.float(), iou_threshold)


def batched_nms(boxes, scores, idxs, iou_threshold):
    """NMS applied independently within each value of ``idxs`` (image, level or class), "+1" IoU."""
    return _tv_batched_nms(_legacy(boxes.float()), scores.float(), idxs, iou_threshold)
