import pickle

import numpy as np
import pytest
import torch
from pycocotools import mask as mask_utils

from maskrcnn_benchmark.modeling.roi_heads.mask_head import project_masks_on_boxes
from maskrcnn_benchmark.structures import BoxList
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
    # Flipping with the "+1" convention (x -> w - x - 1) moves the polygon one pixel left of a bitmap flip
    # (x -> w - 1 - x of a pixel whose polygon spans x..x+1): exactly a one-column shift, nothing at the borders.
    assert torch.equal(flipped_then_raster[..., :-1], raster_then_flip[..., 1:])
    assert flipped_then_raster[..., -1].sum() == 0 and raster_then_flip[..., 0].sum() == 0


def test_invalid_polygon_is_rejected():
    with pytest.raises(ValueError, match="at least 3 points"):
        SegmentationMask([[[1.0, 2.0, 3.0, 4.0]]], (10, 10))


def test_packed_polygons_and_empty_instances():
    m = SegmentationMask([SQUARE, [], TRIANGLE + SQUARE], (20, 10))
    vertices, lengths, owner = m.packed_polygons()
    assert lengths.tolist() == [4, 3, 4] and owner.tolist() == [0, 2, 2]
    assert vertices.shape == (11, 2) and vertices[4].tolist() == [10.0, 1.0]
    assert m.get_mask_tensor()[1].sum() == 0  # an instance whose parts were all degenerate is empty
    targets = project_masks_on_boxes(m, BoxList(torch.tensor([[0.0, 0, 19, 9]] * 3), (20, 10)), 28)
    assert targets.shape == (3, 28, 28) and targets.dtype == torch.float32 and targets[1].sum() == 0


def test_project_masks_on_boxes_is_pycocotools_on_the_cropped_polygon():
    """The reference's recipe for one ROI, spelled out with pycocotools as the rasterizer: shift by the box
    corner, scale by 28 / max(w, 1) in float32, ``frPyObjects`` -> ``merge`` -> ``decode``."""
    gen = np.random.default_rng(0)
    polys, boxes = [], []
    for _ in range(40):
        cx, cy = gen.uniform(20, 80, 2)
        r = gen.uniform(2, 20)
        ang = np.sort(gen.uniform(0, 2 * np.pi, 12))
        rad = r * gen.uniform(0.4, 1.0, 12)
        pts = np.stack((cx + rad * np.cos(ang), cy + rad * np.sin(ang)), 1).reshape(-1)
        polys.append([np.round(pts, 2).tolist(), [cx, cy, cx + 3, cy, cx, cy + 3]])
        jitter = gen.uniform(-4, 4, 4)
        boxes.append([cx - r + jitter[0], cy - r + jitter[1], cx + r + jitter[2], cy + r + jitter[3]])
    masks = SegmentationMask(polys, (100, 100))
    boxes_t = torch.tensor(boxes, dtype=torch.float32)
    ours = project_masks_on_boxes(masks, BoxList(boxes_t, (100, 100)), 28)
    for i, box in enumerate(boxes_t):
        w = box[2] - box[0]
        h = box[3] - box[1]
        sx, sy = 28.0 / float(max(w, 1)), 28.0 / float(max(h, 1))
        parts = []
        for p in masks.polygons[i]:
            q = p.clone()
            q[0::2] = (q[0::2] - box[0]) * sx
            q[1::2] = (q[1::2] - box[1]) * sy
            parts.append(q.numpy().astype(np.float64).tolist())
        ref = mask_utils.decode(mask_utils.merge(mask_utils.frPyObjects(parts, 28, 28)))
        assert torch.equal(ours[i].bool(), torch.from_numpy(ref).bool()), i


