import numpy as np
import pytest
import torch
from pycocotools import mask as mask_utils

from maskrcnn_benchmark.modeling.roi_heads.mask_head import rasterize_polygons_in_boxes
from maskrcnn_benchmark.structures import FLIP_LEFT_RIGHT, SegmentationMask

SQUARE = [[2.0, 2.0, 7.0, 2.0, 7.0, 7.0, 2.0, 7.0]]
TRIANGLE = [[10.0, 1.0, 18.0, 1.0, 14.0, 9.0]]


def test_polygon_geometry():
    m = SegmentationMask([SQUARE, TRIANGLE], (20, 10))
    flipped = m.transpose(FLIP_LEFT_RIGHT)
    assert flipped.polygons[0][0].tolist() == [17, 2, 12, 2, 12, 7, 17, 7]
    cropped = m.crop((2, 1, 12, 9))
    assert cropped.size == (10, 8) and cropped.polygons[1][0].tolist() == [8, 0, 16, 0, 12, 8]
    resized = m.resize((40, 20))
    assert resized.polygons[0][0].tolist() == [4, 4, 14, 4, 14, 14, 4, 14]
    assert len(m[torch.tensor([False, True])]) == 1


def test_polygons_and_bitmaps_agree():
    m = SegmentationMask([SQUARE, TRIANGLE], (20, 10))
    bitmaps = m.convert("mask")
    assert bitmaps.get_mask_tensor().shape == (2, 10, 20)
    assert bitmaps.get_mask_tensor()[0].sum() == 25  # pycocotools: pixels 2..6 of a 2..7 square
    flipped_then_raster = m.transpose(FLIP_LEFT_RIGHT).convert("mask").get_mask_tensor()
    raster_then_flip = bitmaps.transpose(FLIP_LEFT_RIGHT).get_mask_tensor()
    # Flipping with the "+1" convention moves the polygon by one pixel relative to a bitmap flip.
    assert (flipped_then_raster.float() - raster_then_flip.float()).abs().sum() <= 2 * (5 + 9)


def test_invalid_polygon_is_rejected():
    with pytest.raises(ValueError, match="at least 3 points"):
        SegmentationMask([[[1.0, 2.0, 3.0, 4.0]]], (10, 10))


def test_vectorized_mask_targets_match_pycocotools_rasterization():
    """The batched even-odd rasterizer agrees with the reference path (crop, resize, pycocotools)."""
    gen = np.random.default_rng(0)
    polys, boxes = [], []
    for _ in range(20):
        cx, cy = gen.uniform(20, 80, 2)
        r = gen.uniform(5, 20)
        ang = np.sort(gen.uniform(0, 2 * np.pi, 12))
        rad = r * gen.uniform(0.6, 1.0, 12)
        pts = np.stack((cx + rad * np.cos(ang), cy + rad * np.sin(ang)), 1).reshape(-1)
        polys.append([pts.tolist()])
        jitter = gen.uniform(-4, 4, 4)
        boxes.append([cx - r + jitter[0], cy - r + jitter[1], cx + r + jitter[2], cy + r + jitter[3]])
    masks = SegmentationMask(polys, (100, 100))
    boxes_t = torch.tensor(boxes, dtype=torch.float32)
    ours = rasterize_polygons_in_boxes(masks.polygon_edges(), boxes_t, 28)
    agreements = []
    for i, box in enumerate(boxes):
        ref_poly = masks[i].crop(box).resize((28, 28))
        ref = torch.from_numpy(mask_utils.decode(mask_utils.merge(
            mask_utils.frPyObjects([p.tolist() for p in ref_poly.polygons[0]], 28, 28))))
        agree = (ours[i].bool() == ref.bool()).float().mean().item()
        iou = ((ours[i].bool() & ref.bool()).sum() / (ours[i].bool() | ref.bool()).sum()).item()
        # pycocotools snaps polygon edges to a 1/5-pixel grid; pixel-centre sampling differs on edge pixels only.
        assert agree > 0.95 and iou > 0.9, (i, agree, iou)
        agreements.append(agree)
    assert np.mean(agreements) > 0.98
