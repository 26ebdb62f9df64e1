"""ROIAlign with maskrcnn-benchmark's legacy semantics (``aligned=False``) on torchvision's kernel.

Legacy ROIAlign does not subtract the half-pixel offset and clamps ROI sizes to at least one pixel; this is
torchvision's ``aligned=False`` mode, bit for bit. MLPerf's reference accuracy depends on it, so we never use
``aligned=True`` here.

:func:`multilevel_roi_align` pools each ROI from its own FPN level in one op whose output shape does not depend
on how the ROIs fall into levels, and which reads no size back from the device (no host sync): under
``torch.compile`` it is one opaque node (forward and backward) that a CUDA graph can hold.
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


# ------------------------------------------------------------------------------- multi-level, in one op, no sync
def _sample_grid(rois, levels, shapes, scales, size, sampling_ratio):
    """torchvision's ``pre_calc_for_bilinear_interpolate`` (legacy, ``aligned=False``) for every ROI at once, each on
    its own level, with the kernel's float32 arithmetic in its order: for every ROI, bin (``size x size``) and
    sample (``sampling_ratio`` squared, row-major), the four neighbours' flat positions in the level's ``H x W``
    plane, their weights and whether the sample is inside (outside: weights 0, no gradient)."""
    dev = rois.device
    k = rois.shape[0]
    lvl = levels.clamp(min=0)
    heights = torch.tensor([s[2] for s in shapes], device=dev)[lvl]
    widths = torch.tensor([s[3] for s in shapes], device=dev)[lvl]
    scale = torch.tensor(scales, dtype=torch.float64, device=dev)[lvl]
    # offset_rois[i] * spatial_scale: float times double, rounded to float on assignment
    x1, y1, x2, y2 = ((rois[:, i].double() * scale).float() for i in range(1, 5))
    one = torch.ones_like(x1)
    roi_w = torch.maximum(x2 - x1, one)
    roi_h = torch.maximum(y2 - y1, one)
    bin_w = roi_w / size
    bin_h = roi_h / size
    grid = sampling_ratio
    p = torch.arange(size, device=dev, dtype=torch.float32)
    i = torch.arange(grid, device=dev, dtype=torch.float32) + 0.5
    # yy = roi_start_h + ph * bin_size_h + (iy + .5f) * bin_size_h / grid_h: shape (K, S, G)
    yy = (y1[:, None, None] + p[None, :, None] * bin_h[:, None, None]) + i[None, None, :] * bin_h[:, None, None] / grid
    xx = (x1[:, None, None] + p[None, :, None] * bin_w[:, None, None]) + i[None, None, :] * bin_w[:, None, None] / grid
    # (K, S, S, G, G): ph, pw, iy, ix
    y = yy[:, :, None, :, None].expand(k, size, size, grid, grid)
    x = xx[:, None, :, None, :].expand(k, size, size, grid, grid)
    h = heights.view(k, 1, 1, 1, 1).float()
    w = widths.view(k, 1, 1, 1, 1).float()
    inside = ~((y < -1.0) | (y > h) | (x < -1.0) | (x > w)) & (levels >= 0).view(k, 1, 1, 1, 1)
    y = torch.where(y <= 0, torch.zeros_like(y), y)
    x = torch.where(x <= 0, torch.zeros_like(x), x)
    y_low, x_low = y.trunc(), x.trunc()
    y_edge, x_edge = y_low >= h - 1, x_low >= w - 1
    y_low = torch.where(y_edge, h - 1, y_low)
    x_low = torch.where(x_edge, w - 1, x_low)
    y_high = torch.where(y_edge, y_low, y_low + 1)
    x_high = torch.where(x_edge, x_low, x_low + 1)
    y = torch.where(y_edge, y_low, y)
    x = torch.where(x_edge, x_low, x)
    ly, lx = y - y_low, x - x_low
    hy, hx = 1.0 - ly, 1.0 - lx
    weights = torch.stack((hy * hx, hy * lx, ly * hx, ly * lx), -1)
    weights = torch.where(inside[..., None], weights, torch.zeros_like(weights))
    wi = widths.view(k, 1, 1, 1, 1)
    yl, xl, yh, xh = (t.long() for t in (y_low, x_low, y_high, x_high))
    pos = torch.stack((yl * wi + xl, yl * wi + xh, yh * wi + xl, yh * wi + xh), -1)
    pos = torch.where(inside[..., None], pos, torch.zeros_like(pos))
    return pos, weights, inside


def _rows(rois, levels, shapes, pos):
    """Row of each neighbour in the channels-last concatenation of all levels (``sum N*H*W`` rows of C)."""
    dev = rois.device
    plane = torch.tensor([s[2] * s[3] for s in shapes], device=dev)
    offset = torch.cumsum(torch.tensor([0] + [s[0] * s[2] * s[3] for s in shapes[:-1]], device=dev), 0)
    lvl = levels.clamp(min=0)
    base = offset[lvl] + rois[:, 0].long() * plane[lvl]
    return base.view(-1, *([1] * (pos.dim() - 1))) + pos


def _roi_align_gather(features, rois, levels, output_size, scales, sampling_ratio, chunk=64):
    """Forward, tensor ops only: the samples' neighbours gathered from a channels-last concatenation of the levels
    and summed as torchvision's kernel sums them (``w1 v1 + w2 v2 + w3 v3 + w4 v4``, samples in order, / count)."""
    shapes = [tuple(f.shape) for f in features]
    c = shapes[0][1]
    dtype = _compute_dtype(features[0].dtype)
    table = torch.cat([f.to(dtype).permute(0, 2, 3, 1).reshape(-1, c) for f in features])
    k, s, g = rois.shape[0], output_size, sampling_ratio
    out = torch.empty((k, c, s, s), dtype=dtype, device=table.device)
    count = float(max(g * g, 1))
    for r0 in range(0, k, chunk):
        r = slice(r0, r0 + chunk)
        pos, weights, _ = _sample_grid(rois[r], levels[r], shapes, scales, s, g)
        rows = _rows(rois[r], levels[r], shapes, pos)
        kc = rows.shape[0]
        v = table.index_select(0, rows.reshape(-1)).view(kc, s, s, g * g, 4, c)
        wt = weights.to(dtype).view(kc, s, s, g * g, 4, 1)
        acc = torch.zeros((kc, s, s, c), dtype=dtype, device=table.device)
        for sample in range(g * g):
            val = wt[:, :, :, sample, 0] * v[:, :, :, sample, 0]
            for corner in range(1, 4):
                val = val + wt[:, :, :, sample, corner] * v[:, :, :, sample, corner]
            acc = acc + val
        out[r] = (acc / count).permute(0, 3, 1, 2)
    return out


