"""ROI box head, laid out as maskrcnn-benchmark's ``modeling/roi_heads/box_head``."""
from .box_head import ROIBoxHead, build_roi_box_head
from .inference import PostProcessor, make_roi_box_post_processor
from .loss import BoxHeadSamples, FastRCNNLossComputation, box_head_loss, make_roi_box_loss_evaluator
from .roi_box_feature_extractors import FPN2MLPFeatureExtractor
from .roi_box_predictors import FPNPredictor

__all__ = ["ROIBoxHead", "build_roi_box_head", "PostProcessor", "make_roi_box_post_processor",
           "BoxHeadSamples", "FastRCNNLossComputation", "box_head_loss", "make_roi_box_loss_evaluator",
           "FPN2MLPFeatureExtractor", "FPNPredictor"]
