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

Two forms:

* :func:`nms` / :func:`batched_nms` (inference, the reference's API): torchvision's kernel, whose result has a
  data-dependent length (its CUDA kernel finishes on the host).
* :func:`nms_keep_padded` (the training step): groups laid out as ``(G, K)`` padded rows, the result a keep mask of
  the same shape, computed on the device with no host sync: the "+1" IoU of every pair of a group as a bitmask
  (the CUDA kernel's layout, 64 boxes per word), then the sequential scan over each group (keep a box unless a kept
  box before it suppresses it), in a Triton kernel on CUDA (one program per group) and in a loop of tensor ops
  across all groups elsewhere. The same float32 IoU arithmetic as torchvision's kernels and the same processing
  order (decreasing score, ties in the order given: torchvision's stable sort), so the kept sets are identical
  (tests/layers/test_nms_device.py, with :func:`batched_nms` as the oracle).
"""
import os
import struct

import torch
from torchvision.ops import nms as _tv_nms



def _legacy(boxes):
    return torch.cat((boxes[:, :2], boxes[:, 2:] + 1), dim=1)


def _threshold(iou_threshold):
    """The threshold rounded to float32 (as the CUDA kernel holds it), in Python: no tensor, nothing to read."""
    return struct.unpack("f", struct.pack("f", float(iou_threshold)))[0]


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


# ------------------------------------------------------------------------------------------ device NMS (no sync)
_WORD = 64


def _pairwise_iou_legacy(a, b):
    """``(G, R, K)`` "+1" IoU between ``a (G, R, 4)`` and ``b (G, K, 4)``, both already legacy (x2 + 1): the float32
    operations of torchvision's kernels, in their order."""
    area_a = (a[..., 2] - a[..., 0]) * (a[..., 3] - a[..., 1])
    area_b = (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])
    xx1 = torch.maximum(a[:, :, None, 0], b[:, None, :, 0])
    yy1 = torch.maximum(a[:, :, None, 1], b[:, None, :, 1])
    xx2 = torch.minimum(a[:, :, None, 2], b[:, None, :, 2])
    yy2 = torch.minimum(a[:, :, None, 3], b[:, None, :, 3])
    inter = (xx2 - xx1).clamp(min=0) * (yy2 - yy1).clamp(min=0)
    return inter / (area_a[:, :, None] + area_b[:, None, :] - inter)


def suppression_bitmask(boxes, iou_threshold, block=64):
    """``(G, K, W)`` int64, ``W = ceil(K / 64)``: bit ``j % 64`` of word ``j // 64`` of row ``i`` is set when box ``j``
    (``j`` in a word at or after ``i``'s: the scan only ever reads those) has a "+1" IoU above ``iou_threshold``
    with box ``i`` (same group). Computed ``block`` rows at a time (a multiple of 64), each against the columns
    from its own word on: half the pairs."""
    g, k, _ = boxes.shape
    w = max(1, -(-k // _WORD))
    legacy = _legacy(boxes.reshape(-1, 4).float()).view(g, k, 4)
    legacy = torch.nn.functional.pad(legacy, (0, 0, 0, w * _WORD - k))  # padding: zero boxes, bits cut below
    thr = _threshold(iou_threshold)
    shifts = torch.arange(_WORD, device=boxes.device, dtype=torch.int64)
    out = torch.zeros((g, k, w), dtype=torch.int64, device=boxes.device)
    for r0 in range(0, k, block):
        rows = min(block, k - r0)
        over = _pairwise_iou_legacy(legacy[:, r0:r0 + rows], legacy[:, r0:]) > thr  # NaN (zero-area): False
        over[..., k - r0:] = False
        packed = (over.view(g, rows, -1, _WORD).to(torch.int64) << shifts).sum(-1)  # distinct bits: their OR
        out[:, r0:r0 + rows, r0 // _WORD:] = packed
    return out


def _scan_torch(mask, valid):
    """The sequential scan of every group at once, one box at a time (tensor ops only: no sync)."""
    g, k, w = mask.shape
    removed = torch.zeros((g, w), dtype=torch.int64, device=mask.device)
    keep = torch.zeros((g, k), dtype=torch.bool, device=mask.device)
    for i in range(k):
        word, bit = divmod(i, _WORD)
        free = ((removed[:, word] >> bit) & 1) == 0
        kept = valid[:, i] & free
        keep[:, i] = kept
        removed |= mask[:, i] * kept[:, None].to(torch.int64)
    return keep


def _scan_kernel():
    """The Triton kernel (layers/nms_triton.py), imported on first use."""
    from . import nms_triton

    return nms_triton.scan_kernel


def scan_triton(mask, valid):
    """:func:`_scan_torch` in one Triton program per group."""
    g, k, w = mask.shape
    keep = torch.zeros((g, k), dtype=torch.int8, device=mask.device)
    if g and k:
        block = 1 << max(int(w) - 1, 0).bit_length()
        _scan_kernel()[(g,)](mask.contiguous(), valid.contiguous().to(torch.int8), keep, k, w, BLOCK_W=block)
    return keep.bool()


def _use_triton(device):
    if device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        return False
    try:
        import triton  # noqa: F401
        return True
    except ImportError:
        return False


@torch.library.custom_op("maskrcnn::nms_keep_padded", mutates_args=())
def nms_keep_padded(boxes: torch.Tensor, scores: torch.Tensor, valid: torch.Tensor,
                    iou_threshold: float) -> torch.Tensor:
    """Keep mask ``(G, K)`` of NMS within each row of ``boxes (G, K, 4)`` (xyxy), ``scores (G, K)``, ``valid
    (G, K)``: the reference's "+1" IoU and float32 threshold, suppression at IoU > threshold, boxes processed by
    decreasing score (equal scores in row order); invalid entries are never kept and suppress nothing. No host
    sync, fixed shapes (a compiled step's NMS)."""
    g, k = scores.shape
    if g == 0 or k == 0:
        return torch.zeros((g, k), dtype=torch.bool, device=scores.device)
    order = torch.sort(scores.float().masked_fill(~valid, float("-inf")), dim=1, descending=True,
                       stable=True).indices
    sorted_boxes = boxes.gather(1, order[..., None].expand(-1, -1, 4))
    sorted_valid = valid.gather(1, order)
    mask = suppression_bitmask(sorted_boxes, iou_threshold)
    keep_sorted = scan_triton(mask, sorted_valid) if _use_triton(mask.device) else _scan_torch(mask, sorted_valid)
    return torch.zeros_like(keep_sorted).scatter(1, order, keep_sorted)


@nms_keep_padded.register_fake
def _(boxes, scores, valid, iou_threshold):
    return scores.new_empty(scores.shape, dtype=torch.bool)