def _roi_align_scatter(grad, rois, levels, shapes, scales, sampling_ratio, chunk=64):
    """Backward, tensor ops only: ``(grad * w) / count`` added to the four neighbours of every inside sample, in
    torchvision's order (ROI, bin, sample, neighbour; one ``index_add_`` in that order, sequential on the CPU)."""
    c = shapes[0][1]
    total = sum(n * h * w for n, _, h, w in shapes)
    acc = grad.new_zeros((total + 1, c))  # the last row: a spill slot for samples outside their level
    k, s, g = rois.shape[0], grad.shape[-1], sampling_ratio
    count = float(max(g * g, 1))
    for r0 in range(0, k, chunk):
        r = slice(r0, r0 + chunk)
        pos, weights, inside = _sample_grid(rois[r], levels[r], shapes, scales, s, g)
        rows = torch.where(inside[..., None], _rows(rois[r], levels[r], shapes, pos), total)
        gb = grad[r].permute(0, 2, 3, 1)  # (kc, S, S, C): grad_output_this_bin
        contrib = (gb[:, :, :, None, None, None, :] * weights.to(grad.dtype)[..., None]).div_(count)
        acc.index_add_(0, rows.reshape(-1), contrib.reshape(-1, c))
    out, start = [], 0
    for n, _, h, w in shapes:
        out.append(acc[start:start + n * h * w].view(n, h, w, c).permute(0, 3, 1, 2).contiguous())
        start += n * h * w
    return out


