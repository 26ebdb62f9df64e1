"""Mask targets and loss, with the MLPerf reference's numerics.

Targets come from the ground-truth polygons exactly as the reference computes them per ROI
(``segmentation_mask.crop(box).resize((M, M)).convert("mask")``, which ends in pycocotools), but for every
positive ROI of the batch at once on the ROIs' device (:func:`~maskrcnn_benchmark.layers.rasterize_polygons`).

Crop conventions (``convention``):

* ``"legacy_2018"`` (default; NVIDIA's MLPerf v0.7 code and the 2018 reference): polygon points are shifted by
  the raw proposal corner and scaled by ``M / max(x2 - x1, 1)`` and ``M / max(y2 - y1, 1)``.
* ``"current"`` (maskrcnn-benchmark HEAD): shifted by the corner clamped to the image, scaled by ``M / (x2 - x1)``
  without the ``max(., 1)``.

The arithmetic is the reference's: float32 subtraction and multiplication, the scale computed in double
(``float(M) / float(w)``) and rounded to float32 by the multiplication.
"""
from typing import Optional

import torch
import torch.nn.functional as F

from ....layers import rasterize_polygons, roi_align
from ....layers.op_tags import HOST_SYNC

LEGACY_2018 = "legacy_2018"
CURRENT = "current"


def _expand_ranges(starts, lengths, total):
    """Concatenated ``range(starts[i], starts[i] + lengths[i])`` and, for each element, its range index."""
    owner = torch.repeat_interleave(torch.arange(lengths.numel(), device=lengths.device), lengths,
                                    output_size=total)
    offsets = torch.cumsum(lengths, 0) - lengths
    return starts[owner] + torch.arange(total, device=lengths.device) - offsets[owner], owner


def polygon_mask_targets(packed, roi_instance, boxes, resolution, image_widths_heights=None,
                         convention=LEGACY_2018):
    """``(K, M, M)`` bool mask targets of K ROIs from packed polygons.

    ``packed`` = ``(vertices (V, 2), part_lengths (P,), part_instance (P,))`` with the parts of each instance
    contiguous and instances in increasing order (:meth:`SegmentationMask.packed_polygons`, concatenated over
    images); ``roi_instance`` ``(K,)`` the instance of each ROI; ``boxes`` ``(K, 4)`` the ROIs (xyxy, float32);
    ``image_widths_heights`` ``(K, 2)`` the image size of each ROI (needed by the ``"current"`` convention).

    One opaque op for ``torch.compile`` (``maskrcnn::polygon_mask_targets``): the work per ROI depends on its
    polygons, the output shape does not.
    """
    if convention not in (LEGACY_2018, CURRENT):
        raise ValueError(f"unknown mask target convention {convention!r}")
    if convention == CURRENT and image_widths_heights is None:
        raise ValueError("the 'current' crop convention needs the image sizes")
    device = boxes.device
    vertices, part_lengths, part_instance = (t.to(device) for t in packed)
    sizes = None if image_widths_heights is None else image_widths_heights.to(device)
    return _polygon_mask_targets(vertices, part_lengths, part_instance, roi_instance.to(device), boxes,
                                 int(resolution), sizes, convention)


