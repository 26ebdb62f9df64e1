"""ROIAlign and the multi-level Pooler against slow, obviously-correct loop references (legacy semantics)."""
import math

import pytest
import torch

import importlib

from maskrcnn_benchmark.layers import ROIAlign, roi_align
from maskrcnn_benchmark.layers.roi_align import multilevel_roi_align
from maskrcnn_benchmark.modeling.poolers import LevelMapper, Pooler

roi_align_module = importlib.import_module("maskrcnn_benchmark.layers.roi_align")


def _bilinear(feat, y, x):
    """Legacy maskrcnn-benchmark bilinear sample of ``feat`` (C, H, W) at (y, x); 0 outside [-1, H]."""
    h, w = feat.shape[-2:]
    if y < -1.0 or y > h or x < -1.0 or x > w:
        return feat.new_zeros(feat.shape[0])
    y, x = max(y, 0.0), max(x, 0.0)
    y_low, x_low = int(y), int(x)
    if y_low >= h - 1:
        y_high = y_low = h - 1
        y = float(y_low)
    else:
        y_high = y_low + 1
    if x_low >= w - 1:
        x_high = x_low = w - 1
        x = float(x_low)
    else:
        x_high = x_low + 1
    ly, lx = y - y_low, x - x_low
    hy, hx = 1 - ly, 1 - lx
    return (hy * hx * feat[:, y_low, x_low] + hy * lx * feat[:, y_low, x_high]
            + ly * hx * feat[:, y_high, x_low] + ly * lx * feat[:, y_high, x_high])


def roi_align_reference(inp, rois, out_size, scale, sampling_ratio):
    out = []
    for roi in rois.tolist():
        b, x1, y1, x2, y2 = roi
        feat = inp[int(b)]
        sw, sh, ew, eh = x1 * scale, y1 * scale, x2 * scale, y2 * scale
        rw, rh = max(ew - sw, 1.0), max(eh - sh, 1.0)
        bw, bh = rw / out_size, rh / out_size
        gw = sampling_ratio if sampling_ratio > 0 else math.ceil(rw / out_size)
        gh = sampling_ratio if sampling_ratio > 0 else math.ceil(rh / out_size)
        bins = torch.zeros(feat.shape[0], out_size, out_size, dtype=inp.dtype)
        rows = []
        for ph in range(out_size):
            cols = []
            for pw in range(out_size):
                acc = feat.new_zeros(feat.shape[0])
                for iy in range(gh):
                    y = sh + ph * bh + (iy + 0.5) * bh / gh
                    for ix in range(gw):
                        x = sw + pw * bw + (ix + 0.5) * bw / gw
                        acc = acc + _bilinear(feat, y, x)
                cols.append(acc / (gw * gh))
            rows.append(torch.stack(cols, -1))
        bins = torch.stack(rows, -2)
        out.append(bins)
    return torch.stack(out)


def _random_rois(n, batch, size, gen):
    xy = torch.rand(n, 2, generator=gen) * size * 0.8 - 4
    wh = torch.rand(n, 2, generator=gen) * size * 0.6 + 0.3
    idx = torch.randint(0, batch, (n, 1), generator=gen).float()
    return torch.cat((idx, xy, xy + wh), 1).double()


@pytest.mark.parametrize("sampling_ratio", [0, 2])
@pytest.mark.parametrize("scale", [1.0, 0.5])
def test_roi_align_forward_backward_matches_loop_reference(sampling_ratio, scale):
    gen = torch.Generator().manual_seed(1)
    inp = torch.randn(2, 3, 9, 11, generator=gen, dtype=torch.float64)
    rois = _random_rois(6, 2, 20 * scale ** -1 / 2, gen)
    # Include a degenerate (sub-pixel) ROI and one hanging off the border.
    rois[0, 1:] = torch.tensor([3.0, 3.0, 3.2, 3.1])
    rois[1, 1:] = torch.tensor([-5.0, -3.0, 6.0, 7.0])
    a = inp.clone().requires_grad_()
    b = inp.clone().requires_grad_()
    ours = roi_align(a, rois, 4, scale, sampling_ratio)
    ref = roi_align_reference(b, rois, 4, scale, sampling_ratio)
    # float64: the loop sums the samples in another order than the kernel (measured 2026-11-27: forward equal,
    # gradients within 1.3e-15); the reference's own outputs: tests/parity/test_golden_layers.py
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-12)
    grad = torch.randn_like(ours)
    ours.backward(grad)
    ref.backward(grad)
    torch.testing.assert_close(a.grad, b.grad, rtol=0, atol=1e-12)


