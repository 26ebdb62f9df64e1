"""Mask targets, ROIAlign and NMS against the original maskrcnn-benchmark's outputs (../shared/golden)."""
import torch

from maskrcnn_benchmark.layers import nms, roi_align
from maskrcnn_benchmark.layers.nms import nms_keep_padded
from maskrcnn_benchmark.layers.rasterize import pad_polygons
from maskrcnn_benchmark.layers.roi_align import multilevel_roi_align
from maskrcnn_benchmark.modeling.roi_heads.mask_head.loss import (CURRENT, LEGACY_2018, padded_mask_targets,
                                                                  polygon_mask_targets)


def _pack(polygons):
    """The reference drops parts with fewer than 3 points (6 numbers); so does our dataset."""
    parts = [[p for p in inst if len(p) >= 6] for inst in polygons]
    vertices = torch.cat([torch.tensor(p, dtype=torch.float32).view(-1, 2) for inst in parts for p in inst])
    lengths = torch.tensor([len(p) // 2 for inst in parts for p in inst])
    owner = torch.tensor([i for i, inst in enumerate(parts) for _ in inst])
    return vertices, lengths, owner


def _padded(packed, k, device):
    """The layout the training step reads (TargetBatch's): polygons padded per instance on the host."""
    vertices, lengths, owner = packed
    slot, nxt, part, num_parts = pad_polygons(lengths, owner, k)
    padded = torch.zeros((k * nxt.shape[1], 2))
    padded[slot] = vertices
    parts = torch.zeros((k, num_parts), dtype=torch.bool)
    return tuple(t.to(device) for t in (padded.view(k, -1, 2), nxt, part, parts))


def test_mask_targets_identical_on_all_200_instances(golden, device, mode):
    g = golden("mask_targets")
    packed = _pack(g["polygons"])
    k = len(g["polygons"])
    assert k == 200, "the golden file holds 200 instances"
    boxes, sizes = g["boxes_xyxy"].to(device), g["image_size_wh"].to(device)
    roi = torch.arange(k, device=device)
    # The static step's op on the padded layout (mode: eager, or under torch.compile), and the reference's
    # interface on packed polygons (eager).
    # MLPerf semantics (NVIDIA v0.7: 2018 crop, pycocotools rasterization, parts unioned): exact.
    legacy = mode(padded_mask_targets)(*_padded(packed, k, device), roi, boxes, g["resolution"], sizes, LEGACY_2018)
    assert torch.equal(legacy.cpu(), g["targets_legacy_2018"].bool())
    reference_api = polygon_mask_targets(tuple(t.to(device) for t in packed), roi, boxes, g["resolution"], sizes,
                                         LEGACY_2018)
    assert torch.equal(reference_api.cpu(), g["targets_legacy_2018"].bool())
    # maskrcnn-benchmark HEAD's crop (clamped corner, raw size): exact too, including sub-pixel and outside boxes.
    current = mode(padded_mask_targets)(*_padded(packed, k, device), roi, boxes, g["resolution"], sizes, CURRENT)
    assert torch.equal(current.cpu(), g["targets"].bool())


def test_segmentation_mask_crop_then_resize_is_the_references_on_all_200_instances(golden):
    """The public API the mask loss's docstring names, ``SegmentationMask.crop(box).resize((M, M))``, on each
    instance as the dataset reads it from a COCO annotation (the golden degenerate parts reach the dataset's drop),
    as the 2018
    reference's ``Polygons`` computes it (the MLPerf semantics): shift by the raw box corner, scale by ``M / max(x2
    - x1, 1)`` with the box's float32 width. The crop rounded its size to whole pixels, and the resize then scaled
    by ``M / round(w)``: 119 of the 200 golden instances differed (a box 10.49 wide: 14 pixels)."""
    from maskrcnn_benchmark.structures.segmentation_mask import SegmentationMask

    import types

    from maskrcnn_benchmark.data.datasets import COCODataset

    g = golden("mask_targets")
    m = int(g["resolution"])
    reader = types.SimpleNamespace(ann_file="golden mask_targets", _warned_degenerate=True)
    assert sum(len(p) < 6 for parts in g["polygons"] for p in parts) > 0  # degenerate parts the dataset must drop
    for i, (parts, box, size) in enumerate(zip(g["polygons"], g["boxes_xyxy"], g["image_size_wh"])):
        # the instance as the dataset reads a COCO annotation (its degenerate parts dropped there, not here)
        w, h = size.tolist()
        masks = COCODataset._segmentation(reader, [{"id": i, "segmentation": [list(p) for p in parts]}], w, h)
        got = masks.crop(box).resize((m, m)).get_mask_tensor()[0]
        assert torch.equal(got.bool(), g["targets_legacy_2018"][i].bool()), f"instance {i}"


def test_roi_align_forward_and_backward(golden, device, mode):
    for case in golden("roi_align")["cases"]:
        feats = case["features"].detach().clone().to(device).requires_grad_(True)
        rois = case["rois"].to(device)
        out = mode(roi_align)(feats, rois, case["output_size"], case["spatial_scale"], case["sampling_ratio"])
        out.backward(case["grad_output"].to(device))
        if device.type == "cpu":
            # torchvision's aligned=False CPU kernel is the reference's: bitwise equal (golden README).
            assert torch.equal(out.detach(), case["output"])
            assert torch.equal(feats.grad, case["grad_input"])
        else:
            # The golden README's bound for an independent fp32 kernel (fp32 sample coordinates at ~64 px).
            torch.testing.assert_close(out.detach().cpu(), case["output"], atol=1e-4, rtol=0)
            torch.testing.assert_close(feats.grad.cpu(), case["grad_input"], atol=1e-4, rtol=0)
        feats64 = case["features"].detach().double().to(device).requires_grad_(True)
        out64 = mode(roi_align)(feats64, rois.double(), case["output_size"], case["spatial_scale"], case["sampling_ratio"])
        out64.backward(case["grad_output"].double().to(device))
        torch.testing.assert_close(out64.detach().cpu(), case["output_fp64"], atol=1e-12, rtol=0)
        torch.testing.assert_close(feats64.grad.cpu(), case["grad_input_fp64"], atol=1e-12, rtol=0)


def test_the_static_steps_multilevel_roi_align_forward_and_backward(golden, device):
    """The op the training step runs (``maskrcnn::multilevel_roi_align``, one call over every FPN level, and its
    backward) on each golden case as a one-level pyramid (every ROI on level 0): the reference's outputs and input
    gradients, bitwise on the CPU (its sparse products sum torchvision's kernel's terms in the same order). Eager
    only: compiled, the op is one opaque node that runs this same body (a compiled step runs it inside
    tests/engine/test_compiled_equals_eager.py's)."""
    for case in golden("roi_align")["cases"]:
        feats = case["features"].detach().clone().to(device).requires_grad_(True)
        rois = case["rois"].to(device)
        levels = torch.zeros(len(rois), dtype=torch.int64, device=device)
        out = multilevel_roi_align([feats], rois, levels, case["output_size"], [case["spatial_scale"]],
                                   case["sampling_ratio"])
        out.backward(case["grad_output"].to(device))
        if device.type == "cpu":
            assert torch.equal(out.detach(), case["output"])
            assert torch.equal(feats.grad, case["grad_input"])
        else:  # as test_roi_align_forward_and_backward: the README's bound for another fp32 kernel
            torch.testing.assert_close(out.detach().cpu(), case["output"], atol=1e-4, rtol=0)
            torch.testing.assert_close(feats.grad.cpu(), case["grad_input"], atol=1e-4, rtol=0)


def _iou_plus_one(a, b):
    lt = torch.max(a[:2], b[:2])
    rb = torch.min(a[2:], b[2:])
    wh = (rb - lt + 1).clamp(min=0)
    inter = wh[0] * wh[1]
    area = lambda x: (x[2] - x[0] + 1) * (x[3] - x[1] + 1)  # noqa: E731
    return inter / (area(a) + area(b) - inter)


def test_nms_keep_sets_with_gpu_semantics(golden, device, mode):
    """MLPerf runs the reference's CUDA NMS: suppress at IoU > threshold, keep in score order. The golden keep
    sets come from its CPU kernel (IoU >= threshold, ascending index order). We process boxes in the recorded
    ``sort_order`` (torch's CPU sort is not stable, so ties are ordered as the reference saw them), compare
    sets, and allow exactly one difference: a box the CPU kernel suppressed at IoU == threshold is kept."""
    for case in golden("nms")["cases"]:
        boxes, order, thr = case["boxes"], case["sort_order"], case["threshold"]
        if boxes.numel() == 0:
            assert nms(boxes, case["scores"], thr).numel() == 0
            continue
        ranks = torch.arange(len(order), 0, -1, dtype=torch.float32)  # strictly decreasing = sort_order
        keep = order[mode(nms)(boxes[order].to(device), ranks.to(device), thr).cpu()]
        # the training step's NMS (on the device, a keep mask over padded rows: one row here) keeps the same set
        sorted_boxes = boxes[order][None].to(device)
        mask = mode(nms_keep_padded)(sorted_boxes, ranks[None].to(device), torch.ones_like(ranks, dtype=torch.bool)
                                     [None].to(device), thr)[0].cpu()
        assert set(order[mask].tolist()) == set(keep.tolist()), case["name"]
        assert torch.equal(keep, order[torch.isin(order, keep)]), case["name"]  # score (processing) order
        ours, ref = set(keep.tolist()), set(case["keep"].tolist())
        assert ref <= ours, case["name"]
        for extra in ours - ref:
            ious = [_iou_plus_one(boxes[extra], boxes[k]).item() for k in ours if k != extra]
            assert any(abs(v - thr) < 1e-6 for v in ious), (case["name"], thr, extra)
        if case["name"] != "iou_equals_threshold":
            assert ours == ref, case["name"]
        else:
            assert ours != ref, "the >= vs > difference must show on these cases"
