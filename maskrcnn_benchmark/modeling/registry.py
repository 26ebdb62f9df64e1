"""String registries, named as in maskrcnn-benchmark, so configs select components by name."""
from ..utils.registry import Registry

BACKBONES = Registry("backbone (MODEL.BACKBONE.CONV_BODY)")
RESNET_STEMS = Registry("ResNet stem (MODEL.RESNETS.STEM_FUNC)")
RESNET_TRANS = Registry("ResNet block (MODEL.RESNETS.TRANS_FUNC)")
RPN_HEADS = Registry("RPN head (MODEL.RPN.RPN_HEAD)")
ROI_BOX_FEATURE_EXTRACTORS = Registry("box feature extractor (MODEL.ROI_BOX_HEAD.FEATURE_EXTRACTOR)")
ROI_BOX_PREDICTOR = Registry("box predictor (MODEL.ROI_BOX_HEAD.PREDICTOR)")
ROI_MASK_FEATURE_EXTRACTORS = Registry("mask feature extractor (MODEL.ROI_MASK_HEAD.FEATURE_EXTRACTOR)")
ROI_MASK_PREDICTOR = Registry("mask predictor (MODEL.ROI_MASK_HEAD.PREDICTOR)")
META_ARCH = Registry("meta architecture (MODEL.META_ARCHITECTURE)")
