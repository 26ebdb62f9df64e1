import torch.nn.functional as F
from torch import nn


class LastLevelMaxPool(nn.Module):
    """P6 = max-pool(P5, kernel 1, stride 2), as in Detectron's FPN for Mask R-CNN."""

    def forward(self, x):
        return [F.max_pool2d(x, 1, 2, 0)]


class FPN(nn.Module):
    """Feature pyramid: 1x1 lateral ("inner") convs, nearest top-down upsampling, 3x3 output ("layer") convs.

    Returns ``[P2, P3, P4, P5, P6]`` (finest first) when ``top_blocks`` is LastLevelMaxPool. The convolutions are
    the reference's ``fpn_inner1..4`` and ``fpn_layer1..4`` (``inner_blocks``/``layer_blocks`` hold their names).
    """

    def __init__(self, in_channels_list, out_channels, conv_block, top_blocks=None):
        super().__init__()
        self.inner_blocks, self.layer_blocks = [], []
        for idx, in_channels in enumerate(in_channels_list, 1):
            self.add_module(f"fpn_inner{idx}", conv_block(in_channels, out_channels, 1))
            self.add_module(f"fpn_layer{idx}", conv_block(out_channels, out_channels, 3))
            self.inner_blocks.append(f"fpn_inner{idx}")
            self.layer_blocks.append(f"fpn_layer{idx}")
        self.top_blocks = top_blocks

    def forward(self, xs):
        inner = [getattr(self, n) for n in self.inner_blocks]
        layer = [getattr(self, n) for n in self.layer_blocks]
        last_inner = inner[-1](xs[-1])
        results = [layer[-1](last_inner)]
        for x, inner_conv, layer_conv in zip(xs[-2::-1], inner[-2::-1], layer[-2::-1]):
            lateral = inner_conv(x)
            top_down = F.interpolate(last_inner, size=lateral.shape[-2:], mode="nearest")
            last_inner = lateral + top_down
            results.insert(0, layer_conv(last_inner))
        if self.top_blocks is not None:
            results.extend(self.top_blocks(results[-1]))
        return results
