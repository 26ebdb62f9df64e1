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

    def forward(self, x):
        return self.mask_fcn_logits(F.relu(self.conv5_mask(x)))
