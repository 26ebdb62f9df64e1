"""ROI sampling and the box head's losses, batched over the images of a GPU batch.

Reference semantics: proposals (which already include the ground-truth boxes, appended by the RPN in training)
are matched to the ground truth at IoU 0.5 (no low-quality matches), up to BATCH_SIZE_PER_IMAGE ROIs per image
are sampled with at most POSITIVE_FRACTION foreground; the classifier is trained on all sampled ROIs, the box
regression on the foreground ones, normalized by the number of sampled ROIs. Matching and sampling run on
padded ``(N, P)`` tensors and the samples fill ``BATCH_SIZE_PER_IMAGE`` slots per image with a validity mask:
fixed shapes, no host sync (0 in the whole step: tests/utils/test_host_syncs.py, bench/host_syncs.py; a static batch,
``TargetBatch.static``: the compiled step). The eager step trims the slots to the largest number of samples of an image
in the batch (one host sync): when the RPN finds fewer proposals than ``BATCH_SIZE_PER_IMAGE`` (small images, early
training) the box head then runs on the rows that exist, as the reference's does, instead of on padding (measured: 1.6x
the eager step time on 256x384 images otherwise).
"""
import torch
import torch.nn.functional as F

from ...balanced_positive_negative_sampler import BalancedPositiveNegativeSampler
from ...box_coder import BoxCoder
from ...matcher import Matcher, batched_iou
from ...utils import compact, gather_rows


class BoxHeadSamples:
    """The ROIs sampled for training, in fixed-shape tensors: ``S`` slots per image, the sampled ROIs of each
    image first, in ascending proposal order (the order in which the reference concatenates them), then invalid
    slots. ``slot_*`` fields have ``N * S`` rows; the plain fields (``rois``, ``labels``, ``image_index``, ...)
    are the valid rows only, as the reference has them (a host sync: for inspection and tests)."""

    def __init__(self, slot_rois, slot_labels, slot_regression_targets, slot_image, slot_proposal, slot_matched,
                 slot_valid):
        self.slot_rois = slot_rois                              # (N*S, 5): image index, x1, y1, x2, y2
        self.slot_labels = slot_labels                          # (N*S,) class, 0 = background (0 if invalid)
        self.slot_regression_targets = slot_regression_targets  # (N*S, 4)
        self.slot_image = slot_image                            # (N*S,)
        self.slot_proposal = slot_proposal                      # (N*S,) index among the image's proposals
        self.slot_matched = slot_matched                        # (N*S,) matched ground truth slot of the image
        self.slot_valid = slot_valid                            # (N*S,) bool

    def _valid(self, t):
        return t[self.slot_valid]

    @property
    def rois(self):
        return self._valid(self.slot_rois)

    @property
    def labels(self):
        return self._valid(self.slot_labels)

    @property
    def regression_targets(self):
        return self._valid(self.slot_regression_targets)

    @property
    def image_index(self):
        return self._valid(self.slot_image)

    @property
    def proposal_index(self):
        return self._valid(self.slot_proposal)

    @property
    def matched_gt(self):
        return self._valid(self.slot_matched)


def box_head_loss(class_logits, box_regression, labels, regression_targets, cls_agnostic=False, weights=None):
    """Cross-entropy over all sampled ROIs, and smooth L1 (beta 1) on the foreground ROIs' own-class deltas,
    summed and divided by the number of sampled ROIs. ``weights`` (0/1 per row): padded rows count for nothing;
    the divisor is the number of real rows, as the reference's.

    The background rows are masked out *before* the loss (``where``), not multiplied by zero afterwards: with
    early-training activations the background rows' predictions, or their targets against a degenerate
    proposal (zero width after decoding), can be inf/NaN, and ``inf * 0`` is NaN in the loss and in the
    gradients. The reference only ever reads the foreground rows, so it never sees them either.
    """
    class_logits = class_logits.float()
    box_regression = box_regression.float()
    if weights is None:
        loss_classifier = F.cross_entropy(class_logits, labels)
        count = max(labels.numel(), 1)
        fg = (labels > 0)[:, None]
    else:
        w = weights.to(class_logits.dtype)
        count = w.sum().clamp(min=1)
        logits = torch.where(weights[:, None], class_logits, 0.0)
        loss_classifier = (F.cross_entropy(logits, labels, reduction="none") * w).sum() / count
        fg = ((labels > 0) & weights)[:, None]
    cls = (labels > 0).long() if cls_agnostic else labels.clamp(min=0)
    cols = cls[:, None] * 4 + torch.arange(4, device=labels.device)[None, :]
    pred = torch.where(fg, box_regression.gather(1, cols), 0.0)
    target = torch.where(fg, regression_targets.float(), 0.0)
    diff = (pred - target).abs()
    per = torch.where(diff < 1.0, 0.5 * diff ** 2, diff - 0.5)
    return loss_classifier, per.sum() / count


