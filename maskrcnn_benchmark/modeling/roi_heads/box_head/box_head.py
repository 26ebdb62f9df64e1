"""ROI box head (``roi_heads.box``): feature extractor, predictor, post-processor and loss, with the
reference's module names so checkpoints load both ways."""
import torch
from torch import nn

from ...registry import ROI_BOX_FEATURE_EXTRACTORS, ROI_BOX_PREDICTOR
from ...utils import rois_from_boxlists
from .inference import make_roi_box_post_processor
from .loss import make_roi_box_loss_evaluator


class ROIBoxHead(nn.Module):
    def __init__(self, cfg, in_channels):
        super().__init__()
        b = cfg.MODEL.ROI_BOX_HEAD
        self.feature_extractor = ROI_BOX_FEATURE_EXTRACTORS[b.FEATURE_EXTRACTOR](cfg, in_channels)
        self.predictor = ROI_BOX_PREDICTOR[b.PREDICTOR](cfg, self.feature_extractor.out_channels)
        self.post_processor = make_roi_box_post_processor(cfg)
        self.loss_evaluator = make_roi_box_loss_evaluator(cfg)

    def forward(self, features, proposals, targets=None):
        """Training: ``(x, samples, {loss_classifier, loss_box_reg})`` on every sample slot (fixed shapes);
        eval: ``(x, detections, {})``."""
        if self.training:
            samples = self.loss_evaluator.subsample(proposals, targets)
            x = self.feature_extractor(features, samples.slot_rois)
            class_logits, box_regression = self.predictor(x)
            loss_classifier, loss_box_reg = self.loss_evaluator(class_logits, box_regression, samples)
            return x, samples, {"loss_classifier": loss_classifier, "loss_box_reg": loss_box_reg}
        rois = rois_from_boxlists(proposals)
        x = self.feature_extractor(features, rois)
        class_logits, box_regression = self.predictor(x)
        image_sizes = [(p.size[1], p.size[0]) for p in proposals]
        return x, self.post_processor(class_logits, box_regression, rois, image_sizes), {}


def build_roi_box_head(cfg, in_channels):
    return ROIBoxHead(cfg, in_channels)
