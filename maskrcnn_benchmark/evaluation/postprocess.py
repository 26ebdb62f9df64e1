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

from ..modeling.roi_heads.mask_head.inference import expand_boxes
from .detections import Detections

METHODS = ("box", "full")


def _expanded_int_boxes(boxes, m, padding):
    scale = (m + 2 * padding) / m
    return expand_boxes(boxes.float(), scale).trunc()  # the reference casts to int32 (truncation)


def paste_windows(probs, boxes, height, width, threshold=0.5, padding=1, window="box", max_elements=1 << 24):
    """Pasted masks of D detections, each only in a window: ``(masks, x0, y0)``.

    ``masks`` is ``(D, h, w)`` bool (the windows padded to the largest; outside a window it is False), window d
    starts at image pixel ``(x0[d], y0[d])``. ``window="box"``: the expanded box clipped to the image;
    ``"full"``: the whole image. Detections are processed in chunks of similar window size (``max_elements``).
    """
    device = probs.device
    d = probs.shape[0]
    m = probs.shape[-1]
    padded = F.pad(probs.float().reshape(d, 1, m, m), (padding,) * 4)
    box = _expanded_int_boxes(boxes, m, padding)
    bx0, by0, bx1, by1 = box.unbind(1)
    bw = (bx1 - bx0 + 1).clamp(min=1)
    bh = (by1 - by0 + 1).clamp(min=1)
    if window == "box":
        x0, y0 = bx0.clamp(min=0), by0.clamp(min=0)
        x1, y1 = bx1.clamp(max=width - 1), by1.clamp(max=height - 1)
    elif window == "full":
        x0, y0 = torch.zeros_like(bx0), torch.zeros_like(by0)
        x1, y1 = torch.full_like(bx1, width - 1), torch.full_like(by1, height - 1)
    else:
        raise ValueError(f"window must be 'box' or 'full', got {window!r}")
    ww = (x1 - x0 + 1).clamp(min=0)
    wh = (y1 - y0 + 1).clamp(min=0)
    if d == 0:
        return torch.zeros((0, 0, 0), dtype=torch.bool, device=device), x0.long(), y0.long()
    sizes = torch.stack((wh, ww), 1).long().cpu()  # the one sync: window sizes for chunking
    order = torch.argsort(sizes[:, 0] * sizes[:, 1])
    out_h, out_w = int(sizes[:, 0].max()), int(sizes[:, 1].max())
    out = torch.zeros((d, out_h, out_w), dtype=torch.bool, device=device)
    start = 0
    while start < d:
        end = start + 1
        h_max, w_max = int(sizes[order[start], 0]), int(sizes[order[start], 1])
        while end < d:
            h_next = max(h_max, int(sizes[order[end], 0]))
            w_next = max(w_max, int(sizes[order[end], 1]))
            if (end - start + 1) * max(h_next, 1) * max(w_next, 1) > max_elements:
                break
            h_max, w_max, end = h_next, w_next, end + 1
        idx = order[start:end].to(device)
        start = end
        if h_max == 0 or w_max == 0:
            continue
        cols = torch.arange(w_max, device=device, dtype=torch.float32)
        rows = torch.arange(h_max, device=device, dtype=torch.float32)
        # Image pixel (x, y) of window pixel (c, r); its position in the box's resize grid, as grid_sample wants:
        # interpolate(size=(bh, bw), align_corners=False) samples the padded mask at (i + 0.5) * (M+2)/bw - 0.5.
        x = x0[idx, None] + cols[None, :]
        y = y0[idx, None] + rows[None, :]
        gx = ((x - bx0[idx, None]) + 0.5) / bw[idx, None] * 2 - 1
        gy = ((y - by0[idx, None]) + 0.5) / bh[idx, None] * 2 - 1
        grid = torch.stack((gx[:, None, :].expand(-1, h_max, -1), gy[:, :, None].expand(-1, -1, w_max)), -1)
        sampled = F.grid_sample(padded[idx], grid, mode="bilinear", padding_mode="border", align_corners=False)
        inside = (cols[None, :] < ww[idx, None]) & (x >= bx0[idx, None]) & (x <= bx1[idx, None])
        inside_y = (rows[None, :] < wh[idx, None]) & (y >= by0[idx, None]) & (y <= by1[idx, None])
        mask = (sampled[:, 0] > threshold) & inside_y[:, :, None] & inside[:, None, :]
        out[idx, :h_max, :w_max] = mask
    return out, x0.long(), y0.long()


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
        windows, _, _ = paste_windows(pred.get_field("mask"), pred.bbox, int(height), int(width), mask_threshold,
                                      window="full")
        full = torch.zeros((len(pred), 1, int(height), int(width)), dtype=torch.bool, device=windows.device)
        full[:, 0, : windows.shape[1], : windows.shape[2]] = windows
        pred.add_field("mask", full)
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
            windows, x0, y0 = paste_windows(mask, pred.bbox, int(h), int(w), mask_threshold, window=method)
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
