import torch
from torch import nn

from ...registry import ROI_MASK_PREDICTOR


@ROI_MASK_PREDICTOR.register("MaskRCNNC4Predictor")
class MaskRCNNC4Predictor(nn.Module):
    """2x2 stride-2 deconvolution + ReLU, then 1x1 conv to one mask logit map per class (``conv5_mask``,
    ``mask_fcn_logits``: the reference's modules and parameters, so checkpoints load both ways).

    Computed as two matrix products per input pixel: a 2x2 deconvolution with stride 2 does not overlap (input
    pixel (i, j) alone writes output pixels (2i + a, 2j + b)), so deconvolution, ReLU and the 1x1 convolution are
    ``[C] @ [C, 2*2*D]`` -> ReLU -> ``[D] @ [D, K]`` for each of the four sub-pixels; only the K-channel logits are
    laid out as images at the end. The same sums as the two convolutions, in another order: the logits differ by
    float rounding (``tests/modeling/test_mask_predictor.py`` holds them and their gradients to torch's
    ConvTranspose2d + Conv2d). Without gradients on the CPU the rows go through in chunks of ``ROWS_PER_CHUNK``, so
    the 2*2*D-channel intermediate stays in cache. ``bench/mask_predictor.py`` (2 CPU cores, fastest of 15): inference
    of a demo evaluation batch (150 rows of 64 x 14 x 14) 31.2 -> 12.0 ms, of 1,920 rows 347 -> 176 ms; forward +
    backward of the demo's 64 training rows the same within the noise (17.6 vs 16.2 ms), of COCO's 256 rows of 256
    channels 1,105 -> 990 ms.
    """

    ROWS_PER_CHUNK = 32

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
        n, c, h, w = x.shape
        d, k = self.conv5_mask.out_channels, self.mask_fcn_logits.out_channels
        pixels = x.permute(0, 2, 3, 1).reshape(n, h * w, c)  # a view when x is channels-last (the CPU mask head)
        up_weight = self.conv5_mask.weight.permute(0, 2, 3, 1).reshape(c, 4 * d)  # [C, (a, b, D)]
        up_bias = self.conv5_mask.bias.repeat(4)
        # [D, K] read in place from the K x D x 1 x 1 weight: its gradient then comes back with the weight's own
        # strides, also when NHWC made them channels-last ((D, 1, D, D), which a reshape's gradient would not
        # give: DDP then copies that gradient every step and warns "Grad strides do not match bucket view strides")
        weight = self.mask_fcn_logits.weight
        logit_weight = weight.as_strided((d, k), (weight.stride(1), weight.stride(0)))
        logit_bias = self.mask_fcn_logits.bias
        if torch.is_grad_enabled() or x.device.type != "cpu":
            up = torch.addmm(up_bias, pixels.reshape(n * h * w, c), up_weight).relu_()
            logits = torch.addmm(logit_bias, up.view(n * h * w * 4, d), logit_weight)
        else:
            chunks = []
            for i in range(0, n, self.ROWS_PER_CHUNK):
                up = torch.addmm(up_bias, pixels[i:i + self.ROWS_PER_CHUNK].reshape(-1, c), up_weight).relu_()
                chunks.append(torch.addmm(logit_bias, up.view(-1, d), logit_weight))
            logits = torch.cat(chunks) if chunks else x.new_empty(0, k)
        # (n, i, j, a, b, K) -> (n, K, 2i + a, 2j + b)
        return logits.view(n, h, w, 2, 2, k).permute(0, 5, 1, 3, 2, 4).reshape(n, k, 2 * h, 2 * w)
