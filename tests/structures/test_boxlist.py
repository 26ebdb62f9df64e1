import pytest
import torch

from maskrcnn_benchmark.structures import FLIP_LEFT_RIGHT, FLIP_TOP_BOTTOM, BoxList, to_image_list
from maskrcnn_benchmark.structures.boxlist_ops import boxlist_iou, boxlist_nms, cat_boxlist, remove_small_boxes


def _boxes():
    b = BoxList(torch.tensor([[0.0, 0.0, 9.0, 9.0], [5.0, 10.0, 14.0, 29.0]]), (40, 30))
    b.add_field("labels", torch.tensor([1, 2]))
    return b


def test_convert_roundtrip_uses_plus_one_widths():
    b = _boxes()
    xywh = b.convert("xywh")
    assert xywh.bbox.tolist() == [[0, 0, 10, 10], [5, 10, 10, 20]]
    assert xywh.convert("xyxy").bbox.tolist() == b.bbox.tolist()
    assert xywh.get_field("labels").tolist() == [1, 2]


def test_area_resize_transpose_crop_clip():
    b = _boxes()
    assert b.area().tolist() == [100, 200]
    r = b.resize((80, 60))
    assert r.bbox.tolist() == [[0, 0, 18, 18], [10, 20, 28, 58]] and r.size == (80, 60)
    f = b.transpose(FLIP_LEFT_RIGHT)
    assert f.bbox.tolist() == [[30, 0, 39, 9], [25, 10, 34, 29]]
    v = b.transpose(FLIP_TOP_BOTTOM)
    # the reference flips boxes top-bottom without the "+1" (image_height - ymax), unlike left-right and unlike
    # its polygons; followed here (training flips left-right only)
    assert v.bbox.tolist() == [[0, 21, 9, 30], [5, 1, 14, 20]]
    assert f.transpose(FLIP_LEFT_RIGHT).bbox.tolist() == b.bbox.tolist()
    c = b.crop((5, 5, 15, 25))
    assert c.size == (10, 20) and c.bbox.tolist() == [[0, 0, 4, 4], [0, 5, 9, 20]]
    big = BoxList(torch.tensor([[-5.0, -5.0, 50.0, 50.0], [45.0, 0.0, 60.0, 10.0]]), (40, 30))
    clipped = big.clip_to_image(remove_empty=True)
    assert clipped.bbox.tolist() == [[0, 0, 39, 29]]


def test_iou_nms_cat_remove_small():
    b = _boxes()
    other = BoxList(torch.tensor([[0.0, 0.0, 4.0, 9.0]]), (40, 30))
    assert boxlist_iou(b, other)[:, 0].tolist() == pytest.approx([0.5, 0.0])
    s = BoxList(torch.tensor([[0.0, 0.0, 9.0, 9.0], [0.0, 0.0, 8.0, 9.0], [20.0, 20.0, 21.0, 21.0]]), (40, 30))
    s.add_field("scores", torch.tensor([0.5, 0.9, 0.3]))
    assert boxlist_nms(s, 0.5).bbox.tolist() == [[0, 0, 8, 9], [20, 20, 21, 21]]
    assert len(remove_small_boxes(s, 3)) == 2
    both = cat_boxlist([b, b])
    assert len(both) == 4 and both.get_field("labels").tolist() == [1, 2, 1, 2]
    with pytest.raises(ValueError):
        cat_boxlist([b, other])


def test_indexing_and_bad_shapes():
    b = _boxes()
    assert b[torch.tensor([False, True])].get_field("labels").tolist() == [2]
    assert len(BoxList(torch.zeros(0), (4, 4))) == 0
    with pytest.raises(ValueError):
        BoxList(torch.zeros(3, 5), (4, 4))


def test_to_image_list_pads_to_divisible_size():
    a, b = torch.ones(3, 10, 13), torch.ones(3, 7, 20)
    il = to_image_list([a, b], size_divisible=8)
    assert il.tensors.shape == (2, 3, 16, 24)
    assert il.image_sizes == [(10, 13), (7, 20)]
    assert il.tensors[0, :, 10:].abs().sum() == 0 and il.tensors[1, :, :7, :20].min() == 1


def _integer_boxes(gen, *shape):
    """Integer corners (some degenerate: x2 = x1 - 1 is a zero "+1" width), small enough that every area, sum and
    intersection is exact in float32."""
    xy = torch.randint(0, 900, (*shape, 2), generator=gen)
    wh = torch.randint(-1, 400, (*shape, 2), generator=gen)
    return torch.cat((xy, xy + wh), -1).float()


