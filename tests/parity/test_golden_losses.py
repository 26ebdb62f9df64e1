"""RPN, box and mask losses and their gradients against the original maskrcnn-benchmark (../shared/golden),
with the reference's recorded sampling masks injected (the two samplers draw different random numbers)."""
import torch

from helpers import r50_cfg
from maskrcnn_benchmark.modeling.balanced_positive_negative_sampler import BalancedPositiveNegativeSampler
from maskrcnn_benchmark.modeling.box_coder import BoxCoder
from maskrcnn_benchmark.modeling.compat import box_losses, proposals_from_boxlists, target_batch
from maskrcnn_benchmark.modeling.matcher import Matcher, batched_iou
from maskrcnn_benchmark.modeling.roi_heads.box_head.loss import make_roi_box_loss_evaluator
from maskrcnn_benchmark.modeling.roi_heads.mask_head.loss import mask_rcnn_loss, polygon_mask_targets
from maskrcnn_benchmark.modeling.rpn.anchor_generator import AnchorGenerator
from maskrcnn_benchmark.modeling.rpn.rpn import RPNLossComputation, _flatten_head_outputs
from maskrcnn_benchmark.modeling.utils import image_sizes_tensor, pad_boxes
from maskrcnn_benchmark.structures import BoxList, SegmentationMask

# golden README: losses differ by <= 1 ulp between thread counts, gradients by <= 1e-12.
LOSS_RTOL = 1e-5
GRAD_ATOL = 1e-7


def _targets(golden_targets, device, with_masks=False):
    out = []
    for t in golden_targets:
        size = tuple(t["image_size_wh"])
        b = BoxList(t["bbox_xyxy"], size)
        b.add_field("labels", t["labels"])
        if with_masks:
            b.add_field("masks", SegmentationMask([[p for p in inst if len(p) >= 6] for inst in t["polygons"]], size))
        out.append(b.to(device))
    return out


class _Injected:
    """Stands in for the sampler and returns the reference's recorded masks."""

    def __init__(self, pos, neg, device):
        self.pos, self.neg = torch.stack(pos).to(device), torch.stack(neg).to(device)

    def __call__(self, labels):
        assert labels.shape == self.pos.shape
        return self.pos, self.neg


def test_rpn_losses_and_gradients(golden, device, mode):
    g = golden("losses")
    targets = _targets(g["targets"], device)
    cfg = r50_cfg()
    r = cfg.MODEL.RPN
    for v in g["rpn"]:
        inputs = v["inputs"]
        sizes = [tuple(s) for s in inputs["image_sizes_hw"]]
        gen = AnchorGenerator(r.ANCHOR_SIZES, r.ASPECT_RATIOS, r.ANCHOR_STRIDE, v["straddle_thresh"])
        anchors = gen.grid_anchors([tuple(s) for s in inputs["feature_shapes_hw"]], device)
        loss = RPNLossComputation(Matcher(v["fg_iou"], v["bg_iou"], allow_low_quality_matches=True),
                                  _Injected(v["sampled_pos_mask"], v["sampled_neg_mask"], device),
                                  BoxCoder((1.0, 1.0, 1.0, 1.0)), gen)
        batch, size_tensor = target_batch(targets, device=device), image_sizes_tensor(sizes, device)
        labels, regression_targets = mode(loss.prepare_targets)(torch.cat(anchors), batch, size_tensor)
        assert torch.equal(labels.cpu(), torch.stack(v["anchor_labels"]))
        torch.testing.assert_close(regression_targets.cpu(), torch.stack(v["anchor_regression_targets"]), rtol=0,
                                   atol=1e-6)
        logits = [t.detach().clone().to(device).requires_grad_(True) for t in inputs["objectness_logits"]]
        deltas = [t.detach().clone().to(device).requires_grad_(True) for t in inputs["box_regression"]]
        obj, reg = _flatten_head_outputs(logits, deltas)
        obj_loss, box_loss = mode(loss)(anchors, obj, reg, batch, size_tensor)
        torch.testing.assert_close(obj_loss.cpu(), v["objectness_loss"], rtol=LOSS_RTOL, atol=0)
        torch.testing.assert_close(box_loss.cpu(), v["box_loss"], rtol=LOSS_RTOL, atol=0)
        # One backward of the sum gives both: the objectness loss does not depend on the deltas nor the box loss on
        # the logits (exact zeros). Compiled, both losses come out of one autograd node, which runs backward once.
        grads = torch.autograd.grad(obj_loss + box_loss, logits + deltas)
        # every level compared (zip() would stop at the shorter list)
        assert len(v["grad_objectness_loss_wrt_objectness"]) == len(logits)
        assert len(v["grad_box_loss_wrt_box_regression"]) == len(deltas)
        for ours, ref in zip(grads[: len(logits)], v["grad_objectness_loss_wrt_objectness"]):
            torch.testing.assert_close(ours.cpu(), ref, rtol=0, atol=GRAD_ATOL)
        for ours, ref in zip(grads[len(logits):], v["grad_box_loss_wrt_box_regression"]):
            torch.testing.assert_close(ours.cpu(), ref, rtol=0, atol=GRAD_ATOL)


