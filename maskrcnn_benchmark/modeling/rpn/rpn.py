"""Region proposal network: head, proposal selection and loss, batched over images.

Proposal selection follows the MLPerf reference: per image and FPN level keep the ``PRE_NMS_TOP_N`` best anchors,
decode, clip, drop small boxes, NMS at ``NMS_THRESH`` ("+1" IoU), keep ``POST_NMS_TOP_N``; then merge the levels
and keep ``FPN_POST_NMS_TOP_N`` — in training over the whole per-GPU batch when ``FPN_POST_NMS_PER_BATCH``
(v0.7 semantics: images compete for the budget), otherwise per image (always per image at test time).
All images and levels go through one top-k, one decode and one batched NMS.
"""
import torch
import torch.nn.functional as F
from torch import nn

from ...layers import batched_nms
from ...structures.bounding_box import TO_REMOVE, BoxList
from ..balanced_positive_negative_sampler import BalancedPositiveNegativeSampler
from ..box_coder import BoxCoder
from ..matcher import Matcher, batched_iou
from ..registry import RPN_HEADS
from ..utils import image_sizes_tensor, pad_boxes, rank_within_groups
from .anchor_generator import AnchorGenerator


@RPN_HEADS.register("SingleConvRPNHead")
class RPNHead(nn.Module):
    """3x3 conv + ReLU shared by all levels, then 1x1 objectness logits and box deltas. Built as the reference's
    registry builds RPN heads: ``RPN_HEADS[name](cfg, in_channels, num_anchors)``."""

    def __init__(self, cfg, in_channels, num_anchors):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, in_channels, kernel_size=3, stride=1, padding=1)
        self.cls_logits = nn.Conv2d(in_channels, num_anchors, kernel_size=1)
        self.bbox_pred = nn.Conv2d(in_channels, num_anchors * 4, kernel_size=1)
        for layer in (self.conv, self.cls_logits, self.bbox_pred):
            nn.init.normal_(layer.weight, std=0.01)
            nn.init.constant_(layer.bias, 0)

    def forward(self, features):
        logits, deltas = [], []
        for x in features:
            t = F.relu(self.conv(x))
            logits.append(self.cls_logits(t))
            deltas.append(self.bbox_pred(t))
        return logits, deltas


def _flatten_head_outputs(logits, deltas):
    """``(N, A, H, W)`` / ``(N, 4A, H, W)`` -> ``(N, H*W*A)`` / ``(N, H*W*A, 4)``, matching the anchor order."""
    obj, reg = [], []
    for lg, dl in zip(logits, deltas):
        n, a, h, w = lg.shape
        obj.append(lg.permute(0, 2, 3, 1).reshape(n, -1).float())
        reg.append(dl.view(n, a, 4, h, w).permute(0, 3, 4, 1, 2).reshape(n, -1, 4).float())
    return obj, reg


def clip_boxes(boxes, hw):
    """Clamp ``(..., 4)`` boxes to their images: ``x`` to ``[0, w - 1]``, ``y`` to ``[0, h - 1]``.

    ``hw`` holds ``(height, width)`` and broadcasts against ``boxes[..., :2]``."""
    h = hw[..., 0] - TO_REMOVE
    w = hw[..., 1] - TO_REMOVE
    zero = torch.zeros_like(h)
    return torch.stack((boxes[..., 0].clamp(zero, w), boxes[..., 1].clamp(zero, h),
                        boxes[..., 2].clamp(zero, w), boxes[..., 3].clamp(zero, h)), dim=-1)


