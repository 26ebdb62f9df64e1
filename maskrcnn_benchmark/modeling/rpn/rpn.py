"""Region proposal network: head, proposal selection and loss, batched over images.

Proposal selection follows the MLPerf reference: per image and FPN level keep the ``PRE_NMS_TOP_N`` best anchors,
decode, clip, drop small boxes, NMS at ``NMS_THRESH`` ("+1" IoU), keep ``POST_NMS_TOP_N``; then merge the levels
and keep ``FPN_POST_NMS_TOP_N`` — in training over the whole per-GPU batch when ``FPN_POST_NMS_PER_BATCH``
(v0.7 semantics: images compete for the budget), otherwise per image (always per image at test time).
All images and levels go through one top-k, one decode and one NMS on the device (each image x level a row of
:func:`~maskrcnn_benchmark.layers.nms.nms_keep_padded`): the training selection reads nothing back from the device
(``bench/host_syncs.py`` counts 0 host syncs in the whole static step).
"""
import torch
import torch.nn.functional as F
from torch import nn

from ...layers.nms import nms_keep_padded
from ...structures.bounding_box import TO_REMOVE, BoxList
from ..balanced_positive_negative_sampler import BalancedPositiveNegativeSampler
from ..box_coder import BoxCoder
from ..matcher import Matcher, batched_iou
from ..registry import RPN_HEADS
from ..utils import compact, image_sizes_tensor
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
            t = F.relu_(self.conv(x))
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


class Proposals:
    """The proposals of a batch in fixed-shape tensors: ``boxes (N, P, 4)``, ``objectness (N, P)`` (the
    probability), ``valid (N, P)``. The valid entries of each image come first, in the reference's order."""

    def __init__(self, boxes, objectness, valid):
        self.boxes, self.objectness, self.valid = boxes, objectness, valid

    def to_boxlists(self, image_sizes_list):
        """One BoxList per image (``objectness`` field), the valid entries only (a host sync)."""
        counts = self.valid.sum(1).tolist()
        out = []
        for i, ((h, w), c) in enumerate(zip(image_sizes_list, counts)):
            b = BoxList(self.boxes[i, :c], (w, h), mode="xyxy")
            b.add_field("objectness", self.objectness[i, :c])
            out.append(b)
        return out


def _compact(boxes, scores, chosen, capacity):
    """The chosen proposals of each image first, in order, in ``capacity`` slots, the rest zero:
    ``(boxes, scores, valid)``."""
    c = compact(chosen, capacity)
    return c.take(boxes), c.take(scores), c.valid


