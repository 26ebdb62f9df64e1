"""Mask targets and loss, with the MLPerf reference's numerics.

Targets come from the ground-truth polygons exactly as the reference computes them per ROI
(``segmentation_mask.crop(box).resize((M, M)).convert("mask")``, which ends in pycocotools), but for every
positive ROI of the batch at once on the ROIs' device, with no host sync
(:func:`~maskrcnn_benchmark.layers.rasterize.rasterize_padded`).

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

from ....layers import roi_align
from ....layers.rasterize import pad_polygons, rasterize_padded

LEGACY_2018 = "legacy_2018"
CURRENT = "current"


def polygon_mask_targets(packed, roi_instance, boxes, resolution, image_widths_heights=None,
                         convention=LEGACY_2018):
    """``(K, M, M)`` bool mask targets of K ROIs from flat packed polygons (the reference's interface).

    ``packed`` = ``(vertices (V, 2), part_lengths (P,), part_instance (P,))`` with the parts of each instance
    contiguous and instances in increasing order (:meth:`SegmentationMask.packed_polygons`, concatenated over
    images); ``roi_instance`` ``(K,)`` the instance of each ROI; ``boxes`` ``(K, 4)`` the ROIs (xyxy, float32);
    ``image_widths_heights`` ``(K, 2)`` the image size of each ROI (needed by the ``"current"`` convention).
    The polygons are padded on the host (:func:`~maskrcnn_benchmark.layers.rasterize.pad_polygons`), then
    :func:`padded_mask_targets` computes the targets (what the training step calls on a :class:`TargetBatch`).
    """
    vertices, part_lengths, part_instance = (t.cpu() for t in packed)
    num_instances = max(int(part_instance.max()) + 1 if part_instance.numel() else 0,
                        int(roi_instance.max()) + 1 if roi_instance.numel() else 0)
    slot, nxt, part, num_parts = pad_polygons(part_lengths, part_instance, num_instances)
    padded = torch.zeros((num_instances * nxt.shape[1], 2), dtype=torch.float32)
    padded[slot] = vertices.float()
    device = boxes.device
    parts = torch.zeros((num_instances, num_parts), dtype=torch.bool, device=device)
    return padded_mask_targets(padded.view(num_instances, -1, 2).to(device), nxt.to(device), part.to(device), parts,
                               roi_instance.to(device), boxes, resolution, image_widths_heights, convention)


def padded_mask_targets(poly_vertices, poly_next, poly_part, poly_parts, roi_instance, boxes, resolution,
                        image_widths_heights=None, convention=LEGACY_2018):
    """``(K, M, M)`` bool mask targets of K ROIs from padded polygons (the layout of
    :class:`~maskrcnn_benchmark.structures.target_batch.TargetBatch`): ROI ``k`` crops and resizes the polygons
    of row ``roi_instance[k]``. One opaque op for ``torch.compile`` (``maskrcnn::polygon_mask_targets``), with no
    host sync (tests/layers/test_custom_ops_sync_free.py: 0): every size is a shape."""
    if convention not in (LEGACY_2018, CURRENT):
        raise ValueError(f"unknown mask target convention {convention!r}")
    if convention == CURRENT and image_widths_heights is None:
        raise ValueError("the 'current' crop convention needs the image sizes")
    sizes = None if image_widths_heights is None else image_widths_heights.to(boxes.device)
    return _polygon_mask_targets(poly_vertices, poly_next, poly_part, poly_parts, roi_instance, boxes,
                                 int(resolution), sizes, convention)


@torch.library.custom_op("maskrcnn::polygon_mask_targets", mutates_args=())
def _polygon_mask_targets(poly_vertices: torch.Tensor, poly_next: torch.Tensor, poly_part: torch.Tensor,
                          poly_parts: torch.Tensor, roi_instance: torch.Tensor, boxes: torch.Tensor, resolution: int,
                          image_widths_heights: Optional[torch.Tensor], convention: str) -> torch.Tensor:
    m = int(resolution)
    vertices = poly_vertices[roi_instance]
    boxes = boxes.to(torch.float32)
    x1, y1, x2, y2 = boxes.unbind(1)
    w, h = x2 - x1, y2 - y1
    if convention == LEGACY_2018:
        shift = torch.stack((x1, y1), 1)
        w = torch.where(1 > w, torch.ones_like(w), w)  # Python's max(w, 1)
        h = torch.where(1 > h, torch.ones_like(h), h)
    else:
        limit = image_widths_heights.to(device=boxes.device, dtype=torch.float32) - 1
        shift = torch.stack((x1.clamp(min=0).minimum(limit[:, 0]), y1.clamp(min=0).minimum(limit[:, 1])), 1)
    scale = (m / torch.stack((w, h), 1).to(torch.float64)).to(torch.float32)
    local = (vertices - shift[:, None, :]) * scale[:, None, :]
    return rasterize_padded(local, poly_next[roi_instance], poly_part[roi_instance], poly_parts.shape[1], m, m)


@_polygon_mask_targets.register_fake
def _(poly_vertices, poly_next, poly_part, poly_parts, roi_instance, boxes, resolution, image_widths_heights,
      convention):
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