def test_roi_align_module_is_legacy_not_aligned():
    inp = torch.arange(16.0).view(1, 1, 4, 4)
    rois = torch.tensor([[0.0, 0.0, 0.0, 2.0, 2.0]])
    out = ROIAlign((1, 1), 1.0, 1)(inp, rois)
    # Legacy: a single sample at the ROI centre (1, 1) -> value 5; aligned=True would sample at (0.5, 0.5).
    assert out.item() == pytest.approx(5.0)
    assert "aligned=False" in repr(ROIAlign((1, 1), 1.0, 1))


def test_level_mapper_matches_fpn_formula():
    mapper = LevelMapper(2, 5)
    # sqrt("+1" area) = 224 -> canonical level 4 -> index 2; 112 -> level 3; 20 -> clamped to level 2; 2000 -> 5.
    boxes = torch.tensor([[0, 0, 223, 223], [0, 0, 111, 111], [0, 0, 19, 19], [0, 0, 1999, 1999.0]])
    assert mapper(boxes).tolist() == [2, 1, 0, 3]


def test_pooler_pools_each_roi_from_its_level():
    gen = torch.Generator().manual_seed(0)
    scales = (0.25, 0.125, 0.0625, 0.03125)
    feats = [torch.randn(2, 3, 64 // 2 ** i, 64 // 2 ** i, generator=gen) for i in range(4)]
    rois = torch.tensor([[0, 0, 0, 30, 30], [1, 10, 10, 200, 200], [0, 5, 5, 100, 120], [1, 0, 0, 250, 250.0],
                         [0, 0, 0, 500, 500]])
    pooler = Pooler(7, scales, 2)
    out = pooler(feats, rois)
    levels = pooler.map_levels(rois[:, 1:])
    # the reference's level (FPN's eq. 1 with "+1" sizes): floor(4 + log2(sqrt((w + 1)(h + 1)) / 224)), clamped to
    # P2..P5 (from the scales): 31 px -> 1.1 -> P2, 191 -> 3.8 -> P3, 96x116 -> 2.9 -> P2, 251 -> 4.2 -> P4,
    # 501 -> 5.2 -> P5 (the mapper itself was the only oracle of the levels, and no ROI reached the top one)
    assert levels.tolist() == [0, 1, 0, 2, 3]
    for i, lvl in enumerate(levels.tolist()):
        expected = roi_align(feats[lvl], rois[i:i + 1], 7, scales[lvl], 2)
        torch.testing.assert_close(out[i:i + 1], expected)


def _levels_case(k=300, seed=0):
    gen = torch.Generator().manual_seed(seed)
    shapes = [(2, 8, 40, 60), (2, 8, 20, 30), (2, 8, 10, 15), (2, 8, 5, 8)]
    feats = [torch.randn(s, generator=gen, requires_grad=True) for s in shapes]
    b = torch.rand(k, 4, generator=gen) * torch.tensor([240.0, 160, 240, 160]) - 20  # some partly outside
    b[:, 2:] = b[:, :2] + torch.rand(k, 2, generator=gen) * 120 - 10                   # some inverted, tiny
    rois = torch.cat([torch.randint(0, 2, (k, 1), generator=gen).float(), b], 1)
    levels = torch.randint(-1, 4, (k,), generator=gen)  # -1: no level (the reference pools nothing)
    return feats, rois, levels, (0.25, 0.125, 0.0625, 0.03125)


def _per_level_oracle(feats, rois, levels, scales, size, sampling_ratio):
    """Today's grouping: torchvision's kernel on the ROIs of each level (their count read on the host)."""
    out = torch.zeros((rois.shape[0], feats[0].shape[1], size, size))
    for lvl, (f, s) in enumerate(zip(feats, scales)):
        idx = (levels == lvl).nonzero().flatten()
        if idx.numel():
            out[idx] = roi_align(f, rois[idx], size, s, sampling_ratio)
    return out


@pytest.mark.parametrize("k", [4, 300])
@pytest.mark.parametrize("size", [7, 14])
def test_multilevel_roi_align_in_one_op_is_bitwise_torchvision(size, k):
    """The static step's multi-level ROIAlign (one op, each ROI's level given, no size read back) equals
    torchvision's kernel applied per level, bit for bit, forward and backward, in float32 on the CPU (ROIs
    partly outside, inverted, tiny, without a level; a few, where several samples of a bin share a pixel, and
    many)."""
    feats, rois, levels, scales = _levels_case(k)
    want = _per_level_oracle(feats, rois, levels, scales, size, 2)
    grad = torch.randn_like(want)
    want_grads = [torch.zeros_like(f) if g is None else g  # a level no ROI uses
                  for f, g in zip(feats, torch.autograd.grad(want, feats, grad, allow_unused=True))]
    got = multilevel_roi_align(feats, rois, levels, size, list(scales), 2)
    got_grads = torch.autograd.grad(got, feats, grad)
    assert torch.equal(got, want)
    assert all(torch.equal(a, b) for a, b in zip(got_grads, want_grads))
    # the CUDA form (every level on every ROI, each ROI's own selected) is exact too
    masked = roi_align_module._roi_align_masked(feats, rois, levels, size, list(scales), 2)
    assert torch.equal(masked, want)
    masked_grads = roi_align_module._roi_align_backward_masked(grad, rois, levels, [f.shape for f in feats],
                                                               list(scales), 2)
    # the same values; torchvision's backward adds +0.0 for the other levels' ROIs, which may turn a -0.0 into +0.0
    assert all(torch.equal(a, b) for a, b in zip(masked_grads, want_grads))


@pytest.mark.parametrize("sampling_ratio", [1, 3])
def test_other_sampling_ratios_are_bitwise_torchvision(sampling_ratio):
    """The backward's two forms: a power-of-two sample count (1: one sparse product, as for the configs' 2) and
    another (9: the products added with index_add_), both bit for bit torchvision's kernel per level."""
    feats, rois, levels, scales = _levels_case(300)
    want = _per_level_oracle(feats, rois, levels, scales, 7, sampling_ratio)
    grad = torch.randn_like(want)
    want_grads = [torch.zeros_like(f) if g is None else g
                  for f, g in zip(feats, torch.autograd.grad(want, feats, grad, allow_unused=True))]
    got = multilevel_roi_align(feats, rois, levels, 7, list(scales), sampling_ratio)
    assert torch.equal(got, want)
    assert all(torch.equal(a, b) for a, b in zip(torch.autograd.grad(got, feats, grad), want_grads))


def test_no_rois_pool_nothing_and_give_zero_gradients():
    feats, rois, levels, scales = _levels_case(4)
    got = multilevel_roi_align(feats, rois[:0], levels[:0], 7, list(scales), 2)
    assert got.shape == (0, feats[0].shape[1], 7, 7)
    assert all(torch.equal(g, torch.zeros_like(f)) for f, g in zip(feats, torch.autograd.grad(got.sum(), feats)))


def test_a_roi_with_nan_coordinates_pools_zeros_and_leaves_the_others_alone():
    """A diverging run's NaN box: its samples count as outside (zeros, no gradient) instead of indexing memory
    at a wild row; the other ROIs' results do not change."""
    feats, rois, levels, scales = _levels_case(8)
    levels = levels.clamp(min=0)
    want = multilevel_roi_align(feats, rois, levels, 7, list(scales), 2)
    bad = rois.clone()
    bad[3, 1:] = float("nan")
    bad[5, 2] = float("inf")
    got = multilevel_roi_align(feats, bad, levels, 7, list(scales), 2)
    grads = torch.autograd.grad(got, feats, torch.ones_like(got))
    assert torch.equal(got[3], torch.zeros_like(got[3]))
    keep = [i for i in range(8) if i not in (3, 5)]
    assert torch.equal(got[keep], want[keep])
    assert all(torch.isfinite(g).all() for g in grads)


def test_multilevel_roi_align_reads_nothing_back():
    from maskrcnn_benchmark.utils.host_syncs import HostSyncCounter

    feats, rois, levels, scales = _levels_case(64)
    with HostSyncCounter() as counter:
        out = multilevel_roi_align(feats, rois, levels, 7, list(scales), 2)
        out.sum().backward()
    assert counter.total == 0, counter.report()


@pytest.mark.parametrize("sampling_ratio", [2, 0])
def test_the_compilers_view_of_the_output_has_the_real_layout(sampling_ratio):
    """The CPU's sparse products give a channels-last output (the mask head's convolutions take it as it is), the
    kernel path (adaptive sampling here, CUDA) a contiguous one: the fake implementation, which is all
    torch.compile sees, must say the same, or inductor would index the output with the wrong strides."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    feats, rois, levels, scales = _levels_case(8)
    real = multilevel_roi_align(feats, rois, levels, 7, list(scales), sampling_ratio)
    with FakeTensorMode() as mode:
        fake = multilevel_roi_align([mode.from_tensor(f) for f in feats], mode.from_tensor(rois),
                                    mode.from_tensor(levels), 7, list(scales), sampling_ratio)
    assert fake.shape == real.shape and fake.stride() == real.stride()
    assert real.is_contiguous(memory_format=torch.channels_last if sampling_ratio else torch.contiguous_format)
