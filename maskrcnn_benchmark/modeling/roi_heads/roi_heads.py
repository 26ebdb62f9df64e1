"""Box and mask ROI heads with batched sampling.

Training (reference semantics): ground-truth boxes are added to the proposals, proposals are matched at IoU 0.5
(no low-quality matches), 512 ROIs per image are sampled with at most 25 % foreground, the box head is trained on
all sampled ROIs and the mask head on the foreground ones. Matching and sampling run on padded ``(N, P)``
tensors for the whole batch; the only host syncs are the sampled and foreground counts.
"""
import torch
from torch import nn

from ..balanced_positive_negative_sampler import BalancedPositiveNegativeSampler
from ..box_coder import BoxCoder
from ..matcher import Matcher, batched_iou
from ..registry import ROI_BOX_FEATURE_EXTRACTORS, ROI_BOX_PREDICTOR, ROI_MASK_FEATURE_EXTRACTORS, ROI_MASK_PREDICTOR
from ..utils import pad_boxes
from .box_head import BoxHeadSamples, BoxPostProcessor, box_head_loss
from .mask_head import Masker, mask_head_loss, project_bitmasks_on_boxes, rasterize_polygons_in_boxes


def rois_from_boxlists(boxlists):
    """``(K, 5)`` ROIs (image index, x1, y1, x2, y2) from a list of BoxLists."""
    boxes = [b.convert("xyxy").bbox for b in boxlists]
    idx = [torch.full((len(b), 1), i, dtype=b.dtype, device=b.device) for i, b in enumerate(boxes)]
    return torch.cat((torch.cat(idx), torch.cat(boxes)), dim=1)


