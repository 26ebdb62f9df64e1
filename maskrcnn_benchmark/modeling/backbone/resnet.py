"""ResNet bodies with the MSRA/Detectron layout (names match the Caffe2 weight mapping in utils/c2_model_loading).

``STRIDE_IN_1X1`` puts the stride-2 on the first 1x1 conv of a bottleneck (MSRA weights); stages up to
``FREEZE_CONV_BODY_AT`` have ``requires_grad=False``. Norm layers are FrozenBatchNorm2d ("FixedBatchNorm")
or GroupNorm ("GN") as selected by STEM_FUNC/TRANS_FUNC.
"""
from collections import namedtuple

import torch.nn.functional as F
from torch import nn

from ...layers import FrozenBatchNorm2d
from ..make_layers import make_gn
from ..registry import RESNET_STEMS, RESNET_TRANS
from ...utils.registry import UnknownName

StageSpec = namedtuple("StageSpec", ["index", "block_count", "return_features"])


def _specs(counts, returns):
    return tuple(StageSpec(i + 1, c, r) for i, (c, r) in enumerate(zip(counts, returns)))


# Body name -> stage specs (res2..res5). "R-14"/"R-26" are small variants for CPU demos and tests.
STAGE_SPECS = {
    "R-50-C4": _specs((3, 4, 6), (False, False, True)),
    "R-50-C5": _specs((3, 4, 6, 3), (False, False, False, True)),
    "R-101-C4": _specs((3, 4, 23), (False, False, True)),
    "R-50-FPN": _specs((3, 4, 6, 3), (True, True, True, True)),
    "R-101-FPN": _specs((3, 4, 23, 3), (True, True, True, True)),
    "R-152-FPN": _specs((3, 8, 36, 3), (True, True, True, True)),
    "R-26-FPN": _specs((2, 2, 2, 2), (True, True, True, True)),
    "R-14-FPN": _specs((1, 1, 1, 1), (True, True, True, True)),
}


def _norm(cfg, kind, channels):
    return FrozenBatchNorm2d(channels) if kind == "frozen" else make_gn(cfg, channels)


class _Stem(nn.Module):
    def __init__(self, cfg, norm_kind):
        super().__init__()
        out_channels = cfg.MODEL.RESNETS.STEM_OUT_CHANNELS
        self.conv1 = nn.Conv2d(3, out_channels, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = _norm(cfg, norm_kind, out_channels)
        nn.init.kaiming_uniform_(self.conv1.weight, a=1)

    def forward(self, x):
        x = F.relu_(self.bn1(self.conv1(x)))
        return F.max_pool2d(x, kernel_size=3, stride=2, padding=1)


@RESNET_STEMS.register("StemWithFixedBatchNorm")
def stem_with_fixed_bn(cfg):
    return _Stem(cfg, "frozen")


@RESNET_STEMS.register("StemWithGN")
def stem_with_gn(cfg):
    return _Stem(cfg, "gn")


class Bottleneck(nn.Module):
    def __init__(self, cfg, norm_kind, in_channels, bottleneck_channels, out_channels, num_groups, stride_in_1x1,
                 stride, dilation=1):
        super().__init__()
        self.downsample = None
        if in_channels != out_channels:
            down_stride = stride if dilation == 1 else 1
            self.downsample = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, kernel_size=1, stride=down_stride, bias=False),
                _norm(cfg, norm_kind, out_channels),
            )
        if dilation > 1:
            stride = 1
        stride_1x1, stride_3x3 = (stride, 1) if stride_in_1x1 else (1, stride)
        self.conv1 = nn.Conv2d(in_channels, bottleneck_channels, 1, stride=stride_1x1, bias=False)
        self.bn1 = _norm(cfg, norm_kind, bottleneck_channels)
        self.conv2 = nn.Conv2d(bottleneck_channels, bottleneck_channels, 3, stride=stride_3x3, padding=dilation,
                               bias=False, groups=num_groups, dilation=dilation)
        self.bn2 = _norm(cfg, norm_kind, bottleneck_channels)
        self.conv3 = nn.Conv2d(bottleneck_channels, out_channels, 1, bias=False)
        self.bn3 = _norm(cfg, norm_kind, out_channels)
        for conv in (self.conv1, self.conv2, self.conv3):
            nn.init.kaiming_uniform_(conv.weight, a=1)
        if self.downsample is not None:
            nn.init.kaiming_uniform_(self.downsample[0].weight, a=1)

    def forward(self, x):
        identity = x
        out = F.relu_(self.bn1(self.conv1(x)))
        out = F.relu_(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return F.relu_(out + identity)


@RESNET_TRANS.register("BottleneckWithFixedBatchNorm")
def bottleneck_with_fixed_bn(cfg, *args, **kwargs):
    return Bottleneck(cfg, "frozen", *args, **kwargs)


@RESNET_TRANS.register("BottleneckWithGN")
def bottleneck_with_gn(cfg, *args, **kwargs):
    return Bottleneck(cfg, "gn", *args, **kwargs)


class ResNet(nn.Module):
    """ResNet body returning the outputs of the stages marked ``return_features`` (C2..C5 for FPN)."""

    def __init__(self, cfg):
        super().__init__()
        body = cfg.MODEL.BACKBONE.CONV_BODY
        if body not in STAGE_SPECS:
            raise UnknownName(f"unknown MODEL.BACKBONE.CONV_BODY '{body}'; known: {', '.join(sorted(STAGE_SPECS))}")
        r = cfg.MODEL.RESNETS
        self.stem = RESNET_STEMS[r.STEM_FUNC](cfg)
        num_groups, width = r.NUM_GROUPS, r.WIDTH_PER_GROUP
        in_channels = r.STEM_OUT_CHANNELS
        bottleneck = num_groups * width
        out_channels = r.RES2_OUT_CHANNELS
        self.stages = []
        self.return_features = {}
        for spec in STAGE_SPECS[body]:
            name = f"layer{spec.index}"
            factor = 2 ** (spec.index - 1)
            dilation = r.RES5_DILATION if spec.index == 4 else 1
            blocks = []
            stride = int(spec.index > 1) + 1
            for _ in range(spec.block_count):
                blocks.append(RESNET_TRANS[r.TRANS_FUNC](
                    cfg, in_channels, bottleneck * factor, out_channels * factor, num_groups, r.STRIDE_IN_1X1,
                    stride, dilation=dilation))
                stride = 1
                in_channels = out_channels * factor
            self.add_module(name, nn.Sequential(*blocks))
            self.stages.append(name)
            self.return_features[name] = spec.return_features
        self.out_channels = in_channels
        self._freeze_backbone(cfg.MODEL.BACKBONE.FREEZE_CONV_BODY_AT)

    def _freeze_backbone(self, freeze_at):
        modules = [self.stem] + [getattr(self, s) for s in self.stages]
        for module in modules[:max(freeze_at, 0)]:
            for p in module.parameters():
                p.requires_grad = False

    def forward(self, x):
        outputs = []
        x = self.stem(x)
        for name in self.stages:
            x = getattr(self, name)(x)
            if self.return_features[name]:
                outputs.append(x)
        return outputs
