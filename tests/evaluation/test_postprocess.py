"""Model outputs -> COCO results: the reference's mask pasting and pycocotools' RLE, batched on the device."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from pycocotools import mask as mask_utils

from maskrcnn_benchmark.layers import paste_mask_windows
from maskrcnn_benchmark.evaluation.postprocess import (detections_to_coco, rle_change_points,
                                                         rle_strings, to_original)
from maskrcnn_benchmark.structures import BoxList


def _reference_paste(mask, box, im_h, im_w):
    """maskrcnn-benchmark's paste_mask_in_image, one detection at a time: pad the M x M mask by one pixel,
    expand the box by (M + 2) / M, cast it to int32, bilinear-resize the padded mask to the box, threshold 0.5,
    copy the part inside the image. Also returns the interpolated values (to see which pixels are at 0.5)."""
    m = mask.shape[-1]
    padded = F.pad(mask[None, None], (1, 1, 1, 1))
    scale = (m + 2) / m
    w_half, h_half = (box[2] - box[0]) * 0.5 * scale, (box[3] - box[1]) * 0.5 * scale
    xc, yc = (box[2] + box[0]) * 0.5, (box[3] + box[1]) * 0.5
    b = torch.stack((xc - w_half, yc - h_half, xc + w_half, yc + h_half)).to(torch.int32).tolist()
    w, h = max(b[2] - b[0] + 1, 1), max(b[3] - b[1] + 1, 1)
    values = F.interpolate(padded, size=(h, w), mode="bilinear", align_corners=False)[0, 0]
    im, im_values = torch.zeros((im_h, im_w), dtype=torch.bool), torch.full((im_h, im_w), -1.0)
    x0, x1, y0, y1 = max(b[0], 0), min(b[2] + 1, im_w), max(b[1], 0), min(b[3] + 1, im_h)
    if x1 > x0 and y1 > y0:
        im[y0:y1, x0:x1] = values[y0 - b[1]:y1 - b[1], x0 - b[0]:x1 - b[0]] > 0.5
        im_values[y0:y1, x0:x1] = values[y0 - b[1]:y1 - b[1], x0 - b[0]:x1 - b[0]]
    return im, im_values


def _random_detections(d, h, w, seed=0):
    g = torch.Generator().manual_seed(seed)
    probs = torch.rand(d, 1, 28, 28, generator=g)
    probs[::7] = 1.0  # full masks, touching the borders of their box / the image
    centre = torch.rand(d, 2, generator=g) * torch.tensor([w, h]) * 1.4 - 10
    size = torch.rand(d, 2, generator=g) * 90 + 0.3
    boxes = torch.cat((centre - size / 2, centre + size / 2), 1)
    boxes[::11] = torch.tensor([-5.0, -5.0, w + 5.0, h + 5.0])  # bigger than the image
    return probs, boxes


@pytest.mark.parametrize("max_elements", [1 << 24, 4000])  # one chunk; many chunks of a few similar windows
@pytest.mark.parametrize("window", ["box", "full"])
def test_pasted_masks_are_the_reference_paste(window, max_elements):
    h, w = 120, 97
    probs, boxes = _random_detections(200, h, w)
    masks, x0, y0 = paste_mask_windows(probs, boxes, h, w, window=window, max_elements=max_elements)
    checked = 0
    for k in range(len(boxes)):
        ref, values = _reference_paste(probs[k, 0], boxes[k], h, w)
        ours = torch.zeros((h, w), dtype=torch.bool)
        wh, ww = max(min(masks.shape[1], h - int(y0[k])), 0), max(min(masks.shape[2], w - int(x0[k])), 0)
        ours[y0[k]:y0[k] + wh, x0[k]:x0[k] + ww] = masks[k, :wh, :ww]
        # Our batched resize (grid_sample at the same sample points) and F.interpolate round the interpolation
        # weights differently, by ~1 ulp: only a value within 1e-5 of the 0.5 threshold may land on the other side.
        differ = ours != ref
        assert (values[differ] - 0.5).abs().max().item() < 1e-5 if differ.any() else True, k
        checked += int(ref.sum())
    assert checked > 10000


def test_rle_from_windows_is_pycocotools_encode():
    h, w = 120, 97
    probs, boxes = _random_detections(300, h, w, seed=1)
    for window in ("box", "full"):
        masks, x0, y0 = paste_mask_windows(probs, boxes, h, w, window=window)
        pos, counts = rle_change_points(masks, x0, y0, h)
        ours = rle_strings(pos.numpy(), counts.numpy(), h, w)
        full = torch.zeros((len(boxes), h, w), dtype=torch.bool)
        for k in range(len(boxes)):
            wh, ww = max(min(masks.shape[1], h - int(y0[k])), 0), max(min(masks.shape[2], w - int(x0[k])), 0)
            full[k, y0[k]:y0[k] + wh, x0[k]:x0[k] + ww] = masks[k, :wh, :ww]
        ref = mask_utils.encode(np.asfortranarray(full.permute(1, 2, 0).numpy().astype(np.uint8)))
        assert [r["counts"].decode("ascii") for r in ref] == ours


@pytest.mark.parametrize("h, w", [(120, 97), (1, 1), (3, 2), (1200, 1700)])
def test_rle_strings_and_areas_are_pycocotools_on_edge_masks(h, w):
    """Empty, full, first-pixel-only, last-pixel-only, ending on the last pixel, alternating pixels (runs of 1
    after a large first one: negative differences) and random masks; on a large image the runs need five
    characters. Strings and areas against pycocotools' encode and area."""
    g = torch.Generator().manual_seed(h)
    masks = [torch.zeros(h, w, dtype=torch.bool), torch.ones(h, w, dtype=torch.bool)]
    for flat in ([0], [h * w - 1], list(range(h * w // 2, h * w)), list(range(h * w - 1, h * w // 3, -2))):
        m = torch.zeros(h * w, dtype=torch.bool)
        m[flat] = True
        masks.append(m.view(w, h).t())  # flat index = column-major (COCO's order)
    masks += list(torch.rand(3, h, w, generator=g) > torch.rand(3, 1, 1, generator=g))
    full = torch.stack(masks)
    zeros = torch.zeros(len(full), dtype=torch.int64)
    pos, counts = rle_change_points(full, zeros, zeros, h)
    areas = []
    ours = rle_strings(pos.numpy(), counts.numpy(), h, w, areas)
    ref = mask_utils.encode(np.asfortranarray(full.permute(1, 2, 0).numpy().astype(np.uint8)))
    assert ours == [r["counts"].decode("ascii") for r in ref]
    assert areas == [int(a) for a in mask_utils.area(ref)] == full.flatten(1).sum(1).tolist()
    assert rle_strings(np.zeros(0, np.int64), np.zeros(0, np.int64), h, w) == []


def test_detections_to_coco_boxes_labels_and_masks():
    pred = BoxList(torch.tensor([[10.0, 20.0, 49.0, 39.0], [0.0, 0.0, 99.0, 79.0]]), (100, 80))
    pred.add_field("scores", torch.tensor([0.9, 0.4]))
    pred.add_field("labels", torch.tensor([2, 1]))
    pred.add_field("mask", torch.ones(2, 1, 28, 28))
    (dets,) = detections_to_coco([pred], [42], [(200, 160)], [0, 7, 9])
    bbox, segm = dets.to_coco_lists()
    assert [b["category_id"] for b in bbox] == [9, 7] and [b["image_id"] for b in bbox] == [42, 42]
    assert bbox[0]["bbox"] == pytest.approx([20.0, 40.0, 79.0, 39.0])  # xyxy scaled by 2, then w = x2 - x1 + 1
    assert segm[0]["segmentation"]["size"] == [160, 200]
    pasted = to_original(pred, 200, 160)
    assert pasted.get_field("mask").shape == (2, 1, 160, 200)
    for k in range(2):  # the predictor's pasted masks and the RLE describe the same pixels
        rle_mask = mask_utils.decode(segm[k]["segmentation"])
        assert (torch.from_numpy(rle_mask).bool() == pasted.get_field("mask")[k, 0]).all()
    assert mask_utils.area(segm[1]["segmentation"]) > 0.9 * 160 * 200


def test_detections_to_coco_waits_for_the_host_three_times_per_batch_and_six_per_image_with_masks():
    """The count evaluation/postprocess.py and docs/benchmarks.md state (3 per batch, 6 per image with masks),
    held here: a wait added per detection or per image would grow it."""
    from maskrcnn_benchmark.utils.host_syncs import HostSyncCounter

    gen = torch.Generator().manual_seed(0)

    def prediction(n):
        xy = torch.rand(n, 2, generator=gen) * 50
        pred = BoxList(torch.cat((xy, xy + 10 + torch.rand(n, 2, generator=gen) * 40), 1), (100, 80))
        pred.add_field("scores", torch.rand(n, generator=gen))
        pred.add_field("labels", torch.randint(1, 3, (n,), generator=gen))
        pred.add_field("mask", torch.rand(n, 1, 28, 28, generator=gen))
        return pred

    def waits(counts):
        preds = [prediction(n) for n in counts]
        with HostSyncCounter() as counter:
            dets = detections_to_coco(preds, list(range(len(preds))), [(200, 160)] * len(preds), [0, 7, 9])
        assert [len(d.to_coco_lists()[1]) for d in dets] == list(counts)
        return sum(counter.sites.values())

    assert waits([5]) == 3 + 6
    assert waits([5, 20, 1]) == 3 + 3 * 6


def test_the_box_post_processing_off_the_cpu_waits_for_the_host_per_batch_not_per_class():
    """The box post-processing ran one NMS per image and class with candidates, each a wait for the host on a GPU
    (89 waits for one image, 169 for two, counted on an R-50 eval forward). Its padded form (what runs off the CPU,
    forced here) waits the same number of times for one image or two, whatever the classes."""
    from maskrcnn_benchmark.modeling.box_coder import BoxCoder
    from maskrcnn_benchmark.modeling.roi_heads.box_head.inference import PostProcessor
    from maskrcnn_benchmark.utils.host_syncs import HostSyncCounter

    gen = torch.Generator().manual_seed(0)

    def waits(images, padded):
        rois = torch.cat([torch.cat((torch.full((40, 1), float(i)), torch.rand(40, 2, generator=gen) * 50,
                                     torch.rand(40, 2, generator=gen) * 50 + 50), 1) for i in range(images)])
        post = PostProcessor(0.0, 0.5, 100, BoxCoder((10.0, 10.0, 5.0, 5.0)), padded_nms=padded)
        logits, deltas = torch.randn(len(rois), 81, generator=gen), torch.randn(len(rois), 81 * 4, generator=gen)
        with HostSyncCounter() as counter:
            out = post(logits, deltas, rois, [(120, 160)] * images)
        assert len({int(c) for o in out for c in o.get_field("labels")}) > 40  # candidates in many classes
        return sum(counter.sites.values())

    assert waits(1, True) == waits(2, True) < 12
    assert waits(2, False) > waits(1, False) + 60  # per image and class


@pytest.mark.parametrize("shape", [(0, 0, 0), (2, 0, 5)])
def test_an_image_without_masks_gives_its_counts_on_the_masks_device(shape):
    """An image with no detection (or empty windows) gave its per-mask counts on the CPU whatever the device: on a
    GPU, the batch's torch.cat of every image's counts then mixed CPU and CUDA tensors and raised, so an evaluation
    batch with one image without detections beside others (tools/test_net.py at TEST.IMS_PER_BATCH 8) ended the
    run. The meta device stands in for CUDA."""
    masks = torch.zeros(shape, dtype=torch.bool, device="meta")
    zeros = torch.zeros(shape[0], dtype=torch.int64, device="meta")
    pos, counts = rle_change_points(masks, zeros, zeros, 10)
    assert pos.device.type == counts.device.type == "meta" and counts.shape == (shape[0],)