class RPNPostProcessor:
    """Proposals from the RPN outputs, with the reference's selection, order and numerics.

    Per image and level: sigmoid, top ``pre_nms_top_n`` by probability, decode, clip, drop boxes smaller than
    ``min_size``, NMS, keep the first ``post_nms_top_n`` (in score order). Levels are concatenated P2 first.
    Then ``fpn_post_nms_top_n``: over the whole batch in training when ``per_batch`` (the survivors stay in
    level order, unsorted, as the reference's boolean-mask selection leaves them), otherwise per image, sorted by
    probability. In training the ground-truth boxes are appended with objectness 1 (``add_gt_proposals``).
    ``objectness`` of the output is the probability. Everything runs batched: one top-k per level, one decode,
    one batched NMS.
    """

    def __init__(self, pre_nms_top_n, post_nms_top_n, nms_thresh, min_size, fpn_post_nms_top_n,
                 per_batch, box_coder):
        self.pre_nms_top_n = pre_nms_top_n
        self.post_nms_top_n = post_nms_top_n
        self.nms_thresh = nms_thresh
        self.min_size = min_size
        self.fpn_post_nms_top_n = fpn_post_nms_top_n
        self.per_batch = per_batch
        self.box_coder = box_coder

    @torch.no_grad()
    def __call__(self, anchors, objectness, box_regression, image_sizes_list, targets=None):
        device = objectness[0].device
        n = objectness[0].shape[0]
        sizes = image_sizes_tensor(image_sizes_list, device)
        boxes, scores, levels = [], [], []
        for level, (anc, obj, reg) in enumerate(zip(anchors, objectness, box_regression)):
            k = min(self.pre_nms_top_n, obj.shape[1])
            # top-k of the probabilities, as the reference: sigmoid saturates, and its ties decide the order
            top_scores, idx = obj.float().sigmoid().topk(k, dim=1, sorted=True)
            deltas = reg.gather(1, idx[..., None].expand(-1, -1, 4))
            decoded = self.box_coder.decode(deltas, anc[idx])
            boxes.append(clip_boxes(decoded, sizes[:, None, :].expand(-1, k, -1)))
            scores.append(top_scores)
            levels.append(torch.full((k,), level, dtype=torch.int64, device=device))
        # Flat layout: image-major, then level, then top-k rank: ascending flat index = the reference's order.
        boxes = torch.cat(boxes, dim=1).reshape(-1, 4)
        scores = torch.cat(scores, dim=1).reshape(-1)
        levels = torch.cat(levels)
        image_idx = torch.arange(n, device=device).repeat_interleave(levels.numel())
        groups = image_idx * len(anchors) + levels.repeat(n)

        ws = boxes[:, 2] - boxes[:, 0] + TO_REMOVE
        hs = boxes[:, 3] - boxes[:, 1] + TO_REMOVE
        keep = ((ws >= self.min_size) & (hs >= self.min_size)).nonzero().squeeze(1)
        keep = keep[batched_nms(boxes[keep], scores[keep], groups[keep], self.nms_thresh)].sort().values
        keep = keep[rank_within_groups(groups[keep]) < self.post_nms_top_n]

        if self.per_batch:
            k = min(self.fpn_post_nms_top_n, keep.numel())
            chosen = torch.zeros(keep.numel(), dtype=torch.bool, device=device)
            chosen[scores[keep].topk(k, sorted=True).indices] = True
            keep = keep[chosen]
        else:
            # Per image, by decreasing probability; equal probabilities (sigmoid saturates in float32) keep level
            # and rank order, the same on every device (torch.topk leaves their order to the implementation).
            keep = keep[torch.sort(scores[keep], descending=True, stable=True).indices]
            keep = keep[torch.sort(image_idx[keep], stable=True).indices]
            keep = keep[rank_within_groups(image_idx[keep]) < self.fpn_post_nms_top_n]

        counts = torch.bincount(image_idx[keep], minlength=n).tolist()
        out = []
        for i, ((h, w), kept) in enumerate(zip(image_sizes_list, keep.split(counts))):
            b_boxes, b_scores = boxes[kept], scores[kept]
            if targets is not None:
                gt = targets[i].convert("xyxy").bbox.to(device)
                b_boxes = torch.cat((b_boxes, gt))
                b_scores = torch.cat((b_scores, torch.ones(len(gt), device=device)))
            b = BoxList(b_boxes, (w, h), mode="xyxy")
            b.add_field("objectness", b_scores)
            out.append(b)
        return out


def _smooth_l1(diff, beta):
    n = diff.abs()
    return torch.where(n < beta, 0.5 * n ** 2 / beta, n - 0.5 * beta)