def test_pairwise_iou_is_torchvisions_box_iou_of_the_plus_one_boxes():
    # Oracle: torchvision's box_iou on the boxes with x2 + 1, y2 + 1 (the "+1" convention as plain widths). On
    # integer corners every step before the final division is exact in both, and the division is correctly
    # rounded in both: the results are bitwise equal. Batched inputs equal the images one at a time.
    from torchvision.ops import box_iou

    from maskrcnn_benchmark.structures.boxlist_ops import pairwise_iou

    gen = torch.Generator().manual_seed(0)
    gt, anchors = _integer_boxes(gen, 3, 17), _integer_boxes(gen, 3, 500)
    gt[0, :3] = anchors[0, :3]  # identical boxes: IoU exactly 1
    shift = torch.tensor([0.0, 0.0, 1.0, 1.0])
    ours = pairwise_iou(gt, anchors)
    assert ours.shape == (3, 17, 500)
    exact = dict(rtol=0, atol=0, equal_nan=True)  # two zero-area boxes: 0 / 0 in both
    for i in range(3):
        torch.testing.assert_close(ours[i], box_iou(gt[i] + shift, anchors[i] + shift), **exact)
        torch.testing.assert_close(ours[i], pairwise_iou(gt[i], anchors[i]), **exact)
    assert torch.equal(ours[0, :3].diagonal(), torch.ones(3))
    torch.testing.assert_close(pairwise_iou(gt.long(), anchors.long()), ours, **exact)  # integer boxes: float IoU
    torch.testing.assert_close(pairwise_iou(gt, anchors[:1]), pairwise_iou(gt, anchors[:1].expand(3, -1, -1)),
                               **exact)
    # real-valued corners: the same formula, rounding aside
    real = torch.rand(40, 4, generator=gen) * 500
    real[:, 2:] += real[:, :2]
    torch.testing.assert_close(pairwise_iou(real, real.flip(0)), box_iou(real + shift, real.flip(0) + shift),
                               rtol=1e-6, atol=1e-7)


def test_xywh_boxes_resized_by_one_ratio_scale_their_widths_as_the_reference():
    """The reference scales the boxes by the ratio in their own mode when both ratios are equal (w' = w r); the
    xyxy round trip gave (w - 1) r + 1."""
    b = BoxList(torch.tensor([[0.0, 0.0, 10.0, 10.0], [5.0, 5.0, 1.0, 1.0]]), (100, 100), mode="xywh")
    assert b.resize((200, 200)).bbox.tolist() == [[0, 0, 20, 20], [10, 10, 2, 2]]
    assert b.resize((200, 100)).convert("xyxy").bbox.tolist() == b.convert("xyxy").resize((200, 100)).bbox.tolist()


def test_one_boxlist_is_concatenated_with_its_fields_as_they_are():
    from maskrcnn_benchmark.structures import SegmentationMask

    b = _boxes()
    b.add_field("masks", SegmentationMask([[[0.0, 0, 9, 0, 9, 9]], [[5.0, 10, 14, 10, 14, 29]]], (40, 30)))
    out = cat_boxlist([b])
    assert out.get_field("masks") is b.get_field("masks") and torch.equal(out.bbox, b.bbox)


def test_a_batch_whose_targets_mix_masks_and_none_names_the_image():
    """One image without a masks field dropped every image's masks and failed later in the mask head with a
    TypeError ('NoneType' object is not subscriptable)."""
    from maskrcnn_benchmark.structures import SegmentationMask
    from maskrcnn_benchmark.structures.target_batch import TargetBatch

    with_masks, without = _boxes(), _boxes()
    with_masks.add_field("masks", SegmentationMask([[[0.0, 0, 9, 0, 9, 9]], [[5.0, 10, 14, 10, 14, 29]]], (40, 30)))
    with pytest.raises(ValueError, match="image 1 of the batch has no 'masks' field"):
        TargetBatch.from_boxlists([with_masks, without])
    assert TargetBatch.from_boxlists([without, without]).has_polygons is False


def test_a_static_batch_over_its_slots_keeps_every_object_and_warns_every_rank(caplog):
    """An image with more objects than MAX_ANNOTATIONS_PER_IMAGE keeps them all (the reference trains on every
    one), in the next multiple of 32 slots: a new shape, which a compiled step compiles on the rank that drew it
    while the others wait in the gradient all-reduce. That was an info line, which a rank other than 0 does not
    keep (its log holds warnings and up): a warning, said once per count."""
    import logging

    from maskrcnn_benchmark.structures import target_batch as tb
    from maskrcnn_benchmark.structures.target_batch import TargetBatch

    def image(k):
        t = BoxList(torch.rand(k, 4) * 10 + torch.tensor([0.0, 0.0, 10.0, 10.0]), (40, 30), mode="xyxy")
        t.add_field("labels", torch.ones(k, dtype=torch.int64))
        return t

    tb._warned.discard(100)
    with caplog.at_level(logging.WARNING, logger=tb.logger.name):
        batch = TargetBatch.from_boxlists([image(100), image(3)], max_gt=96)
        TargetBatch.from_boxlists([image(100), image(3)], max_gt=96)
    assert batch.boxes.shape[:2] == (2, 128) and int(batch.valid.sum()) == 103
    warned = [r for r in caplog.records if r.levelno >= logging.WARNING and "MAX_ANNOTATIONS_PER_IMAGE" in r.message]
    assert len(warned) == 1 and "recompiles" in warned[0].message