def test_box_losses_and_gradients(golden, device, mode):
    g = golden("losses")
    targets = _targets(g["targets"], device)
    props = [BoxList(p["bbox_xyxy"], tuple(p["image_size_wh"])).to(device) for p in g["box"]["inputs"]["proposals"]]
    offsets = torch.tensor([0] + [len(p) for p in props[:-1]], device=device).cumsum(0)
    for v in g["box"]["variants"]:
        evaluator = make_roi_box_loss_evaluator(r50_cfg())
        evaluator.sampler = _Injected(v["sampled_pos_mask"], v["sampled_neg_mask"], device)
        samples = mode(evaluator.subsample)(proposals_from_boxlists(props, device), target_batch(targets, device))
        # rows: image by image, ascending proposal index within each image, as the reference concatenates them
        ref_rows = torch.cat([offsets[i].cpu() + idx for i, idx in enumerate(v["sampled_indices_per_image"])])
        rows = offsets[samples.image_index] + samples.proposal_index
        assert torch.equal(rows.cpu(), ref_rows)
        assert torch.equal(samples.labels.cpu(), torch.cat(v["sampled_labels"]))
        ref_targets = torch.cat(v["sampled_regression_targets"])
        if device.type == "cpu":
            torch.testing.assert_close(samples.regression_targets.cpu(), ref_targets, rtol=0, atol=1e-5)
        else:
            # 1e-5, or one float32 ulp where that is coarser (targets reach ~140, whose ulp is 1.5e-5): inductor
            # on CUDA fuses the encoding's divisions and logs in another order, 1 ulp apart (seen on an H200)
            ulp = torch.nextafter(ref_targets.abs(), torch.tensor(float("inf"))) - ref_targets.abs()
            assert ((samples.regression_targets.cpu() - ref_targets).abs() <= ulp.clamp(min=1e-5)).all()
        logits = g["box"]["inputs"]["class_logits_all_proposals"].detach().clone().to(device).requires_grad_(True)
        deltas = g["box"]["inputs"]["box_regression_all_proposals"].detach().clone().to(device).requires_grad_(True)
        # the sampled rows laid into the sample slots, then the loss in the mode under test
        cls_loss, box_loss = box_losses(mode(evaluator), logits[rows], deltas[rows], samples)
        torch.testing.assert_close(cls_loss.cpu(), v["classification_loss"], rtol=LOSS_RTOL, atol=0)
        torch.testing.assert_close(box_loss.cpu(), v["box_loss"], rtol=LOSS_RTOL, atol=0)
        # one backward of the sum (as above: each loss depends on one input only; compiled, one autograd node)
        grad_logits, grad = torch.autograd.grad(cls_loss + box_loss, (logits, deltas))
        torch.testing.assert_close(grad_logits.cpu(), v["grad_classification_loss_wrt_class_logits"], rtol=0,
                                   atol=GRAD_ATOL)
        torch.testing.assert_close(grad.cpu(), v["grad_box_loss_wrt_box_regression"], rtol=0, atol=GRAD_ATOL)


def test_mask_targets_loss_and_gradient(golden, device, mode):
    g = golden("losses")
    targets = [t.to("cpu") for t in _targets(g["targets"], device, with_masks=True)]
    m = g["mask"]
    proposals = [p["bbox_xyxy"] for p in m["positive_proposals"]]
    gt_boxes, gt_valid, gt_fields = pad_boxes(targets, fields=("labels",))
    padded, valid, _ = pad_boxes([BoxList(p, (1, 1)) for p in proposals])
    matches = Matcher(0.5, 0.5, allow_low_quality_matches=False)(batched_iou(gt_boxes, gt_valid, padded))
    labels, mask_targets = [], []
    for i, (props, t) in enumerate(zip(proposals, targets)):
        matched = matches[i, : len(props)]
        assert (matched >= 0).all()
        labels.append(gt_fields["labels"][i, matched])
        packed = t.get_field("masks").packed_polygons()
        mask_targets.append(mode(polygon_mask_targets)(packed, matched.to(device), props.to(device), 28,
                                                 torch.tensor(t.size).expand(len(props), 2)).cpu())
    assert len(labels) == len(m["matched_labels"]) and len(mask_targets) == len(m["mask_targets"])  # every image
    for ours, ref in zip(labels, m["matched_labels"]):
        assert torch.equal(ours, ref)
    for ours, ref in zip(mask_targets, m["mask_targets"]):
        assert torch.equal(ours, ref.bool())
    labels = torch.cat(labels)
    labels = labels.to(device)
    selected = m["mask_logits_selected"].detach().clone().to(device).requires_grad_(True)
    logits = torch.zeros((len(labels), 81, 28, 28), device=device).index_put(
        (torch.arange(len(labels), device=device), labels), selected)
    loss = mode(mask_rcnn_loss)(logits, labels, torch.cat(mask_targets).to(device))
    torch.testing.assert_close(loss.cpu(), m["mask_loss"], rtol=LOSS_RTOL, atol=0)
    (grad,) = torch.autograd.grad(loss, selected)
    torch.testing.assert_close(grad.cpu(), m["grad_mask_loss_wrt_mask_logits_selected"], rtol=0, atol=GRAD_ATOL)


def test_sampler_budget_matches_the_reference_counts(golden):
    """Our random sampler (different random numbers) takes as many positives/negatives per image as the
    reference's did."""
    g = golden("losses")
    v = g["rpn"][1]
    labels = torch.stack(v["anchor_labels"])
    pos, neg = BalancedPositiveNegativeSampler(v["batch_size_per_image"], v["positive_fraction"])(labels)
    assert pos.sum(1).tolist() == [int(x.sum()) for x in v["sampled_pos_mask"]]
    assert neg.sum(1).tolist() == [int(x.sum()) for x in v["sampled_neg_mask"]]
