"""Non-maximum suppression with the MLPerf reference's semantics, on torchvision's kernel.

* "+1" IoU: the reference computes areas as ``(x2 - x1 + 1) * (y2 - y1 + 1)`` and intersections with the same
  ``+1``; torchvision without it. Shifting ``x2, y2`` by +1 turns one into the other, but for the rounding of
  ``x2 + 1``: an IoU within one float32 step of the threshold can fall on the other side (the device NMS below
  computes in the reference's order).
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
  across all groups elsewhere. The reference kernel's float32 IoU arithmetic in its order, and torchvision's
  processing order (decreasing score, ties in the order given: its stable sort), so the kept sets are those of
  :func:`batched_nms` but where a pair's IoU lies within one float32 step of the threshold, decided there as the
  reference decides (tests/layers/test_nms_device.py).
"""
import os
import struct
import sys

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


def _pairwise_iou_plus1(a, b):
    """``(G, R, K)`` "+1" IoU between ``a (G, R, 4)`` and ``b (G, K, 4)``: the float32 operations of the reference's
    kernels (maskrcnn-benchmark's nms.cu ``devIoU``; nms_cpu.cpp alike), in their order: ``(right - left) + 1``,
    ``((x2 - x1) + 1) * ((y2 - y1) + 1)``, ``inter / ((area_a + area_b) - inter)``. (torchvision's formula on boxes
    shifted by +1 rounds ``x2 + 1`` first: within a float32 step of the threshold a pair can fall on the other
    side.)"""
    ax1, ay1, ax2, ay2 = (c.contiguous()[:, :, None] for c in a.unbind(-1))  # contiguous planes: the broadcasts
    bx1, by1, bx2, by2 = (c.contiguous()[:, None, :] for c in b.unbind(-1))  # below vectorize
    area_a = (ax2 - ax1 + 1) * (ay2 - ay1 + 1)
    area_b = (bx2 - bx1 + 1) * (by2 - by1 + 1)
    # the (G, R, K) intermediates computed in place: a fresh tensor of that size costs more than the arithmetic
    inter = torch.minimum(ax2, bx2).sub_(torch.maximum(ax1, bx1)).add_(1).clamp_(min=0).mul_(
        torch.minimum(ay2, by2).sub_(torch.maximum(ay1, by1)).add_(1).clamp_(min=0))
    return inter.div_((area_a + area_b).sub_(inter))


def suppression_bitmask(boxes, iou_threshold, block=64):
    """``(G, K, W)`` int64, ``W = ceil(K / 64)``: bit ``j % 64`` of word ``j // 64`` of row ``i`` is set when box ``j``
    (``j`` in a word at or after ``i``'s: the scan only ever reads those) has a "+1" IoU above ``iou_threshold``
    with box ``i`` (same group). Computed ``block`` rows at a time (a multiple of 64), each against the columns
    from its own word on: half the pairs."""
    g, k, _ = boxes.shape
    w = max(1, -(-k // _WORD))
    padded = torch.nn.functional.pad(boxes.float(), (0, 0, 0, w * _WORD - k))  # padding: zero boxes, bits cut below
    thr = _threshold(iou_threshold)
    out = torch.zeros((g, k, w), dtype=torch.int64, device=boxes.device)
    for r0 in range(0, k, block):
        rows = min(block, k - r0)
        over = _pairwise_iou_plus1(padded[:, r0:r0 + rows], padded[:, r0:]) > thr  # NaN (zero-area): False
        over[..., k - r0:] = False
        out[:, r0:r0 + rows, r0 // _WORD:] = _pack_bits(over)
    return out


def _pack_bits(flags):
    """``(..., 64 n)`` bool -> ``(..., n)`` int64 words, flag ``j`` as bit ``j % 64`` of word ``j // 64``: packed
    eight to a byte, the bytes read as little-endian words (an eighth of the memory traffic of int64 shifts)."""
    shifts = torch.arange(8, device=flags.device, dtype=torch.uint8)
    packed = (flags.reshape(*flags.shape[:-1], -1, 8).view(torch.uint8) << shifts).sum(-1, dtype=torch.uint8)
    return packed.view(torch.int64)  # distinct bits: their sum is their OR


assert sys.byteorder == "little", "_pack_bits reads bytes as little-endian words"


def _bits_after_each_box(k, w, device):
    """``(K, W)`` int64: row ``i`` has the bits of the boxes after ``i`` (bit ``j % 64`` of word ``j // 64``, j > i)."""
    return _pack_bits(torch.arange(w * _WORD, device=device) > torch.arange(k, device=device)[:, None])


def _scan_torch(mask, valid):
    """The sequential scan of every group at once, one box at a time (tensor ops only: no sync; counted with the op).

    ``alive`` holds, as the mask's words, the valid boxes that no kept box before them suppresses: box ``i``'s bit
    is final when the scan reaches it (only boxes before it clear it), and a kept box clears the bits of the boxes
    after it that it suppresses. At the end ``alive`` is the keep set. Five tensor ops per box."""
    g, k, w = mask.shape
    shifts = torch.arange(_WORD, device=mask.device, dtype=torch.int64)
    alive = _pack_bits(torch.nn.functional.pad(valid, (0, w * _WORD - k)))
    later = mask & _bits_after_each_box(k, w, mask.device)  # (G, K, W): box i suppresses only boxes after it
    for i in range(k):
        word, bit = divmod(i, _WORD)
        kept = (alive[:, word:word + 1] >> bit) & 1  # (G, 1): 1 when box i is kept
        alive &= ~(later[:, i] * kept)
    return ((alive[..., None] >> shifts) & 1).view(g, w * _WORD)[:, :k].bool()


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
    sync (counted, tests/layers/test_custom_ops_sync_free.py: 0), fixed shapes (a compiled step's NMS)."""
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


def batched_nms_padded(boxes, scores, idxs, iou_threshold):
    """:func:`batched_nms`'s result (the kept indices by decreasing score; the same kept set, tests/layers/
    test_nms_device.py) from one :func:`nms_keep_padded` over all groups laid out as padded rows: three host waits
    per call (the groups' sizes, the largest to pad to, the kept count; counted by tests/layers/test_nms_device.py),
    whatever the number of groups, where :func:`batched_nms` waits once per group on a GPU (inference: once per
    image and class)."""
    n = boxes.shape[0]
    if n == 0:
        return torch.zeros((0,), dtype=torch.int64, device=boxes.device)
    order = torch.sort(idxs, stable=True).indices  # group after group, each in its given order
    counts = torch.unique_consecutive(idxs[order], return_counts=True)[1]  # a wait: its size is the data's
    g, k = counts.numel(), int(counts.max())  # a wait: the padded shape
    group = torch.repeat_interleave(torch.arange(g, device=boxes.device), counts, output_size=n)
    position = torch.arange(n, device=boxes.device) - (torch.cumsum(counts, 0) - counts)[group]
    padded_boxes = boxes.new_zeros((g, k, 4), dtype=torch.float32)
    padded_scores = scores.new_zeros((g, k), dtype=torch.float32)
    valid = torch.zeros((g, k), dtype=torch.bool, device=boxes.device)
    padded_boxes[group, position] = boxes[order].float()
    padded_scores[group, position] = scores[order].float()
    valid[group, position] = True
    keep = nms_keep_padded(padded_boxes, padded_scores, valid, float(iou_threshold))
    kept = order[keep[group, position]]  # a wait: how many are kept
    return kept[torch.sort(scores[kept], descending=True, stable=True).indices]
