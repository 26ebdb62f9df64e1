"""ROIAlign with maskrcnn-benchmark's legacy semantics (``aligned=False``) on torchvision's kernel.

Legacy ROIAlign does not subtract the half-pixel offset and clamps ROI sizes to at least one pixel; this is
torchvision's ``aligned=False`` mode, bit for bit. MLPerf's reference accuracy depends on it, so we never use
``aligned=True`` here.

:func:`multilevel_roi_align` pools each ROI from its own FPN level in one op whose output shape does not depend
on how the ROIs fall into levels: under ``torch.compile`` it is one opaque node (forward and backward), not a
graph break per level.
"""
from typing import List

import torch
from torch import nn
from torchvision.ops import roi_align as _tv_roi_align


def _compute_dtype(dtype):
    # Half precision runs in fp32, like the reference's @amp.float_function: fp16/bf16 ROI coordinates would
    # round to whole pixels.
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def roi_align(input, rois, output_size, spatial_scale, sampling_ratio):
    """``rois`` is ``(K, 5)``: batch index, x1, y1, x2, y2 in input-image coordinates."""
    if isinstance(output_size, int):
        output_size = (output_size, output_size)
    compute = _compute_dtype(input.dtype)
    out = _tv_roi_align(input.to(compute), rois.to(compute), output_size, spatial_scale, sampling_ratio,
                        aligned=False)
    return out.to(input.dtype)


class ROIAlign(nn.Module):
    def __init__(self, output_size, spatial_scale, sampling_ratio):
        super().__init__()
        self.output_size = output_size
        self.spatial_scale = spatial_scale
        self.sampling_ratio = sampling_ratio

    def forward(self, input, rois):
        return roi_align(input, rois, self.output_size, self.spatial_scale, self.sampling_ratio)

    def extra_repr(self):
        return f"output_size={self.output_size}, spatial_scale={self.spatial_scale}, " \
               f"sampling_ratio={self.sampling_ratio}, aligned=False"


def _level_groups(levels, num_levels):
    """Indices of the ROIs of each level (one sort, one host sync for the counts)."""
    order = torch.argsort(levels)
    counts = torch.bincount(levels + 1, minlength=num_levels + 1).tolist()  # bin 0: no level (-1)
    groups, start = [], counts[0]
    for count in counts[1:]:
        groups.append(order[start:start + count])
        start += count
    return groups


@torch.library.custom_op("maskrcnn::multilevel_roi_align", mutates_args=())
def multilevel_roi_align(features: List[torch.Tensor], rois: torch.Tensor, levels: torch.Tensor, output_size: int,
                         scales: List[float], sampling_ratio: int) -> torch.Tensor:
    """``(K, C, S, S)``: ROI ``k`` pooled from ``features[levels[k]]`` (legacy ROIAlign, fp32); zeros where
    ``levels[k]`` is -1."""
    x = features[0]
    out = torch.zeros((rois.shape[0], x.shape[1], output_size, output_size), dtype=_compute_dtype(x.dtype),
                      device=x.device)
    for feature, scale, idx in zip(features, scales, _level_groups(levels, len(features))):
        if idx.numel():
            out[idx] = roi_align(feature.to(out.dtype), rois[idx], output_size, scale, sampling_ratio)
    return out


@multilevel_roi_align.register_fake
def _(features, rois, levels, output_size, scales, sampling_ratio):
    x = features[0]
    return x.new_empty((rois.shape[0], x.shape[1], output_size, output_size), dtype=_compute_dtype(x.dtype))


@torch.library.custom_op("maskrcnn::multilevel_roi_align_backward", mutates_args=())
def multilevel_roi_align_backward(grad: torch.Tensor, rois: torch.Tensor, levels: torch.Tensor,
                                  feature_shapes: List[int], scales: List[float],
                                  sampling_ratio: int) -> List[torch.Tensor]:
    """The gradient of :func:`multilevel_roi_align` with respect to each feature map (fp32); ``feature_shapes``
    holds their ``(N, C, H, W)`` one after the other."""
    out = []
    s = grad.shape[-1]
    shapes = [feature_shapes[i:i + 4] for i in range(0, len(feature_shapes), 4)]
    for shape, scale, idx in zip(shapes, scales, _level_groups(levels, len(shapes))):
        n, c, h, w = shape
        if idx.numel():
            out.append(torch.ops.torchvision._roi_align_backward(
                grad[idx].contiguous(), rois[idx].to(grad.dtype), scale, s, s, n, c, h, w, sampling_ratio, False))
        else:
            out.append(grad.new_zeros((n, c, h, w)))
    return out


@multilevel_roi_align_backward.register_fake
def _(grad, rois, levels, feature_shapes, scales, sampling_ratio):
    return [grad.new_empty(feature_shapes[i:i + 4]) for i in range(0, len(feature_shapes), 4)]


def _setup_context(ctx, inputs, output):
    features, rois, levels, output_size, scales, sampling_ratio = inputs
    ctx.save_for_backward(rois, levels)
    ctx.feature_shapes = [int(v) for f in features for v in f.shape]
    ctx.feature_dtypes = [f.dtype for f in features]
    ctx.scales, ctx.sampling_ratio = scales, sampling_ratio


def _backward(ctx, grad):
    rois, levels = ctx.saved_tensors
    grads = multilevel_roi_align_backward(grad.float(), rois, levels, ctx.feature_shapes, ctx.scales,
                                          ctx.sampling_ratio)
    return [g.to(d) for g, d in zip(grads, ctx.feature_dtypes)], None, None, None, None, None


multilevel_roi_align.register_autograd(_backward, setup_context=_setup_context)
