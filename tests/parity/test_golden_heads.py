"""RPN and box post-processing against the original maskrcnn-benchmark's outputs (../shared/golden)."""
import pytest
import torch

from ulps import BOX_ULPS, SCORE_ULPS, box_error_in_image_ulps, max_ulps, paired_box_error_in_image_ulps
from helpers import r50_cfg
from maskrcnn_benchmark.modeling.box_coder import BoxCoder
from maskrcnn_benchmark.modeling.roi_heads.box_head.inference import make_roi_box_post_processor
from maskrcnn_benchmark.modeling.rpn.anchor_generator import AnchorGenerator
from maskrcnn_benchmark.modeling.compat import target_batch
from maskrcnn_benchmark.modeling.rpn.rpn import Proposals, RPNPostProcessor, _flatten_head_outputs
from maskrcnn_benchmark.modeling.utils import image_sizes_tensor
from maskrcnn_benchmark.structures import BoxList


def _rpn_inputs(inputs, device):
    objectness, regression = _flatten_head_outputs([t.to(device) for t in inputs["objectness_logits"]],
                                                   [t.to(device) for t in inputs["box_regression"]])
    anchors = [a.to(device) for a in inputs["anchors_xyxy"]]
    return anchors, objectness, regression, [tuple(s) for s in inputs["image_sizes_hw"]]


def test_anchors_and_visibility_match(golden):
    inputs = golden("rpn_post")["inputs"]
    cfg = r50_cfg()
    r = cfg.MODEL.RPN
    gen = AnchorGenerator(r.ANCHOR_SIZES, r.ASPECT_RATIOS, r.ANCHOR_STRIDE, r.STRADDLE_THRESH)
    anchors = gen.grid_anchors([tuple(s) for s in inputs["feature_shapes_hw"]], "cpu")
    assert len(anchors) == len(inputs["anchors_xyxy"])  # zip() would stop at the shorter list
    for ours, ref in zip(anchors, inputs["anchors_xyxy"]):
        assert torch.equal(ours, ref)
    sizes = torch.tensor(inputs["image_sizes_hw"], dtype=torch.float32)
    vis = gen.visibility(torch.cat(anchors), sizes)
    assert torch.equal(vis, torch.stack([torch.cat(v) for v in inputs["anchor_visibility"]]))


# Compiled, each variant is one more cold inductor compile (about 30 s on 2 cores). A compiled training step runs
# the training selection with the ground truth appended: that variant, and the small one for what the others add
# (per-image top-N, MIN_SIZE 6, other top-N sizes). Not compiled: the test variants (evaluation runs the eager
# model) and the training ones without ground truth (the same selection as with it, without its last step).
COMPILED_RPN_VARIANTS = ("train_per_batch_with_gt", "small_train_per_image")


