"""From model outputs to COCO results in original-image coordinates: the one place that does it.

Boxes are rescaled to the original image and written as ``[x, y, w, h]`` with the "+1" width; mask
probabilities are pasted with the reference's geometry (pad by one pixel, expand the box by ``(M + 2) / M``,
truncate to integers, bilinear resize to the box, threshold 0.5) and run-length encoded as COCO RLE.

Everything runs where the model ran, for all detections of a batch at once; one transfer brings the boxes,
scores, labels and the RLE change points to the host, which only turns the runs into COCO's compressed strings.

Two ways to paste and encode (``method``), measured by ``bench/coco_eval.py``:

* ``"box"`` (default; NVIDIA's idea): each mask is computed only inside its (clipped) expanded box, and the RLE
  change points of the whole-image mask are derived from that window: the mask is zero outside it.
* ``"full"``: each mask is pasted into a full-image bitmap, whose change points are then found. Same RLE, more
  work (the image size per detection).
"""
import numpy as np
import torch
import torch.nn.functional as F

from ..layers.mask_paste import paste_mask_windows, paste_masks_in_image
from .detections import Detections

METHODS = ("box", "full")


def rle_change_points(masks, x0, y0, height):
    """Column-major change points of whole-image masks given by windows: ``(positions, counts_per_mask)``.

    A position ``p = x * height + y`` toggles the mask (COCO RLE's runs are the gaps between them). A toggle off at
    the bottom of one column and on at the top of the next land on the same index and cancel.
    """
    d = masks.shape[0]
    if d == 0 or masks.numel() == 0:
        return masks.new_zeros((0,), dtype=torch.int64), torch.zeros((d,), dtype=torch.int64)
    cols = masks.transpose(1, 2)  # (D, w, h): column-major
    edges = F.pad(cols.to(torch.int8), (1, 1))
    change = edges[..., 1:] != edges[..., :-1]  # (D, w, h + 1): a toggle before window row r
    det, c, r = change.nonzero(as_tuple=True)
    pos = (x0[det] + c) * height + y0[det] + r
    # cancel coinciding toggles (end of a full-height column = start of the next one)
    same = torch.zeros_like(pos, dtype=torch.bool)
    if pos.numel() > 1:
        dup = (pos[1:] == pos[:-1]) & (det[1:] == det[:-1])
        same[1:] |= dup
        same[:-1] |= dup
    pos, det = pos[~same], det[~same]
    return pos, torch.bincount(det, minlength=d)


def rle_strings(positions, counts, height, width, areas=None):
    """COCO compressed RLE ``counts`` strings from change points (host side, numpy + pycocotools' C encoder).
    ``areas``, a list, receives each mask's pixel count (the sum of its runs of ones)."""
    from pycocotools import mask as mask_utils

    total = height * width
    out = []
    splits = np.split(np.asarray(positions, dtype=np.int64), np.cumsum(counts)[:-1]) if len(counts) else []
    uncompressed = []
    for p in splits:
        if len(p) and p[-1] == total:  # a mask that ends on its last pixel: no trailing empty run
            p = p[:-1]
        runs = np.diff(np.concatenate(([0], p, [total])))
        if areas is not None:
            areas.append(int(runs[1::2].sum()))
        uncompressed.append({"size": [height, width], "counts": runs.tolist()})
    if uncompressed:
        out = [r["counts"].decode("ascii") for r in mask_utils.frPyObjects(uncompressed, height, width)]
    return out


def to_original(prediction, width, height, paste_masks=True, mask_threshold=0.5):
    """A model output in its original image's coordinates: boxes rescaled, and (``paste_masks``) the ``mask``
    field pasted into ``(D, 1, height, width)`` bool image masks, on the prediction's device."""
    pred = prediction.resize((int(width), int(height))).convert("xyxy")
    if paste_masks and pred.has_field("mask") and pred.get_field("mask").dtype != torch.bool:
        pred.add_field("mask", paste_masks_in_image(pred.get_field("mask"), pred.bbox, int(height), int(width),
                                                    mask_threshold))
    return pred


def detections_to_coco(predictions, image_ids, image_sizes_wh, category_ids, mask_threshold=0.5, method="box"):
    """One :class:`Detections` per image of a batch. ``predictions``: the model's BoxLists (any device, in the
    resized images' coordinates), ``image_sizes_wh``: each original image ``(width, height)``, ``category_ids``:
    a tensor or sequence mapping contiguous labels to COCO category ids. Everything is computed on the
    predictions' device; one transfer per batch brings boxes, scores, categories and mask change points over."""
    if method not in METHODS:
        raise ValueError(f"mask encoding method must be one of {METHODS}, got {method!r}")
    rows, change_points, change_counts, has_masks = [], [], [], []
    for pred, (w, h) in zip(predictions, image_sizes_wh):
        pred = to_original(pred, w, h, paste_masks=False)
        device = pred.bbox.device
        lut = torch.as_tensor(category_ids, device=device)
        rows.append(torch.cat((pred.convert("xywh").bbox, pred.get_field("scores")[:, None].float(),
                               lut[pred.get_field("labels")][:, None].float()), 1))
        has_masks.append(pred.has_field("mask"))
        if not pred.has_field("mask"):
            continue
        mask = pred.get_field("mask")
        if mask.dtype == torch.bool:  # already pasted by the model (POSTPROCESS_MASKS): rescale, then encode
            full = F.interpolate(mask.float(), size=(int(h), int(w)), mode="nearest")[:, 0] > 0.5
            zeros = torch.zeros(len(pred), dtype=torch.int64, device=device)
            pos, counts = rle_change_points(full, zeros, zeros, int(h))
        else:
            windows, x0, y0 = paste_mask_windows(mask, pred.bbox, int(h), int(w), mask_threshold, window=method)
            pos, counts = rle_change_points(windows, x0, y0, int(h))
        change_points.append(pos)
        change_counts.append(counts)
    if not rows:
        return []
    sizes = [len(r) for r in rows]
    host_rows = torch.cat(rows).cpu().numpy()  # the transfer: float32 boxes/scores and small category ids
    host_points = torch.cat(change_points).cpu().numpy() if change_points else None
    host_counts = torch.cat(change_counts).cpu().numpy() if change_counts else None
    parts, r0, p0, c0 = [], 0, 0, 0
    for image_id, (w, h), n, masked in zip(image_ids, image_sizes_wh, sizes, has_masks):
        block = host_rows[r0:r0 + n]
        r0 += n
        xywh, scores, cats = block[:, :4], block[:, 4], block[:, 5].astype(np.int64)
        ids = np.full(n, int(image_id), dtype=np.int64)
        if not masked:
            parts.append(Detections(ids, cats, xywh, scores))
            continue
        counts = host_counts[c0:c0 + n]
        points = host_points[p0:p0 + int(counts.sum())]
        c0 += n
        p0 += int(counts.sum())
        areas = []
        strings = rle_strings(points, counts, int(h), int(w), areas)
        parts.append(Detections(ids, cats, xywh, scores, ids, cats, strings, np.full(n, int(h)), np.full(n, int(w)),
                                scores, areas))
    return parts
