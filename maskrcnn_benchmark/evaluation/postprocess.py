"""From model outputs to COCO results in original-image coordinates: the one place that does it.

Boxes are rescaled to the original image and written as ``[x, y, w, h]`` with the "+1" width; mask
probabilities are pasted with the reference's geometry (pad by one pixel, expand the box by ``(M + 2) / M``,
truncate to integers, bilinear resize to the box, threshold 0.5) and run-length encoded as COCO RLE.

Everything runs where the model ran, image by image (each image's size and windows differ); three transfers per
batch bring the boxes, scores and labels, the RLE change points and their counts to the host, which only turns the
runs into COCO's compressed strings. Each image with masks also waits for the device: its paste windows' sizes
come to the host (one copy, for the chunking), and finding its change points is a ``nonzero``, two boolean-mask
reads and a ``bincount`` (their sizes are the data's). Counted with ``utils.host_syncs.HostSyncCounter`` on the
CPU (2026-11-28): 3 per batch and 6 per image with masks (4 data-dependent shapes, and two ``tolist`` of the
window sizes' host copy, which the counter lists although on a GPU the wait is the copy before them). The counter
does not see copies to the device, which torch makes wait for the stream (from pageable memory): the category table,
once per batch, and each image's window order (``paste_mask_windows``); the boxes are rescaled by Python floats,
not by a scale tensor copied per image.

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
        return masks.new_zeros((0,), dtype=torch.int64), masks.new_zeros((d,), dtype=torch.int64)  # its device
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
    """COCO compressed RLE ``counts`` strings from change points, all masks at once in numpy: the runs, then
    pycocotools' ``rleToString`` (each run, from the fourth on as the difference to the run two before, written
    five bits per character from the lowest, ``0x20`` marking a continuation, plus 48), vectorized over the runs.
    tests/evaluation holds the strings to pycocotools' own encoder. ``areas``, a list, receives each mask's pixel
    count (the sum of its runs of ones)."""
    n = len(counts)
    if n == 0:
        return []
    total = height * width
    positions = np.asarray(positions, dtype=np.int64)
    mask_of_point = np.repeat(np.arange(n), counts)
    inner = positions != total  # a mask that ends on its last pixel: no trailing empty run
    positions, mask_of_point = positions[inner], mask_of_point[inner]
    toggles = np.bincount(mask_of_point, minlength=n)
    # mask i's runs: the gaps between 0, its toggles and ``total``: toggles[i] + 1 of them, from first_run[i] on
    first_run = np.concatenate(([0], np.cumsum(toggles + 1)[:-1]))
    first_point = np.concatenate(([0], np.cumsum(toggles)[:-1]))
    local = np.arange(len(positions)) - first_point[mask_of_point]
    previous = np.concatenate(([0], positions[:-1]))
    previous[local == 0] = 0
    runs = np.empty(int(toggles.sum()) + n, dtype=np.int64)
    runs[first_run[mask_of_point] + local] = positions - previous
    last = np.zeros(n, dtype=np.int64)
    has = toggles > 0
    last[has] = positions[first_point[has] + toggles[has] - 1]
    runs[first_run + toggles] = total - last
    mask_of_run = np.repeat(np.arange(n), toggles + 1)
    index = np.arange(len(runs)) - first_run[mask_of_run]
    if areas is not None:
        areas.extend(np.bincount(mask_of_run, weights=np.where(index % 2 == 1, runs, 0), minlength=n)
                     .astype(np.int64).tolist())
    value = runs.copy()
    value[index > 2] -= runs[np.flatnonzero(index > 2) - 2]
    chars, more = [], np.ones(len(value), dtype=bool)
    while more.any():  # at most 7 rounds: runs < 2**32
        emitted = more
        c = value & 0x1F
        value = value >> 5
        more = emitted & np.where(c & 0x10, value != -1, value != 0)
        chars.append((np.where(more, c | 0x20, c) + 48, emitted))
    table = np.stack([c for c, _ in chars], 1).astype(np.uint8)
    valid = np.stack([e for _, e in chars], 1)
    blob = table[valid].tobytes()  # every run's characters, run after run, mask after mask
    per_mask = np.bincount(mask_of_run, weights=valid.sum(1), minlength=n).astype(np.int64)
    ends = np.cumsum(per_mask).tolist()
    return [blob[a:b].decode("ascii") for a, b in zip([0] + ends[:-1], ends)]


def to_original(prediction, width, height, paste_masks=True, mask_threshold=0.5):
    """A model output in its original image's coordinates: boxes rescaled, and (``paste_masks``) the ``mask``
    field as ``(D, 1, height, width)`` bool image masks, on the prediction's device: the mask head's masks pasted,
    or the image masks the model pasted itself (``POSTPROCESS_MASKS``, at the size it saw) rescaled (nearest)."""
    pred = prediction.resize((int(width), int(height))).convert("xyxy")
    if paste_masks and pred.has_field("mask"):
        mask = pred.get_field("mask")
        if mask.dtype != torch.bool:
            pred.add_field("mask", paste_masks_in_image(mask, pred.bbox, int(height), int(width), mask_threshold))
        elif tuple(mask.shape[-2:]) != (int(height), int(width)):
            pred.add_field("mask", F.interpolate(mask.float(), size=(int(height), int(width)), mode="nearest") > 0.5)
    return pred


def detections_to_coco(predictions, image_ids, image_sizes_wh, category_ids, mask_threshold=0.5, method="box"):
    """One :class:`Detections` per image of a batch. ``predictions``: the model's BoxLists (any device, in the
    resized images' coordinates), ``image_sizes_wh``: each original image ``(width, height)``, ``category_ids``:
    a tensor or sequence mapping contiguous labels to COCO category ids. Everything is computed on the
    predictions' device, image by image; three transfers per batch bring boxes, scores, categories and mask change
    points over (and each image with masks waits for the device within: the module's docstring)."""
    if method not in METHODS:
        raise ValueError(f"mask encoding method must be one of {METHODS}, got {method!r}")
    rows, change_points, change_counts, has_masks, luts = [], [], [], [], {}
    for pred, (w, h) in zip(predictions, image_sizes_wh):
        pred = to_original(pred, w, h, paste_masks=False)
        device = pred.bbox.device
        lut = luts.get(device)
        if lut is None:  # the category table: copied to the device once per batch
            lut = luts[device] = torch.as_tensor(category_ids, device=device)
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
