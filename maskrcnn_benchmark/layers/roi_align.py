"""ROIAlign with maskrcnn-benchmark's legacy semantics (``aligned=False``) on torchvision's kernel.

Legacy ROIAlign does not subtract the half-pixel offset and clamps ROI sizes to at least one pixel; this is
torchvision's ``aligned=False`` mode, bit for bit. MLPerf's reference accuracy depends on it, so we never use
``aligned=True`` here.

:func:`multilevel_roi_align` pools each ROI from its own FPN level in one op whose output shape does not depend
on how the ROIs fall into levels, and which reads no size back from the device (no host sync: the counter of
bench/host_syncs.py finds none, tests/layers/test_roi_align.py): under
``torch.compile`` it is one opaque node (forward and backward) that a CUDA graph can hold.
"""
import warnings
from typing import List

import torch
from torch import nn
from torchvision.ops import roi_align as _tv_roi_align

# torch's notices on first use of a sparse CSR tensor: the products below are tested bit for bit against
# torchvision's kernel (tests/layers/test_roi_align.py), and their indices are in range by construction
warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta state", category=UserWarning)
warnings.filterwarnings("ignore", message="Sparse invariant checks are implicitly disabled", category=UserWarning)


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
def _axis_samples(lo, extent, size, grid, limit):
    """One axis of torchvision's ``pre_calc_for_bilinear_interpolate`` (legacy, ``aligned=False``), float32, in the
    kernel's order: for every ROI (``lo``, ``extent`` of shape ``(K,)``, ``limit`` the level's height or width),
    bin (``size``) and sample (``grid``): the low and high neighbour, the weight of each, and whether the sample
    is inside. Shapes ``(K, size, grid)``."""
    dev = lo.device
    k = lo.shape[0]
    one = torch.ones_like(lo)
    bin_size = torch.maximum(extent, one) / size
    p = torch.arange(size, device=dev, dtype=torch.float32)
    i = torch.arange(grid, device=dev, dtype=torch.float32) + 0.5
    # yy = roi_start_h + ph * bin_size_h + (iy + .5f) * bin_size_h / grid_h
    v = (lo[:, None, None] + p[None, :, None] * bin_size[:, None, None]) \
        + i[None, None, :] * bin_size[:, None, None] / grid
    n = limit.view(k, 1, 1).float()
    inside = ~((v < -1.0) | (v > n)) & torch.isfinite(v)  # NaN: outside (weight 0, row 0), never a wild row
    v = torch.where(v <= 0, torch.zeros_like(v), v)
    low = v.trunc()
    edge = low >= n - 1
    low = torch.where(edge, n - 1, low)
    high = torch.where(edge, low, low + 1)
    v = torch.where(edge, low, v)
    lw = v - low
    hw = 1.0 - lw
    return low.long(), high.long(), hw, lw, inside


def _outer(op, a, b, out=None):
    """``op`` of ``a (K, S, G)`` on the y axis and ``b (K, S, G)`` on the x axis: ``(K, S, G, S, G)`` (bin row, sample
    row, bin column, sample column), computed as ``(K, S*G, S*G)``, a column against a row: this broadcast
    vectorizes (one over the trailing G-sized dims did not). ``out``: written there (a strided view is fine)."""
    k, s, g = a.shape
    column, row = a.reshape(k, s * g, 1), b.reshape(k, 1, s * g)
    result = op(column, row) if out is None else op(column, row, out=out.view(k, s * g, s * g))
    return result.view(k, s, g, s, g)