class FastRCNNLossComputation:
    def __init__(self, matcher, sampler, box_coder, cls_agnostic_bbox_reg=False):
        self.matcher = matcher
        self.sampler = sampler
        self.box_coder = box_coder
        self.cls_agnostic_bbox_reg = cls_agnostic_bbox_reg

    @torch.no_grad()
    def subsample(self, proposals, targets):
        """Match, label and sample the proposals of every image; returns :class:`BoxHeadSamples`.
        ``proposals``: the RPN's :class:`~maskrcnn_benchmark.modeling.rpn.rpn.Proposals`; ``targets``: a
        :class:`~maskrcnn_benchmark.structures.target_batch.TargetBatch`. A static batch: ``BATCH_SIZE_PER_IMAGE``
        slots per image (fixed shapes, no host sync); otherwise as many as the image with the most samples."""
        boxes, valid = proposals.boxes, proposals.valid
        device = boxes.device
        n, p = valid.shape
        matches = self.matcher(batched_iou(targets.boxes, targets.valid, boxes))
        labels = targets.labels.gather(1, matches.clamp(min=0))
        labels = torch.where(matches == Matcher.BELOW_LOW_THRESHOLD, 0, labels)
        labels = torch.where((matches == Matcher.BETWEEN_THRESHOLDS) | ~valid, -1, labels)
        pos, neg = self.sampler(labels)
        sampled = pos | neg
        # the sampled proposals of each image first, in ascending proposal order
        s = min(getattr(self.sampler, "batch_size_per_image", p), p)
        chosen = compact(sampled, s if targets.static else None)
        slot, slot_valid = chosen.index, chosen.valid
        s = slot.shape[1]
        matched = matches.gather(1, slot).clamp(min=0)
        slot_boxes = gather_rows(boxes, slot)
        gt = gather_rows(targets.boxes, matched)
        regression_targets = self.box_coder.encode(gt, slot_boxes)
        image = torch.arange(n, device=device)[:, None].expand(n, s)
        rois = torch.cat((image[..., None].to(slot_boxes.dtype), slot_boxes), dim=2)
        slot_labels = torch.where(slot_valid, labels.gather(1, slot), 0)
        return BoxHeadSamples(rois.reshape(-1, 5), slot_labels.reshape(-1), regression_targets.reshape(-1, 4),
                              image.reshape(-1), slot.reshape(-1), matched.reshape(-1), slot_valid.reshape(-1))

    def __call__(self, class_logits, box_regression, samples):
        """The losses from ``class_logits``/``box_regression`` of every sample slot (``N * S`` rows; the
        reference's layout of the sampled rows only: :func:`~maskrcnn_benchmark.modeling.compat.box_losses`)."""
        return box_head_loss(class_logits, box_regression, samples.slot_labels, samples.slot_regression_targets,
                             self.cls_agnostic_bbox_reg, samples.slot_valid)


def make_roi_box_loss_evaluator(cfg):
    h = cfg.MODEL.ROI_HEADS
    return FastRCNNLossComputation(
        Matcher(h.FG_IOU_THRESHOLD, h.BG_IOU_THRESHOLD, allow_low_quality_matches=False),
        BalancedPositiveNegativeSampler(h.BATCH_SIZE_PER_IMAGE, h.POSITIVE_FRACTION),
        BoxCoder(h.BBOX_REG_WEIGHTS), cfg.MODEL.CLS_AGNOSTIC_BBOX_REG)