def test_targets_pickle_by_value_for_loader_workers():
    """A loader worker pickles each batch for the trainer (torch's ForkingPickler). Small target tensors travel
    inside the message, not as one shared-memory file descriptor (and one socket handshake) each; the round trip
    gives back equal boxes, fields, polygons and packed polygons."""
    import torch.multiprocessing  # noqa: F401 - registers the tensor reductions a loader worker uses
    from multiprocessing.reduction import ForkingPickler

    polys = [[[10, 10, 40, 12, 30, 35]], [[50, 50, 60, 50, 60, 61, 50, 58], [70, 70, 75, 70, 72, 76]], []]
    target = BoxList(torch.tensor([[10., 10, 40, 35], [50, 50, 75, 76], [0, 0, 5, 5]]), (100, 90))
    target.add_field("labels", torch.tensor([1, 2, 3]))
    masks = SegmentationMask(polys, (100, 90))
    masks.packed_polygons()
    target.add_field("masks", masks)
    payload = bytes(ForkingPickler.dumps([target, SegmentationMask(polys, (100, 90))]))
    assert b"rebuild_storage" not in payload  # no shared-memory handle at all
    back, unpacked = pickle.loads(payload)
    assert torch.equal(back.bbox, target.bbox) and back.size == target.size and back.mode == target.mode
    assert torch.equal(back.get_field("labels"), target.get_field("labels"))
    got, want = back.get_field("masks"), masks
    assert [[p.tolist() for p in inst] for inst in got.polygons] == polys_as_float(polys)
    assert got._packed is not None and all(torch.equal(a, b) for a, b in zip(got._packed, want.packed_polygons()))
    assert unpacked._packed is None and len(unpacked.polygons) == 3
    # what the loader then does with them works on the rebuilt objects
    assert torch.equal(got.transpose(FLIP_LEFT_RIGHT).polygons[0][0], want.transpose(FLIP_LEFT_RIGHT).polygons[0][0])
    big = SegmentationMask(torch.ones((2, 300, 300), dtype=torch.uint8), (300, 300), "mask")
    assert b"rebuild_storage" in bytes(ForkingPickler.dumps(big))  # bitmaps keep the shared-memory path


def polys_as_float(polys):
    return [[[float(v) for v in p] for p in inst] for inst in polys]


def test_a_crop_to_a_fractional_box_rasterizes():
    """A crop keeps the box's float size (the reference's, for the resize that follows); rasterized as it is, the
    mask took the size rounded one way and the masks' stated size another (int() of 10.6 is 10): ValueError. Both
    round half up now, whatever the parity (Python's round(10.5) is 10, round(11.5) 12)."""
    for right, width in ((10.6, 11), (10.5, 11), (11.5, 12), (10.4, 10)):
        cropped = SegmentationMask([SQUARE], (20, 10)).crop((0, 0, right, 8))
        bitmaps = cropped.convert("mask")
        assert bitmaps.size == (width, 8) and bitmaps.get_mask_tensor().shape == (1, 8, width)
        assert torch.equal(bitmaps.get_mask_tensor(), cropped.get_mask_tensor())
        assert bitmaps.get_mask_tensor().sum() == 25  # the square, whole inside the crop


def test_a_uint8_or_list_mask_selects_instances_as_the_boxes_do():
    """A uint8 index was read as instance numbers (0, 1, 1: three masks) while the BoxList beside took it as a mask
    (two boxes)."""
    import torch

    from maskrcnn_benchmark.structures import SegmentationMask

    m = SegmentationMask([[[0.0, 0, 5, 0, 5, 5]], [[1.0, 1, 6, 1, 6, 6]], [[2.0, 2, 7, 2, 7, 7]]], (10, 10))
    for index in (torch.tensor([1, 0, 1], dtype=torch.uint8), torch.tensor([True, False, True])):
        picked = m[index]
        assert len(picked) == 2 and picked.polygons[1][0].tolist() == m.polygons[2][0].tolist()


def test_a_bitmap_crop_past_the_corner_is_clamped_to_the_image():
    import torch

    from maskrcnn_benchmark.structures import SegmentationMask

    m = SegmentationMask(torch.ones((1, 10, 10), dtype=torch.uint8), (10, 10), "mask")
    c = m.crop([-3, 0, 5, 5])
    assert tuple(c.masks.shape) == (1, 5, 5) and bool(c.masks.all())
