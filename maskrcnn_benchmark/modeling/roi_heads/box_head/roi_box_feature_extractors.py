import torch.nn.functional as F
from torch import nn

from ...make_layers import make_fc
from ...poolers import Pooler
from ...registry import ROI_BOX_FEATURE_EXTRACTORS


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
        return F.relu_(self.fc7(F.relu_(self.fc6(x))))
