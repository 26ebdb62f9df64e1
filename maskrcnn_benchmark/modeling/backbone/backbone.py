from torch import nn

from ..make_layers import conv_with_kaiming_uniform, make_gn
from ..registry import BACKBONES
from . import fpn as fpn_module
from . import resnet


def _fpn_body(cfg):
    body = resnet.ResNet(cfg)
    in_channels_stage2 = cfg.MODEL.RESNETS.RES2_OUT_CHANNELS
    out_channels = cfg.MODEL.BACKBONE.OUT_CHANNELS
    use_gn, use_relu = cfg.MODEL.FPN.USE_GN, cfg.MODEL.FPN.USE_RELU

    def conv_block(cin, cout, k):
        return conv_with_kaiming_uniform(cin, cout, k, norm=make_gn(cfg, cout) if use_gn else None,
                                         relu=use_relu)

    fpn = fpn_module.FPN([in_channels_stage2 * 2 ** i for i in range(4)], out_channels, conv_block,
                         top_blocks=fpn_module.LastLevelMaxPool())
    model = nn.Sequential()
    model.add_module("body", body)
    model.add_module("fpn", fpn)
    model.out_channels = out_channels
    return model


for _name in ("R-50-FPN", "R-101-FPN", "R-152-FPN", "R-26-FPN", "R-14-FPN"):
    BACKBONES.register(_name, _fpn_body)


def build_backbone(cfg):
    return BACKBONES[cfg.MODEL.BACKBONE.CONV_BODY](cfg)
