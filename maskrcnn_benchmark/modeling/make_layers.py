"""Layer constructors with the reference's initializations (Detectron conventions)."""
from torch import nn

from ..layers import group_norm


def make_gn(cfg, channels):
    g = cfg.MODEL.GROUP_NORM
    return group_norm(channels, g.NUM_GROUPS, g.DIM_PER_GP, g.EPSILON)


def conv_with_kaiming_uniform(in_channels, out_channels, kernel_size, stride=1, dilation=1, norm=None,
                              relu=False):
    """Conv (+ optional norm, ReLU) with ``kaiming_uniform_(a=1)`` weights, as the reference's FPN/heads."""
    conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride,
                     padding=dilation * (kernel_size - 1) // 2, dilation=dilation, bias=norm is None)
    nn.init.kaiming_uniform_(conv.weight, a=1)
    if norm is None:
        nn.init.constant_(conv.bias, 0)
    layers = [conv] + ([norm] if norm is not None else []) + ([nn.ReLU(inplace=True)] if relu else [])
    return layers[0] if len(layers) == 1 else nn.Sequential(*layers)


def make_fc(dim_in, hidden_dim):
    fc = nn.Linear(dim_in, hidden_dim)
    nn.init.kaiming_uniform_(fc.weight, a=1)
    nn.init.constant_(fc.bias, 0)
    return fc