@torch.library.custom_op("maskrcnn::polygon_mask_targets", mutates_args=(), tags=HOST_SYNC)
def _polygon_mask_targets(vertices: torch.Tensor, part_lengths: torch.Tensor, part_instance: torch.Tensor,
                          roi_instance: torch.Tensor, boxes: torch.Tensor, resolution: int,
                          image_widths_heights: Optional[torch.Tensor], convention: str) -> torch.Tensor:
    device = boxes.device
    m = int(resolution)
    k = boxes.shape[0]
    if k == 0:
        return torch.zeros((0, m, m), dtype=torch.bool, device=device)
    num_instances = int(roi_instance.max().item()) + 1 if roi_instance.numel() else 0
    num_instances = max(num_instances, int(part_instance.max().item()) + 1 if part_instance.numel() else 0)
    parts_per_instance = torch.bincount(part_instance, minlength=num_instances)
    first_part = torch.cumsum(parts_per_instance, 0) - parts_per_instance
    n_parts = parts_per_instance[roi_instance]
    part_ids, part_roi = _expand_ranges(first_part[roi_instance], n_parts, int(n_parts.sum().item()))
    lengths = part_lengths[part_ids]
    first_vertex = torch.cumsum(part_lengths, 0) - part_lengths
    vertex_ids, vertex_part = _expand_ranges(first_vertex[part_ids], lengths, int(lengths.sum().item()))
    vertex_roi = part_roi[vertex_part]

    boxes = boxes.to(torch.float32)
    x1, y1, x2, y2 = boxes.unbind(1)
    w, h = x2 - x1, y2 - y1
    if convention == LEGACY_2018:
        shift = torch.stack((x1, y1), 1)
        w = torch.where(1 > w, torch.ones_like(w), w)  # Python's max(w, 1)
        h = torch.where(1 > h, torch.ones_like(h), h)
    elif convention == CURRENT:
        limit = image_widths_heights.to(device=device, dtype=torch.float32) - 1
        shift = torch.stack((x1.clamp(min=0).minimum(limit[:, 0]), y1.clamp(min=0).minimum(limit[:, 1])), 1)
    scale = (m / torch.stack((w, h), 1).to(torch.float64)).to(torch.float32)
    local = (vertices[vertex_ids] - shift[vertex_roi]) * scale[vertex_roi]
    return rasterize_polygons(local, lengths, part_roi, k, m, m)


@_polygon_mask_targets.register_fake
def _(vertices, part_lengths, part_instance, roi_instance, boxes, resolution, image_widths_heights, convention):
    return boxes.new_empty((boxes.shape[0], resolution, resolution), dtype=torch.bool)


def bitmap_mask_targets(bitmaps, boxes, resolution):
    """Mask targets from binary ground-truth masks ``(K, H, W)`` (RLE-annotated datasets): ROIAlign of each
    mask in its ROI, >= 0.5. The reference's 2018 code has no bitmap path; COCO's training masks are polygons."""
    if boxes.shape[0] == 0:
        return torch.zeros((0, resolution, resolution), dtype=torch.bool, device=boxes.device)
    rois = torch.cat((torch.arange(boxes.shape[0], device=boxes.device, dtype=boxes.dtype)[:, None], boxes), 1)
    return roi_align(bitmaps[:, None].float(), rois, resolution, 1.0, 0)[:, 0] >= 0.5


def project_masks_on_boxes(segmentation_masks, proposals, discretization_size, convention=LEGACY_2018):
    """The reference's function and signature: the ``(K, M, M)`` float32 targets of one image, instance ``i``
    of ``segmentation_masks`` cropped to proposal ``i``. Runs the batched path on the proposals' device."""
    proposals = proposals.convert("xyxy")
    if segmentation_masks.size != proposals.size:
        raise ValueError(f"masks of an image of size {segmentation_masks.size} and proposals of size "
                         f"{proposals.size}")
    if len(segmentation_masks) != len(proposals):
        raise ValueError(f"{len(segmentation_masks)} masks for {len(proposals)} proposals")
    boxes = proposals.bbox
    m = int(discretization_size)
    if segmentation_masks.mode == "poly":
        k = len(proposals)
        sizes = boxes.new_tensor(proposals.size).expand(k, 2)
        targets = polygon_mask_targets(segmentation_masks.packed_polygons(),
                                       torch.arange(k, device=boxes.device), boxes, m, sizes, convention)
    else:
        targets = bitmap_mask_targets(segmentation_masks.get_mask_tensor().to(boxes.device), boxes, m)
    return targets.to(torch.float32)


def mask_rcnn_loss(mask_logits, labels, mask_targets, weights=None):
    """Binary cross-entropy on each positive ROI's own-class mask logits (mean over ROIs and pixels). ``weights``
    (0/1 per ROI): padded rows count for nothing; the mean is over the real ones."""
    if mask_targets.numel() == 0:
        return mask_logits.sum() * 0
    idx = torch.arange(labels.shape[0], device=labels.device)
    logits = mask_logits[idx, labels.clamp(min=0)].float()
    if weights is None:
        return F.binary_cross_entropy_with_logits(logits, mask_targets.float())
    w = weights.to(logits.dtype)[:, None, None]
    per_pixel = F.binary_cross_entropy_with_logits(torch.where(w > 0, logits, 0.0), mask_targets.float(),
                                                   reduction="none")
    return (per_pixel * w).sum() / (w.sum() * logits.shape[-1] * logits.shape[-2]).clamp(min=1)