def _sample_grid(rois, levels, shapes, scales, size, sampling_ratio):
    """torchvision's ``pre_calc_for_bilinear_interpolate`` (legacy, ``aligned=False``) for every ROI at once, each on
    its own level, with the kernel's float32 arithmetic in its order: for every ROI, bin (``size x size``) and
    sample (``sampling_ratio`` squared), the four neighbours' rows in the channels-last concatenation of all levels
    (``sum N*H*W`` rows of C) and their weights. Bilinear sampling is separable: each axis is computed once per ROI,
    bin and sample (:func:`_axis_samples`), then combined (:func:`_outer`).

    Returns ``rows`` and ``weights``, ``(K, S, G, S, G, 4)``, laid out as the axes give them (ROI, bin row, sample
    row, bin column, sample column, neighbour: a transpose of dims 2 and 3 away from the kernel's order; making it
    contiguous cost more than the products, its innermost dimension being G), and each axis' ``inside``, ``(K, S,
    G)``. A sample outside on either axis (or a ROI on level -1) has weight +0.0 for each neighbour (zeroed on the
    axis: the other factor is in [0, 1]) and valid rows (a NaN coordinate's included), so the products read real
    rows and add nothing."""
    k = rois.shape[0]
    dev = rois.device
    lvl = levels.clamp(min=0)
    heights = torch.tensor([s[2] for s in shapes], device=dev)[lvl]
    widths = torch.tensor([s[3] for s in shapes], device=dev)[lvl]
    scale = torch.tensor(scales, dtype=torch.float64, device=dev)[lvl]
    plane = torch.tensor([s[2] * s[3] for s in shapes], device=dev)[lvl]
    offset = torch.cumsum(torch.tensor([0] + [s[0] * s[2] * s[3] for s in shapes[:-1]], device=dev), 0)[lvl]
    base = offset + rois[:, 0].long() * plane  # row of pixel (0, 0) of the ROI's image on its level
    # offset_rois[i] * spatial_scale: float times double, rounded to float on assignment
    x1, y1, x2, y2 = ((rois[:, i].double() * scale).float() for i in range(1, 5))
    yl, yh, hy, ly, y_in = _axis_samples(y1, y2 - y1, size, sampling_ratio, heights)
    xl, xh, hx, lx, x_in = _axis_samples(x1, x2 - x1, size, sampling_ratio, widths)
    y_in &= (levels >= 0).view(k, 1, 1)
    hy, ly = torch.where(y_in, hy, 0.0), torch.where(y_in, ly, 0.0)
    hx, lx = torch.where(x_in, hx, 0.0), torch.where(x_in, lx, 0.0)
    wi, base = widths.view(k, 1, 1), base.view(k, 1, 1)
    yl, yh = torch.where(y_in, yl * wi + base, base), torch.where(y_in, yh * wi + base, base)
    xl, xh = torch.where(x_in, xl, 0), torch.where(x_in, xh, 0)
    weights = _neighbours(torch.mul, (hy, ly), (hx, lx))
    rows = _neighbours(torch.add, (yl, yh), (xl, xh))
    return rows, weights, y_in, x_in


def _neighbours(op, ys, xs):
    """``(K, S, G, S, G, 4)``: :func:`_outer` of the low/high y and x parts in the kernel's neighbour order (y low
    x low, y low x high, y high x low, y high x high), each written straight into its slot (no stack)."""
    out = ys[0].new_empty((*ys[0].shape, *ys[0].shape[1:], 4))
    for i, (y, x) in enumerate((a, b) for a in ys for b in xs):
        _outer(op, y, x, out=out[..., i])
    return out


def _kernel_order(grid):
    """``(K, S, G, S, G, ...)`` from :func:`_sample_grid` -> ``(K, S, S, G, G, ...)``: ROI, bin, sample (a view)."""
    return grid.transpose(2, 3)


def _spilled_rows(rows, y_in, x_in, spill):
    """``rows`` in the kernel's order, with ``spill`` for every sample outside its level (no gradient)."""
    return _kernel_order(torch.where(_outer(torch.logical_and, y_in, x_in)[..., None], rows, spill))


def _rows_matrix(rows, values, columns):
    """``(R, columns)`` sparse CSR matrix whose row ``r`` holds ``values[r]`` at ``rows[r]`` (``(..., P)``: P entries
    per row, repeated columns added; no size read from the data)."""
    per = rows.shape[-1]
    r = rows.numel() // per
    crow = torch.arange(0, r * per + 1, per, device=rows.device)
    return torch.sparse_csr_tensor(crow, rows.reshape(-1), values.reshape(-1), size=(r, columns),
                                   check_invariants=False)


def _product(matrix, dense, out=None):
    """``matrix @ dense`` in the dense operand's dtype (float32 here): autocast would run it in bf16. Into ``out``
    as ``addmm_`` with ``beta=0`` (the product alone, ``out``'s contents never read, NaN included): ``mm(out=)``
    of a sparse matrix zeroes ``out``, computes into a new tensor and copies it over (a 12,544 x 64 product in
    the demo's evaluation: 0.5 ms of fill and 0.13 ms of copy around 0.38 ms of product)."""
    with torch.autocast(dense.device.type, enabled=False):
        return matrix @ dense if out is None else out.addmm_(matrix, dense, beta=0)


