"""ROIAlign and the multi-level Pooler against slow, obviously-correct loop references (legacy semantics)."""
import math

import pytest
import torch

from maskrcnn_benchmark.layers import ROIAlign, roi_align
from maskrcnn_benchmark.modeling.poolers import LevelMapper, Pooler


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
    torch.testing.assert_close(ours, ref, rtol=1e-6, atol=1e-8)
    grad = torch.randn_like(ours)
    ours.backward(grad)
    ref.backward(grad)
    torch.testing.assert_close(a.grad, b.grad, rtol=1e-6, atol=1e-8)


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
    rois = torch.tensor([[0, 0, 0, 30, 30], [1, 10, 10, 200, 200], [0, 5, 5, 100, 120], [1, 0, 0, 250, 250.0]])
    pooler = Pooler(7, scales, 2)
    out = pooler(feats, rois)
    levels = pooler.map_levels(rois[:, 1:])
    for i, lvl in enumerate(levels.tolist()):
        expected = roi_align(feats[lvl], rois[i:i + 1], 7, scales[lvl], 2)
        torch.testing.assert_close(out[i:i + 1], expected)