def _roi_align_masked(features, rois, levels, output_size, scales, sampling_ratio):
    """Forward on CUDA: torchvision's kernel on every ROI at every level, each ROI's own level selected (the
    other levels' work, L-fold, is cheap on a GPU; no sizes read back)."""
    dtype = _compute_dtype(features[0].dtype)
    out = None
    for lvl, (feature, scale) in enumerate(zip(features, scales)):
        pooled = roi_align(feature.to(dtype), rois, output_size, scale, sampling_ratio)
        mine = (levels == lvl).view(-1, 1, 1, 1)
        out = torch.where(mine, pooled, 0.0 if out is None else out)
    return out


@torch.library.custom_op("maskrcnn::multilevel_roi_align", mutates_args=())
def multilevel_roi_align(features: List[torch.Tensor], rois: torch.Tensor, levels: torch.Tensor, output_size: int,
                         scales: List[float], sampling_ratio: int) -> torch.Tensor:
    """``(K, C, S, S)``: ROI ``k`` pooled from ``features[levels[k]]`` (legacy ROIAlign, fp32); zeros where
    ``levels[k]`` is -1. No host sync: on the CPU one gather over all levels (bitwise torchvision's kernel), on
    CUDA torchvision's kernel per level with each ROI's level selected."""
    if features[0].device.type == "cuda" or sampling_ratio <= 0:  # adaptive grids have data-dependent sizes
        return _roi_align_masked(features, rois, levels, output_size, scales, sampling_ratio)
    return _roi_align_gather(features, rois, levels, output_size, scales, sampling_ratio)


@multilevel_roi_align.register_fake
def _(features, rois, levels, output_size, scales, sampling_ratio):
    x = features[0]
    return x.new_empty((rois.shape[0], x.shape[1], output_size, output_size), dtype=_compute_dtype(x.dtype))


@torch.library.custom_op("maskrcnn::multilevel_roi_align_backward", mutates_args=())
def multilevel_roi_align_backward(grad: torch.Tensor, rois: torch.Tensor, levels: torch.Tensor,
                                  feature_shapes: List[int], scales: List[float],
                                  sampling_ratio: int) -> List[torch.Tensor]:
    """The gradient of :func:`multilevel_roi_align` with respect to each feature map (fp32); ``feature_shapes``
    holds their ``(N, C, H, W)`` one after the other. No host sync (as the forward)."""
    shapes = [tuple(feature_shapes[i:i + 4]) for i in range(0, len(feature_shapes), 4)]
    if grad.device.type != "cuda" and sampling_ratio > 0:
        return _roi_align_scatter(grad, rois, levels, shapes, scales, sampling_ratio)
    return _roi_align_backward_masked(grad, rois, levels, shapes, scales, sampling_ratio)


def _roi_align_backward_masked(grad, rois, levels, shapes, scales, sampling_ratio):
    """Backward on CUDA: torchvision's backward per level on the gradient of that level's ROIs (zeros elsewhere)."""
    s = grad.shape[-1]
    out = []
    for lvl, ((n, c, h, w), scale) in enumerate(zip(shapes, scales)):
        mine = torch.where((levels == lvl).view(-1, 1, 1, 1), grad, 0.0).contiguous()
        out.append(torch.ops.torchvision._roi_align_backward(mine, rois.to(grad.dtype), scale, s, s, n, c, h, w,
                                                             sampling_ratio, False))
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
