"""Non-maximum suppression with the MLPerf reference's semantics, on torchvision's kernel.

* "+1" IoU: the reference computes areas as ``(x2 - x1 + 1) * (y2 - y1 + 1)`` and intersections with the same
  ``+1``; torchvision without it. Shifting ``x2, y2`` by +1 turns one into the other.
* The reference's CUDA kernel (what MLPerf runs) suppresses at ``IoU > threshold`` with a float32 threshold and
  returns the kept boxes in decreasing score order. torchvision compares its float32 IoU with a *double*
  threshold, so an IoU that rounds to exactly ``float32(0.3)`` (> 0.3 in double) would be suppressed; we pass
  the threshold already rounded to float32. (The reference's CPU kernel suppresses at ``>=``.)
* Batched NMS runs the kernel on each group's own coordinates, as the reference does per image/level/class.
  torchvision's batched NMS offsets the boxes of each group by ``group * (max + 1)``, which rounds float32
  coordinates (by up to ~0.004 px at COCO scale) and can flip near-threshold decisions.
"""
import torch
from torchvision.ops import nms as _tv_nms

from .op_tags import HOST_SYNC


def _legacy(boxes):
    return torch.cat((boxes[:, :2], boxes[:, 2:] + 1), dim=1)


def _threshold(iou_threshold):
    return float(torch.tensor(iou_threshold, dtype=torch.float32))


def nms(boxes, scores, iou_threshold):
    """Indices of the kept boxes, sorted by decreasing score ("+1" IoU, suppression at IoU > threshold)."""
    return _tv_nms(_legacy(boxes.float()), scores.float(), _threshold(iou_threshold))


def batched_nms(boxes, scores, idxs, iou_threshold):
    """NMS within each value of ``idxs`` (image, level or class); kept indices by decreasing score."""
    if boxes.numel() == 0:
        return torch.zeros((0,), dtype=torch.int64, device=boxes.device)
    legacy = _legacy(boxes.float())
    scores = scores.float()
    order = torch.sort(idxs, stable=True).indices
    counts = torch.unique_consecutive(idxs[order], return_counts=True)[1].tolist()
    thr = _threshold(iou_threshold)
    kept = []
    for members in order.split(counts):
        kept.append(members[_tv_nms(legacy[members], scores[members], thr)])
    keep = torch.cat(kept)
    return keep[torch.sort(scores[keep], descending=True, stable=True).indices]


@torch.library.custom_op("maskrcnn::batched_nms_keep", mutates_args=(), tags=HOST_SYNC)
def batched_nms_keep(boxes: torch.Tensor, scores: torch.Tensor, idxs: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """:func:`batched_nms` as a mask: ``keep (M,) bool``. The kept set is data-dependent but the output has the
    input's length, so ``torch.compile`` traces it as one opaque op with a static shape (no graph break); inside,
    it runs eagerly. Candidates with score ``-inf`` come last in every group, so they suppress no real box."""
    keep = torch.zeros(boxes.shape[0], dtype=torch.bool, device=boxes.device)
    if boxes.shape[0]:
        keep[batched_nms(boxes, scores, idxs, iou_threshold)] = True
    return keep


@batched_nms_keep.register_fake
def _(boxes, scores, idxs, iou_threshold):
    return boxes.new_empty((boxes.shape[0],), dtype=torch.bool)