def _roi_align_gather(features, rois, levels, output_size, scales, sampling_ratio, chunk=256):
    """Forward on the CPU: each sample's bilinear value is a row of a sparse product (its four neighbours' rows of
    a channels-last concatenation of the levels, weighted: ``w1 v1 + w2 v2 + w3 v3 + w4 v4`` in that order, as
    torchvision's kernel sums them), the samples added in order and divided by their count, bitwise the kernel
    (tests/layers/test_roi_align.py). The product reads the neighbours without materialising them
    (bench/roi_align.py; docs/benchmarks.md)."""
    shapes = [tuple(f.shape) for f in features]
    c = shapes[0][1]
    dtype = _compute_dtype(features[0].dtype)
    table = torch.cat([f.to(dtype).permute(0, 2, 3, 1).reshape(-1, c) for f in features])
    k, s, g = rois.shape[0], output_size, sampling_ratio
    # channels-last: each bin's C values are one row of the products, which accumulate in place (the CPU mask
    # head's convolutions take it as it is; the box head's flatten lays it out as before)
    out = torch.empty((k, c, s, s), dtype=dtype, device=table.device, memory_format=torch.channels_last)
    bins = out.permute(0, 2, 3, 1).view(k * s * s, c)
    count = float(max(g * g, 1))
    # one buffer for all chunks, which _product writes without zeroing it: a product into a fresh tensor also
    # zeroes and copies one (in the demo's evaluation about 1.4 ms around a 0.3 ms 12,544 x 64 product;
    # docs/benchmarks.md)
    val = table.new_empty((min(k, chunk) * s * s, c))
    for r0 in range(0, k, chunk):
        r = slice(r0, r0 + chunk)
        rows, weights, _, _ = _sample_grid(rois[r], levels[r], shapes, scales, s, g)
        kc = rows.shape[0]
        weights = weights.to(dtype)
        a, v = bins[r0 * s * s:(r0 + kc) * s * s], val[:kc * s * s]
        for sample in range(g * g):  # row-major, as the kernel adds them
            iy, ix = divmod(sample, g)
            _product(_rows_matrix(rows[:, :, iy, :, ix], weights[:, :, iy, :, ix], table.shape[0]), table,
                     out=v if sample else a)
            if sample:
                a.add_(v)
        a.div_(count)
    return out


def _roi_align_scatter(grad, rois, levels, shapes, scales, sampling_ratio, chunk=256):
    """Backward on the CPU: ``(grad * w) / count`` added to the four neighbours of every inside sample, in
    torchvision's order (ROI, bin, sample, neighbour), with the kernel's arithmetic. With a power-of-two ``count``
    (sampling ratio 1, 2, 4: the configs' 2) dividing by it is exact, so ``(grad * w) / count`` equals
    ``w * (grad / count)`` (apart from results below 2**-124, where float32 turns subnormal): the whole gradient
    is then one sparse product, the transpose of the forward's matrices built with a stable sort (every pixel's
    row holds its entries in the kernel's order, summed in that order), times ``grad / count`` per bin; the
    ``K*S*S x 4*count`` products are never materialised (bench/roi_align.py). Other counts: the products laid out
    by bin and added with ``index_add_`` (sequential on the CPU, chunk after chunk)."""
    c = shapes[0][1]
    total = sum(n * h * w for n, _, h, w in shapes)  # and a spill row for samples outside their level
    k, s, g = rois.shape[0], grad.shape[-1], sampling_ratio
    count = max(g * g, 1)
    if count & (count - 1) == 0:
        rows, weights, y_in, x_in = _sample_grid(rois, levels, shapes, scales, s, g)
        # sorted as int32 where the rows fit (about 1.6x faster than int64 on the CPU; the same order)
        key = torch.int32 if total < 2 ** 31 - 2 else torch.int64
        dest, entry = torch.sort(_spilled_rows(rows, y_in, x_in, total).reshape(-1).to(key), stable=True)
        crow = torch.searchsorted(dest, torch.arange(total + 2, device=rows.device, dtype=key))
        matrix = torch.sparse_csr_tensor(crow, torch.div(entry, count * 4, rounding_mode="floor"),
                                         _kernel_order(weights).to(grad.dtype).reshape(-1)[entry],
                                         size=(total + 1, k * s * s), check_invariants=False)
        acc = _product(matrix, grad.permute(0, 2, 3, 1).reshape(k * s * s, c) / float(count))
    else:
        acc = grad.new_zeros((total + 1, c))
        for r0 in range(0, k, chunk):
            r = slice(r0, r0 + chunk)
            rows, weights, y_in, x_in = _sample_grid(rois[r], levels[r], shapes, scales, s, g)
            kc = rows.shape[0]
            rows = _spilled_rows(rows, y_in, x_in, total)
            gb = grad[r].permute(0, 2, 3, 1).reshape(kc * s * s, 1, c)  # grad_output_this_bin
            weights = _kernel_order(weights).to(grad.dtype).reshape(kc * s * s, -1, 1)
            contrib = torch.mul(gb, weights).div_(float(count))
            acc.index_add_(0, rows.reshape(-1), contrib.view(-1, c))
    out, start = [], 0
    for n, _, h, w in shapes:
        out.append(acc[start:start + n * h * w].view(n, h, w, c).permute(0, 3, 1, 2).contiguous())
        start += n * h * w
    return out