class ROIHeads(nn.Module):
    def __init__(self, cfg, in_channels):
        super().__init__()
        h = cfg.MODEL.ROI_HEADS
        self.box_feature_extractor = ROI_BOX_FEATURE_EXTRACTORS[cfg.MODEL.ROI_BOX_HEAD.FEATURE_EXTRACTOR](
            cfg, in_channels)
        self.box_predictor = ROI_BOX_PREDICTOR[cfg.MODEL.ROI_BOX_HEAD.PREDICTOR](
            cfg, self.box_feature_extractor.out_channels)
        self.box_coder = BoxCoder(h.BBOX_REG_WEIGHTS)
        self.matcher = Matcher(h.FG_IOU_THRESHOLD, h.BG_IOU_THRESHOLD, allow_low_quality_matches=False)
        self.sampler = BalancedPositiveNegativeSampler(h.BATCH_SIZE_PER_IMAGE, h.POSITIVE_FRACTION)
        self.cls_agnostic = cfg.MODEL.CLS_AGNOSTIC_BBOX_REG
        self.post_processor = BoxPostProcessor(h.SCORE_THRESH, h.NMS, h.DETECTIONS_PER_IMG, self.box_coder,
                                               self.cls_agnostic)
        self.mask_on = cfg.MODEL.MASK_ON
        if self.mask_on:
            m = cfg.MODEL.ROI_MASK_HEAD
            self.mask_feature_extractor = ROI_MASK_FEATURE_EXTRACTORS[m.FEATURE_EXTRACTOR](cfg, in_channels)
            self.mask_predictor = ROI_MASK_PREDICTOR[m.PREDICTOR](cfg, self.mask_feature_extractor.out_channels)
            self.mask_resolution = m.RESOLUTION
            self.postprocess_masks = m.POSTPROCESS_MASKS
            self.masker = Masker(threshold=m.POSTPROCESS_MASKS_THRESHOLD)

    # -- training -------------------------------------------------------------------------------------------
    @torch.no_grad()
    def subsample(self, proposals, targets):
        device = proposals[0].bbox.device
        n = len(proposals)
        gt_boxes, gt_valid, gt_fields = pad_boxes(targets, fields=("labels",), device=device)
        with_gt = [torch.cat((p.convert("xyxy").bbox, t.convert("xyxy").bbox.to(device)))
                   for p, t in zip(proposals, targets)]
        counts = [len(b) for b in with_gt]
        p_max = max(counts)
        boxes = torch.zeros((n, p_max, 4), device=device)
        valid = torch.zeros((n, p_max), dtype=torch.bool, device=device)
        for i, b in enumerate(with_gt):
            boxes[i, : len(b)] = b
            valid[i, : len(b)] = True
        matches = self.matcher(batched_iou(gt_boxes, gt_valid, boxes))
        gt_labels = gt_fields["labels"].long()
        labels = gt_labels.gather(1, matches.clamp(min=0))
        labels[matches == Matcher.BELOW_LOW_THRESHOLD] = 0
        labels[(matches == Matcher.BETWEEN_THRESHOLDS) | ~valid] = -1
        pos, neg = self.sampler(labels)
        img, idx = (pos | neg).nonzero(as_tuple=True)
        matched = matches[img, idx].clamp(min=0)
        sel_boxes = boxes[img, idx]
        regression_targets = self.box_coder.encode(gt_boxes[img, matched], sel_boxes)
        rois = torch.cat((img[:, None].to(sel_boxes.dtype), sel_boxes), dim=1)
        return BoxHeadSamples(rois, labels[img, idx], regression_targets, img * gt_boxes.shape[1] + matched)

    def _mask_targets(self, targets, samples, fg):
        device = samples.rois.device
        masks = [t.get_field("masks") for t in targets]
        g = max(max(len(m) for m in masks), 1)
        rois = samples.rois[fg, 1:]
        matched = samples.matched_gt[fg]
        if all(m.mode == "poly" for m in masks):
            edges = [m.polygon_edges().to(device) for m in masks]
            e = max(max(x.shape[1] for x in edges), 1)
            padded = torch.zeros((len(masks), g, e, 4), device=device)
            for i, x in enumerate(edges):
                padded[i, : x.shape[0], : x.shape[1]] = x
            return rasterize_polygons_in_boxes(padded.flatten(0, 1)[matched], rois, self.mask_resolution)
        h = max(m.size[1] for m in masks)
        w = max(m.size[0] for m in masks)
        bitmaps = torch.zeros((len(masks), g, h, w), dtype=torch.uint8, device=device)
        for i, m in enumerate(masks):
            t = m.convert("mask").get_mask_tensor().to(device)
            bitmaps[i, : t.shape[0], : t.shape[1], : t.shape[2]] = t
        return project_bitmasks_on_boxes(bitmaps.flatten(0, 1)[matched], rois, self.mask_resolution)

    def forward(self, features, proposals, targets=None):
        if not self.training:
            return self._inference(features, proposals)
        samples = self.subsample(proposals, targets)
        x = self.box_feature_extractor(features, samples.rois)
        class_logits, box_regression = self.box_predictor(x)
        loss_classifier, loss_box_reg = box_head_loss(class_logits, box_regression, samples.labels,
                                                      samples.regression_targets, self.cls_agnostic)
        losses = {"loss_classifier": loss_classifier, "loss_box_reg": loss_box_reg}
        if self.mask_on:
            fg = (samples.labels > 0).nonzero().squeeze(1)
            mask_logits = self.mask_predictor(self.mask_feature_extractor(features, samples.rois[fg]))
            with torch.no_grad():
                mask_targets = self._mask_targets(targets, samples, fg)
            losses["loss_mask"] = mask_head_loss(mask_logits, samples.labels[fg], mask_targets)
        return x, proposals, losses

    # -- inference ------------------------------------------------------------------------------------------
    @torch.no_grad()
    def _inference(self, features, proposals):
        rois = rois_from_boxlists(proposals)
        image_sizes = [(p.size[1], p.size[0]) for p in proposals]
        x = self.box_feature_extractor(features, rois)
        class_logits, box_regression = self.box_predictor(x)
        detections = self.post_processor(class_logits, box_regression, rois, image_sizes)
        if self.mask_on:
            det_rois = rois_from_boxlists(detections)
            labels = torch.cat([d.get_field("labels") for d in detections])
            mask_logits = self.mask_predictor(self.mask_feature_extractor(features, det_rois))
            probs = mask_logits[torch.arange(labels.numel(), device=labels.device), labels][:, None]
            probs = probs.float().sigmoid()
            for d, p in zip(detections, probs.split([len(d) for d in detections])):
                if self.postprocess_masks:
                    p = self.masker.paste(p, d.bbox, d.size[1], d.size[0])
                d.add_field("mask", p)
        return x, detections, {}


def build_roi_heads(cfg, in_channels):
    return ROIHeads(cfg, in_channels)