class RPNPostProcessor:
    """Proposals from the RPN outputs, with the reference's selection, order and numerics.

    Per image and level: sigmoid, top ``pre_nms_top_n`` by probability, decode, clip, drop boxes smaller than
    ``min_size``, NMS, keep the first ``post_nms_top_n`` (in score order). Levels are concatenated P2 first.
    Then ``fpn_post_nms_top_n``: over the whole batch in training when ``per_batch`` (the survivors stay in
    level order, unsorted, as the reference's boolean-mask selection leaves them), otherwise per image, sorted by
    probability. In training the ground-truth boxes are appended with objectness 1 (``add_gt_proposals``).

    :meth:`select` computes on fixed shapes with no host sync (0 in the whole step: tests/utils/test_host_syncs.py,
    bench/host_syncs.py; what a compiled step needs): the candidates of all images and levels stay in one ``(N, K)``
    layout, the data-dependent steps are masks (NMS is one op returning a keep mask, computed on the device), and the
    survivors are compacted to the front of ``P`` slots per image. ``__call__`` returns the reference's per-image
    BoxLists.
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
    def select(self, anchors, objectness, box_regression, sizes, targets=None):
        """``sizes (N, 2)`` image (height, width); ``targets`` a :class:`TargetBatch` or None. Returns
        :class:`Proposals` (the ground truth appended after each image's proposals when ``targets``)."""
        n = objectness[0].shape[0]
        device = objectness[0].device
        boxes, scores, level_ks = [], [], []
        for anc, obj, reg in zip(anchors, objectness, box_regression):
            k = min(self.pre_nms_top_n, obj.shape[1])
            # top-k of the probabilities, as the reference: sigmoid saturates, and its ties decide the order
            top_scores, idx = obj.float().sigmoid().topk(k, dim=1, sorted=True)
            deltas = reg.gather(1, idx[..., None].expand(-1, -1, 4))
            decoded = self.box_coder.decode(deltas, anc[idx])
            boxes.append(clip_boxes(decoded, sizes[:, None, :].expand(-1, k, -1)))
            scores.append(top_scores)
            level_ks.append(k)
        # Layout (N, K): per image, level after level, each level in decreasing probability. Ascending position
        # within an image = the reference's order.
        boxes = torch.cat(boxes, dim=1)
        scores = torch.cat(scores, dim=1)
        kk = scores.shape[1]
        ws = boxes[..., 2] - boxes[..., 0] + TO_REMOVE
        hs = boxes[..., 3] - boxes[..., 1] + TO_REMOVE
        large = (ws >= self.min_size) & (hs >= self.min_size)
        keep = self._nms_per_level(boxes, scores, large, level_ks)
        # post_nms_top_n per image and level: the candidates of a level are in decreasing probability, so a
        # survivor's rank is the number of survivors before it in its level
        rank = torch.cat([torch.cumsum(part.to(torch.int64), 1) - 1 for part in keep.split(level_ks, 1)], 1)
        keep &= rank < self.post_nms_top_n
        if self.per_batch:
            k = min(self.fpn_post_nms_top_n, n * kk)
            masked = scores.masked_fill(~keep, float("-inf")).reshape(-1)
            top = masked.topk(k, sorted=True)
            chosen = torch.zeros(n * kk, dtype=torch.bool, device=device)
            chosen = chosen.scatter(0, top.indices, top.values > float("-inf")).view(n, kk)
            capacity = min(self.fpn_post_nms_top_n, kk)
            out_boxes, out_scores, out_valid = _compact(boxes, scores, chosen, capacity)
        else:
            # Per image, by decreasing probability; equal probabilities (sigmoid saturates in float32) keep level
            # and rank order, the same on every device (torch.topk leaves their order to the implementation).
            order = torch.sort(scores.masked_fill(~keep, float("-inf")), dim=1, descending=True, stable=True).indices
            capacity = min(self.fpn_post_nms_top_n, kk)
            order = order[:, :capacity]
            out_boxes = boxes.gather(1, order[..., None].expand(-1, -1, 4))
            out_scores = scores.gather(1, order)
            out_valid = keep.gather(1, order)
        if targets is not None:
            out_boxes = torch.cat((out_boxes, targets.boxes), 1)
            out_scores = torch.cat((out_scores, torch.ones_like(targets.boxes[..., 0])), 1)
            # the ground truth goes right after each image's proposals: compact again
            both = torch.cat((out_valid, targets.valid), 1)
            capacity = both.shape[1]
            out_boxes, out_scores, out_valid = _compact(out_boxes, out_scores, both, capacity)
        return Proposals(out_boxes, out_scores, out_valid)

    def _nms_per_level(self, boxes, scores, large, level_ks):
        """Keep mask ``(N, K)`` of NMS within each image and level (each level's candidates a group, padded to
        the largest level's count): :func:`~maskrcnn_benchmark.layers.nms.nms_keep_padded`, on the device."""
        n = boxes.shape[0]
        kmax = max(level_ks)
        rows_b, rows_s, rows_v = [], [], []
        for b, sc, lg in zip(boxes.split(level_ks, 1), scores.split(level_ks, 1), large.split(level_ks, 1)):
            pad = kmax - b.shape[1]
            rows_b.append(F.pad(b, (0, 0, 0, pad)))
            rows_s.append(F.pad(sc, (0, pad)))
            rows_v.append(F.pad(lg, (0, pad)))
        levels = len(level_ks)
        keep = nms_keep_padded(torch.stack(rows_b, 1).reshape(n * levels, kmax, 4),
                               torch.stack(rows_s, 1).reshape(n * levels, kmax),
                               torch.stack(rows_v, 1).reshape(n * levels, kmax), self.nms_thresh)
        keep = keep.view(n, levels, kmax)
        return torch.cat([keep[:, lvl, :k] for lvl, k in enumerate(level_ks)], 1)

    def __call__(self, anchors, objectness, box_regression, image_sizes_list):
        """The proposals of an evaluation batch: one BoxList per image (``objectness`` field)."""
        sizes = image_sizes_tensor(image_sizes_list, objectness[0].device)
        return self.select(anchors, objectness, box_regression, sizes).to_boxlists(image_sizes_list)


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
    def prepare_targets(self, anchors, targets, sizes):
        """``(labels (N, A), regression_targets (N, A, 4))`` for the concatenated anchors: 1 / 0 / -1 (ignored:
        between the thresholds, or not inside the unpadded image within STRADDLE_THRESH). ``targets``: a
        :class:`TargetBatch`; ``sizes``: ``(N, 2)`` (height, width)."""
        n = targets.boxes.shape[0]
        gt_boxes, gt_valid = targets.boxes, targets.valid
        matches = self.matcher(batched_iou(gt_boxes, gt_valid, anchors[None]))  # one anchor set, broadcast
        labels = (matches >= 0).float()
        labels[~self.anchor_generator.visibility(anchors, sizes)] = -1
        labels[matches == Matcher.BETWEEN_THRESHOLDS] = -1
        matched = gt_boxes.gather(1, matches.clamp(min=0)[..., None].expand(-1, -1, 4))
        return labels, self.box_coder.encode(matched, anchors[None].expand(n, -1, -1))

    def __call__(self, anchors, objectness, box_regression, targets, sizes):
        anchors = torch.cat(anchors)
        objectness = torch.cat(objectness, dim=1)
        box_regression = torch.cat(box_regression, dim=1)
        labels, targets_reg = self.prepare_targets(anchors, targets, sizes)
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
        """Training (``targets`` a :class:`TargetBatch`): ``(Proposals, losses)``, fixed shapes, no host sync.
        Eval: one BoxList of proposals per image."""
        logits, deltas = self.head(features)
        anchors = self.anchor_generator(images, features)
        objectness, box_regression = _flatten_head_outputs(logits, deltas)
        if self.training:
            if targets is None:
                raise ValueError("targets are required in training mode")
            proposals = self.box_selector_train.select(anchors, [o.detach() for o in objectness],
                                                       [b.detach() for b in box_regression], images.sizes, targets)
            loss_objectness, loss_rpn_box_reg = self.loss_evaluator(
                anchors, objectness, box_regression, targets, images.sizes)
            return proposals, {"loss_objectness": loss_objectness, "loss_rpn_box_reg": loss_rpn_box_reg}
        return self.box_selector_test(anchors, objectness, box_regression, images.image_sizes), {}


def build_rpn(cfg, in_channels):
    return RPNModule(cfg, in_channels)