class RPNLossComputation:
    """Objectness (BCE) and box (smooth L1, beta 1/9) losses over 256 sampled anchors per image, both
    normalized by the number of sampled anchors in the batch, as in the reference. Fully batched."""

    def __init__(self, matcher, sampler, box_coder, anchor_generator):
        self.matcher = matcher
        self.sampler = sampler
        self.box_coder = box_coder
        self.anchor_generator = anchor_generator

    @torch.no_grad()
    def prepare_targets(self, anchors, targets, image_sizes_list):
        """``(labels (N, A), regression_targets (N, A, 4))`` for the concatenated anchors: 1 / 0 / -1 (ignored:
        between the thresholds, or not inside the unpadded image within STRADDLE_THRESH)."""
        device = anchors.device
        n = len(targets)
        gt_boxes, gt_valid, _ = pad_boxes(targets, device=device)
        sizes = image_sizes_tensor(image_sizes_list, device)
        matches = self.matcher(batched_iou(gt_boxes, gt_valid, anchors[None].expand(n, -1, -1)))
        labels = (matches >= 0).float()
        labels[~self.anchor_generator.visibility(anchors, sizes)] = -1
        labels[matches == Matcher.BETWEEN_THRESHOLDS] = -1
        matched = gt_boxes.gather(1, matches.clamp(min=0)[..., None].expand(-1, -1, 4))
        return labels, self.box_coder.encode(matched, anchors[None].expand(n, -1, -1))

    def __call__(self, anchors, objectness, box_regression, targets, image_sizes_list):
        anchors = torch.cat(anchors)
        objectness = torch.cat(objectness, dim=1)
        box_regression = torch.cat(box_regression, dim=1)
        labels, targets_reg = self.prepare_targets(anchors, targets, image_sizes_list)
        with torch.no_grad():
            pos, neg = self.sampler(labels)
            sampled = pos | neg
            num_sampled = sampled.sum().clamp(min=1)
        # Unsampled anchors are masked out of the inputs, not multiplied by zero afterwards: early in training
        # their logits/deltas can be inf, and inf * 0 = NaN (the reference only indexes the sampled anchors).
        pos4 = pos[..., None]
        diff = torch.where(pos4, box_regression, 0.0) - torch.where(pos4, targets_reg, 0.0)
        box_loss = _smooth_l1(diff, 1.0 / 9).sum() / num_sampled
        logits = torch.where(sampled, objectness, 0.0)
        obj_loss = (F.binary_cross_entropy_with_logits(logits, labels.clamp(min=0), reduction="none")
                    * sampled).sum() / num_sampled
        return obj_loss, box_loss


class RPNModule(nn.Module):
    def __init__(self, cfg, in_channels):
        super().__init__()
        r = cfg.MODEL.RPN
        strides = r.ANCHOR_STRIDE
        self.anchor_generator = AnchorGenerator(r.ANCHOR_SIZES, r.ASPECT_RATIOS, strides, r.STRADDLE_THRESH)
        num_anchors = self.anchor_generator.num_anchors_per_location()[0]
        self.head = RPN_HEADS[r.RPN_HEAD](cfg, in_channels, num_anchors)
        box_coder = BoxCoder(weights=(1.0, 1.0, 1.0, 1.0))
        self.box_selector_train = RPNPostProcessor(
            r.PRE_NMS_TOP_N_TRAIN, r.POST_NMS_TOP_N_TRAIN, r.NMS_THRESH, r.MIN_SIZE, r.FPN_POST_NMS_TOP_N_TRAIN,
            r.FPN_POST_NMS_PER_BATCH, box_coder)
        self.box_selector_test = RPNPostProcessor(
            r.PRE_NMS_TOP_N_TEST, r.POST_NMS_TOP_N_TEST, r.NMS_THRESH, r.MIN_SIZE, r.FPN_POST_NMS_TOP_N_TEST,
            False, box_coder)
        self.loss_evaluator = RPNLossComputation(
            Matcher(r.FG_IOU_THRESHOLD, r.BG_IOU_THRESHOLD, allow_low_quality_matches=True),
            BalancedPositiveNegativeSampler(r.BATCH_SIZE_PER_IMAGE, r.POSITIVE_FRACTION),
            box_coder, self.anchor_generator)

    def forward(self, images, features, targets=None):
        logits, deltas = self.head(features)
        anchors = self.anchor_generator(images, features)
        objectness, box_regression = _flatten_head_outputs(logits, deltas)
        if self.training:
            if targets is None:
                raise ValueError("targets are required in training mode")
            boxes = self.box_selector_train(anchors, [o.detach() for o in objectness],
                                            [b.detach() for b in box_regression], images.image_sizes, targets)
            loss_objectness, loss_rpn_box_reg = self.loss_evaluator(
                anchors, objectness, box_regression, targets, images.image_sizes)
            return boxes, {"loss_objectness": loss_objectness, "loss_rpn_box_reg": loss_rpn_box_reg}
        return self.box_selector_test(anchors, objectness, box_regression, images.image_sizes), {}


def build_rpn(cfg, in_channels):
    return RPNModule(cfg, in_channels)
