"""ROI box head: FPN2MLPFeatureExtractor + FPNPredictor, batched ROI sampling, loss and post-processing."""
import torch
import torch.nn.functional as F
from torch import nn

from ...layers import batched_nms
from ...structures.bounding_box import BoxList
from ..make_layers import make_fc
from ..poolers import Pooler
from ..registry import ROI_BOX_FEATURE_EXTRACTORS, ROI_BOX_PREDICTOR
from ..rpn.rpn import clip_boxes
from ..utils import image_sizes_tensor, rank_within_groups, split_by_image


@ROI_BOX_FEATURE_EXTRACTORS.register("FPN2MLPFeatureExtractor")
class FPN2MLPFeatureExtractor(nn.Module):
    """Multi-level ROIAlign to 7x7, then two fully connected layers (fc6, fc7) with ReLU."""

    def __init__(self, cfg, in_channels):
        super().__init__()
        h = cfg.MODEL.ROI_BOX_HEAD
        self.pooler = Pooler(h.POOLER_RESOLUTION, h.POOLER_SCALES, h.POOLER_SAMPLING_RATIO)
        self.fc6 = make_fc(in_channels * h.POOLER_RESOLUTION ** 2, h.MLP_HEAD_DIM)
        self.fc7 = make_fc(h.MLP_HEAD_DIM, h.MLP_HEAD_DIM)
        self.out_channels = h.MLP_HEAD_DIM

    def forward(self, features, rois):
        x = self.pooler(features, rois).flatten(1)
        return F.relu(self.fc7(F.relu(self.fc6(x))))


@ROI_BOX_PREDICTOR.register("FPNPredictor")
class FPNPredictor(nn.Module):
    def __init__(self, cfg, in_channels):
        super().__init__()
        num_classes = cfg.MODEL.ROI_BOX_HEAD.NUM_CLASSES
        num_bbox_classes = 2 if cfg.MODEL.CLS_AGNOSTIC_BBOX_REG else num_classes
        self.cls_score = nn.Linear(in_channels, num_classes)
        self.bbox_pred = nn.Linear(in_channels, num_bbox_classes * 4)
        nn.init.normal_(self.cls_score.weight, std=0.01)
        nn.init.normal_(self.bbox_pred.weight, std=0.001)
        for layer in (self.cls_score, self.bbox_pred):
            nn.init.constant_(layer.bias, 0)

    def forward(self, x):
        return self.cls_score(x), self.bbox_pred(x)


class BoxHeadSamples:
    """The ROIs sampled for training with their targets (all images concatenated)."""

    def __init__(self, rois, labels, regression_targets, matched_gt):
        self.rois = rois                              # (K, 5): image index, x1, y1, x2, y2
        self.labels = labels                          # (K,) class, 0 = background
        self.regression_targets = regression_targets  # (K, 4)
        self.matched_gt = matched_gt                  # (K,) index into the padded (N * G) ground truth


def box_head_loss(class_logits, box_regression, labels, regression_targets, cls_agnostic=False):
    """Cross-entropy over all sampled ROIs, and smooth L1 (beta 1) on the foreground ROIs' own-class deltas,
    summed and divided by the number of sampled ROIs (reference normalization). No host sync."""
    class_logits = class_logits.float()
    box_regression = box_regression.float()
    loss_classifier = F.cross_entropy(class_logits, labels)
    fg = (labels > 0).float()
    cls = (labels > 0).long() if cls_agnostic else labels
    cols = (cls[:, None] * 4 + torch.arange(4, device=labels.device)[None, :])
    pred = box_regression.gather(1, cols)
    diff = (pred - regression_targets).abs()
    per = torch.where(diff < 1.0, 0.5 * diff ** 2, diff - 0.5)
    loss_box_reg = (per.sum(1) * fg).sum() / max(labels.numel(), 1)
    return loss_classifier, loss_box_reg


class BoxPostProcessor:
    """Scores > SCORE_THRESH, per-class NMS ("+1" IoU), at most DETECTIONS_PER_IMG per image; all images and
    classes in one batched NMS."""

    def __init__(self, score_thresh, nms, detections_per_img, box_coder, cls_agnostic=False):
        self.score_thresh = score_thresh
        self.nms = nms
        self.detections_per_img = detections_per_img
        self.box_coder = box_coder
        self.cls_agnostic = cls_agnostic

    @torch.no_grad()
    def __call__(self, class_logits, box_regression, rois, image_sizes_list):
        n = len(image_sizes_list)
        device = class_logits.device
        probs = F.softmax(class_logits.float(), -1)
        num_classes = probs.shape[1]
        box_regression = box_regression.float()
        if self.cls_agnostic:
            box_regression = box_regression[:, -4:].repeat(1, num_classes)
        boxes = self.box_coder.decode(box_regression, rois[:, 1:]).view(-1, num_classes, 4)
        image_idx = rois[:, 0].long()
        sizes = image_sizes_tensor(image_sizes_list, device)[image_idx]
        boxes = clip_boxes(boxes, sizes[:, None, :].expand(-1, num_classes, -1))
        cand = (probs[:, 1:] > self.score_thresh).nonzero()
        roi_idx, label = cand[:, 0], cand[:, 1] + 1
        cand_boxes = boxes[roi_idx, label]
        cand_scores = probs[roi_idx, label]
        cand_image = image_idx[roi_idx]
        keep = batched_nms(cand_boxes, cand_scores, cand_image * num_classes + label, self.nms)
        keep = keep[rank_within_groups(cand_image[keep]) < self.detections_per_img]
        order, counts = split_by_image(cand_image[keep], n)
        keep = keep[order]
        out = []
        for (h, w), kept in zip(image_sizes_list, keep.split(counts)):
            b = BoxList(cand_boxes[kept], (w, h), mode="xyxy")
            b.add_field("scores", cand_scores[kept])
            b.add_field("labels", label[kept])
            out.append(b)
        return out
