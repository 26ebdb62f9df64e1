"""ROI mask head, laid out as maskrcnn-benchmark's ``modeling/roi_heads/mask_head``."""
from .inference import Masker, expand_boxes
from .loss import (bitmap_mask_targets, mask_rcnn_loss, polygon_mask_targets, project_masks_on_boxes)
from .mask_head import ROIMaskHead, batch_mask_targets, build_roi_mask_head
from .roi_mask_feature_extractors import MaskRCNNFPNFeatureExtractor
from .roi_mask_predictors import MaskRCNNC4Predictor

__all__ = ["Masker", "expand_boxes", "bitmap_mask_targets", "mask_rcnn_loss", "polygon_mask_targets",
           "project_masks_on_boxes", "ROIMaskHead", "batch_mask_targets", "build_roi_mask_head",
           "MaskRCNNFPNFeatureExtractor", "MaskRCNNC4Predictor"]
