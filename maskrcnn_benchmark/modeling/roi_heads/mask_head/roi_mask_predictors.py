import torch
import torch.nn.functional as F
from torch import nn

from ...registry import ROI_MASK_PREDICTOR


@ROI_MASK_PREDICTOR.register("MaskRCNNC4Predictor")
class MaskRCNNC4Predictor(nn.Module):
    """2x2 stride-2 deconvolution + ReLU, then 1x1 conv to one mask logit map per class."""

    def __init__(self, cfg, in_channels):
        super().__init__()
        num_classes = cfg.MODEL.ROI_BOX_HEAD.NUM_CLASSES
        dim_reduced = cfg.MODEL.ROI_MASK_HEAD.CONV_LAYERS[-1]
        self.conv5_mask = nn.ConvTranspose2d(in_channels, dim_reduced, 2, 2, 0)
        self.mask_fcn_logits = nn.Conv2d(dim_reduced, num_classes, 1, 1, 0)
        for layer in (self.conv5_mask, self.mask_fcn_logits):
            nn.init.kaiming_normal_(layer.weight, mode="fan_out", nonlinearity="relu")
            nn.init.constant_(layer.bias, 0)
        if cfg.MODEL.DEVICE == "cpu" or cfg.NHWC:
            # The mask head runs channels-last there (roi_mask_feature_extractors.py), so the 1x1 weight's
            # gradient comes with channels-last strides, which autograd keeps (for a 1x1 kernel both layouts are
            # the same memory order). DDP's bucket views take the weight's strides: unless they are the same, it
            # copies that gradient every step and warns "Grad strides do not match bucket view strides" in the
            # first backward.
            w = self.mask_fcn_logits.weight
            self.mask_fcn_logits.weight = nn.Parameter(
                torch.empty_like(w, memory_format=torch.channels_last).copy_(w.detach()))

    def forward(self, x):
        return self.mask_fcn_logits(F.relu_(self.conv5_mask(x)))
