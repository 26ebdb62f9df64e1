"""ROI sampling and the box head's losses, batched over the images of a GPU batch.

Reference semantics: proposals (which already include the ground-truth boxes, appended by the RPN in training)
are matched to the ground truth at IoU 0.5 (no low-quality matches), up to BATCH_SIZE_PER_IMAGE ROIs per image
are sampled with at most POSITIVE_FRACTION foreground; the classifier is trained on all sampled ROIs, the box
regression on the foreground ones, normalized by the number of sampled ROIs. Matching and sampling run on
padded ``(N, P)`` tensors; the only host sync is the sampled count.
"""
import torch
import torch.nn.functional as F

from ...balanced_positive_negative_sampler import BalancedPositiveNegativeSampler
from ...box_coder import BoxCoder
from ...matcher import Matcher, batched_iou
from ...utils import pad_boxes


class BoxHeadSamples:
    """The ROIs sampled for training with their targets (all images concatenated, image by image, each image's
    ROIs in proposal order, as the reference concatenates them)."""

    def __init__(self, rois, labels, regression_targets, image_index, proposal_index, matched_gt):
        self.rois = rois                              # (K, 5): image index, x1, y1, x2, y2
        self.labels = labels                          # (K,) class, 0 = background
        self.regression_targets = regression_targets  # (K, 4) (for every sampled ROI, as the reference)
        self.image_index = image_index                # (K,)
        self.proposal_index = proposal_index          # (K,) index among the image's proposals
        self.matched_gt = matched_gt                  # (K,) index of the matched ground truth in its image


def box_head_loss(class_logits, box_regression, labels, regression_targets, cls_agnostic=False):
    """Cross-entropy over all sampled ROIs, and smooth L1 (beta 1) on the foreground ROIs' own-class deltas,
    summed and divided by the number of sampled ROIs.

    The background rows are masked out *before* the loss (``where``), not multiplied by zero afterwards: with
    early-training activations the background rows' predictions, or their targets against a degenerate
    proposal (zero width after decoding), can be inf/NaN, and ``inf * 0`` is NaN in the loss and in the
    gradients. The reference only ever reads the foreground rows, so it never sees them either.
    """
    class_logits = class_logits.float()
    box_regression = box_regression.float()
    loss_classifier = F.cross_entropy(class_logits, labels)
    fg = (labels > 0)[:, None]
    cls = (labels > 0).long() if cls_agnostic else labels.clamp(min=0)
    cols = cls[:, None] * 4 + torch.arange(4, device=labels.device)[None, :]
    pred = torch.where(fg, box_regression.gather(1, cols), 0.0)
    target = torch.where(fg, regression_targets.float(), 0.0)
    diff = (pred - target).abs()
    per = torch.where(diff < 1.0, 0.5 * diff ** 2, diff - 0.5)
    return loss_classifier, per.sum() / max(labels.numel(), 1)


class FastRCNNLossComputation:
    def __init__(self, matcher, sampler, box_coder, cls_agnostic_bbox_reg=False):
        self.matcher = matcher
        self.sampler = sampler
        self.box_coder = box_coder
        self.cls_agnostic_bbox_reg = cls_agnostic_bbox_reg

    @torch.no_grad()
    def subsample(self, proposals, targets):
        """Match, label and sample the proposals of every image; returns :class:`BoxHeadSamples`."""
        device = proposals[0].bbox.device
        gt_boxes, gt_valid, gt_fields = pad_boxes(targets, fields=("labels",), device=device)
        boxes, valid, _ = pad_boxes(proposals, device=device)
        matches = self.matcher(batched_iou(gt_boxes, gt_valid, boxes))
        labels = gt_fields["labels"].long().gather(1, matches.clamp(min=0))
        labels[matches == Matcher.BELOW_LOW_THRESHOLD] = 0
        labels[(matches == Matcher.BETWEEN_THRESHOLDS) | ~valid] = -1
        pos, neg = self.sampler(labels)
        img, idx = (pos | neg).nonzero(as_tuple=True)
        matched = matches[img, idx].clamp(min=0)
        sel_boxes = boxes[img, idx]
        regression_targets = self.box_coder.encode(gt_boxes[img, matched], sel_boxes)
        rois = torch.cat((img[:, None].to(sel_boxes.dtype), sel_boxes), dim=1)
        return BoxHeadSamples(rois, labels[img, idx], regression_targets, img, idx, matched)

    def __call__(self, class_logits, box_regression, samples):
        return box_head_loss(class_logits, box_regression, samples.labels, samples.regression_targets,
                             self.cls_agnostic_bbox_reg)


def make_roi_box_loss_evaluator(cfg):
    h = cfg.MODEL.ROI_HEADS
    return FastRCNNLossComputation(
        Matcher(h.FG_IOU_THRESHOLD, h.BG_IOU_THRESHOLD, allow_low_quality_matches=False),
        BalancedPositiveNegativeSampler(h.BATCH_SIZE_PER_IMAGE, h.POSITIVE_FRACTION),
        BoxCoder(h.BBOX_REG_WEIGHTS), cfg.MODEL.CLS_AGNOSTIC_BBOX_REG)
