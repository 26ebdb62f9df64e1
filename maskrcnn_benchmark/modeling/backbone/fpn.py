import torch.nn.functional as F
from torch import nn


class LastLevelMaxPool(nn.Module):
    """P6 = max-pool(P5, kernel 1, stride 2), as in Detectron's FPN for Mask R-CNN."""

    def forward(self, x):
        return [F.max_pool2d(x, 1, 2, 0)]


class FPN(nn.Module):
    """Feature pyramid: 1x1 lateral ("inner") convs, nearest top-down upsampling, 3x3 output ("layer") convs.

    Returns ``[P2, P3, P4, P5, P6]`` (finest first) when ``top_blocks`` is LastLevelMaxPool.
    """

    def __init__(self, in_channels_list, out_channels, conv_block, top_blocks=None):
        super().__init__()
        self.inner_blocks = nn.ModuleList(conv_block(c, out_channels, 1) for c in in_channels_list)
        self.layer_blocks = nn.ModuleList(conv_block(out_channels, out_channels, 3) for _ in in_channels_list)
        self.top_blocks = top_blocks

    def forward(self, xs):
        last_inner = self.inner_blocks[-1](xs[-1])
        results = [self.layer_blocks[-1](last_inner)]
        for x, inner, layer in zip(xs[-2::-1], self.inner_blocks[-2::-1], self.layer_blocks[-2::-1]):
            lateral = inner(x)
            top_down = F.interpolate(last_inner, size=lateral.shape[-2:], mode="nearest")
            last_inner = lateral + top_down
            results.insert(0, layer(last_inner))
        if self.top_blocks is not None:
            results.extend(self.top_blocks(results[-1]))
        return results