def test_rpn_post_processing_identical_including_order(golden, device, mode):
    g = golden("rpn_post")
    anchors, objectness, regression, sizes = _rpn_inputs(g["inputs"], device)
    assert len(g["inputs"]["targets"]) == len(sizes)  # zip() would stop at the shorter list
    targets = [BoxList(t["bbox_xyxy"].to(device), (w, h)) for t, (h, w) in zip(g["inputs"]["targets"], sizes)]
    assert set(COMPILED_RPN_VARIANTS) <= {v["name"] for v in g["variants"]}  # none skipped by a renamed variant
    for v in g["variants"]:
        if mode.compiled and v["name"] not in COMPILED_RPN_VARIANTS:
            continue
        c = v["config"]
        post = RPNPostProcessor(c["PRE_NMS_TOP_N"], c["POST_NMS_TOP_N"], c["NMS_THRESH"], c["MIN_SIZE"],
                                c["FPN_POST_NMS_TOP_N"], v["training"] and v["fpn_post_nms_per_batch"],
                                BoxCoder((1.0, 1.0, 1.0, 1.0)))
        batch = target_batch(targets, device=device) if v["with_targets"] else None

        def select(anchors, objectness, regression, sizes, batch):
            p = post.select(anchors, objectness, regression, sizes, batch)
            return p.boxes, p.objectness, p.valid

        # the selection runs in the mode under test (what the training step runs); the BoxLists are read after
        out = Proposals(*mode(select)(anchors, objectness, regression, image_sizes_tensor(sizes, device), batch))
        out = out.to_boxlists(sizes)
        assert len(out) == len(v["proposals"]) == len(sizes), v["name"]
        for ours, ref in zip((o.to("cpu") for o in out), v["proposals"]):
            assert ours.size == tuple(ref["image_size_wh"]), v["name"]
            # Same arithmetic in the same order: bitwise equal boxes and probabilities in the same order (per
            # batch: level order, unsorted; per image and test: by decreasing probability). Only the order among
            # *equal* probabilities is free: the reference leaves it to torch.topk, whose tie order depends on
            # the device and the tensor length; we keep level/rank order there.
            # Boxes go through exp: last bits per BOX_ULPS (ulps.py); probabilities (sigmoid) are exact on the CPU
            # (the reference's arithmetic). On CUDA the sigmoid's exp is CUDA's, not the CPU's vectorized one: last
            # bits differ (seen on an H200), so there the golden README's bound for another fp32 implementation,
            # 1e-6, applies, and the order among probabilities within 1e-6 of one another is free too (inductor's
            # sigmoid on an H200 swapped such neighbours: paired by sorting on the probability, each box met its
            # neighbour's).
            atol = 0.0 if device.type == "cpu" else 1e-6
            if device.type == "cpu":
                assert torch.equal(ours.get_field("objectness"), ref["objectness"]), v["name"]
            else:
                torch.testing.assert_close(ours.get_field("objectness"), ref["objectness"], rtol=0, atol=atol,
                                           msg=v["name"])
            assert paired_box_error_in_image_ulps(ours.bbox, ours.get_field("objectness"), ref["bbox_xyxy"],
                                                  ref["objectness"], ours.size, atol) <= BOX_ULPS, v["name"]
            # and in place where a probability is more than 2 atol from its neighbours (its rank is fixed)
            close = (ref["objectness"][1:] - ref["objectness"][:-1]).abs() <= 2 * atol  # each side within atol
            alone = ~(torch.cat((close, close.new_zeros(1))) | torch.cat((close.new_zeros(1), close)))
            assert box_error_in_image_ulps(ours.bbox[alone], ref["bbox_xyxy"][alone], ours.size) <= BOX_ULPS


@pytest.mark.parametrize("padded", [False, True], ids=["per-group nms", "padded nms"])
def test_box_post_processing_identical(golden, device, padded):
    """Both NMS forms of the box post-processing: per image and class (the CPU's), padded (other devices'). Eager
    only: the box post-processing runs in evaluation, and evaluation runs the eager model (``COMPILE`` compiles the
    training step), so no run compiles it."""
    g = golden("box_post")
    props = g["inputs"]["proposals"]
    rois = torch.cat([torch.cat((torch.full((len(p["bbox_xyxy"]), 1), float(i)), p["bbox_xyxy"]), 1)
                      for i, p in enumerate(props)])
    sizes = [(p["image_size_wh"][1], p["image_size_wh"][0]) for p in props]
    for v in g["variants"]:
        cfg = r50_cfg("MODEL.ROI_HEADS.SCORE_THRESH", v["score_thresh"], "MODEL.ROI_HEADS.NMS", v["nms"],
                      "MODEL.ROI_HEADS.DETECTIONS_PER_IMG", v["detections_per_img"])
        post = make_roi_box_post_processor(cfg)
        post.padded_nms = padded
        out = post(g["inputs"]["class_logits"].to(device), g["inputs"]["box_regression"].to(device),
                   rois.to(device), sizes)
        assert len(out) == len(v["results"]) == len(props)
        for ours, ref in zip((o.to("cpu") for o in out), v["results"]):
            assert ours.size == tuple(ref["image_size_wh"])
            # Class-major in both. Within a class the reference's CPU NMS returns ascending proposal index; its GPU
            # NMS (what MLPerf runs) returns decreasing score, as we do: order the reference's rows that way.
            key = ref["labels"].double() * 10 - ref["scores"].double()
            order = torch.sort(key, stable=True).indices
            assert torch.equal(ours.get_field("labels"), ref["labels"][order]), len(ref["labels"])
            # scores (softmax) and boxes (exp): last bits per SCORE_ULPS / BOX_ULPS (ulps.py); labels, order exact
            assert max_ulps(ours.get_field("scores"), ref["scores"][order]) <= SCORE_ULPS
            assert box_error_in_image_ulps(ours.bbox, ref["bbox_xyxy"][order], ours.size) <= BOX_ULPS