def _roi_align_masked(features, rois, levels, output_size, scales, sampling_ratio):
    """Forward on CUDA: torchvision's kernel on every ROI at every level, each ROI's own level selected (the
    other levels' work, L-fold, not timed apart on a GPU; no sizes read back)."""
    dtype = _compute_dtype(features[0].dtype)
    out = None
    for lvl, (feature, scale) in enumerate(zip(features, scales)):
        pooled = roi_align(feature.to(dtype), rois, output_size, scale, sampling_ratio)
        mine = (levels == lvl).view(-1, 1, 1, 1)
        out = torch.where(mine, pooled, 0.0 if out is None else out)
    return out


def _uses_kernel(device, sampling_ratio):
    """Whether the op runs torchvision's kernel per level (CUDA; adaptive grids have data-dependent sizes) rather
    than the sparse products (the CPU, whose output is channels-last)."""
    return device.type == "cuda" or sampling_ratio <= 0


@torch.library.custom_op("maskrcnn::multilevel_roi_align", mutates_args=())
def multilevel_roi_align(features: List[torch.Tensor], rois: torch.Tensor, levels: torch.Tensor, output_size: int,
                         scales: List[float], sampling_ratio: int) -> torch.Tensor:
    """``(K, C, S, S)``: ROI ``k`` pooled from ``features[levels[k]]`` (legacy ROIAlign, fp32); zeros where
    ``levels[k]`` is -1. No host sync (counted, tests/layers/test_custom_ops_sync_free.py: 0): on the CPU sparse
    products over all levels (bitwise torchvision's kernel; the output channels-last), on CUDA torchvision's kernel per
    level with each ROI's level selected."""
    if _uses_kernel(features[0].device, sampling_ratio):
        return _roi_align_masked(features, rois, levels, output_size, scales, sampling_ratio)
    return _roi_align_gather(features, rois, levels, output_size, scales, sampling_ratio)


@multilevel_roi_align.register_fake
def _(features, rois, levels, output_size, scales, sampling_ratio):
    x = features[0]
    layout = torch.contiguous_format if _uses_kernel(x.device, sampling_ratio) else torch.channels_last
    return torch.empty((rois.shape[0], x.shape[1], output_size, output_size), dtype=_compute_dtype(x.dtype),
                       device=x.device, memory_format=layout)


@torch.library.custom_op("maskrcnn::multilevel_roi_align_backward", mutates_args=())
def multilevel_roi_align_backward(grad: torch.Tensor, rois: torch.Tensor, levels: torch.Tensor,
                                  feature_shapes: List[int], scales: List[float],
                                  sampling_ratio: int) -> List[torch.Tensor]:
    """The gradient of :func:`multilevel_roi_align` with respect to each feature map (fp32); ``feature_shapes``
    holds their ``(N, C, H, W)`` one after the other. No host sync (counted as the forward)."""
    shapes = [tuple(feature_shapes[i:i + 4]) for i in range(0, len(feature_shapes), 4)]
    if not _uses_kernel(grad.device, sampling_ratio):
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
