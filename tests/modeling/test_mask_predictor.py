"""The mask predictor's matrix-product form against torch's own ConvTranspose2d -> ReLU -> Conv2d (the oracle:
the predictor's modules called as convolutions)."""
import pytest
import torch
import torch.nn.functional as F

from helpers import small_cfg
from maskrcnn_benchmark.modeling.roi_heads.mask_head import MaskRCNNC4Predictor


def _predictor(seed=0):
    torch.manual_seed(seed)
    m = MaskRCNNC4Predictor(small_cfg(), 8)
    with torch.no_grad():  # nonzero biases, so a bias in the wrong sub-pixel or class shows
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return m


def _as_convolutions(m, x):
    return m.mask_fcn_logits(F.relu(m.conv5_mask(x)))


def _close(ours, theirs):
    # float32 sums of the same products in another order: a few units in the last place of the largest value
    scale = theirs.abs().max().item() if theirs.numel() else 0.0
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-5 * max(1.0, scale))


@pytest.mark.parametrize("rows", [0, 1, 33, 70])
@pytest.mark.parametrize("channels_last", [False, True])
def test_training_forward_and_gradients_match_the_convolutions(rows, channels_last):
    m = _predictor()
    x = torch.randn(rows, 8, 14, 14)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    grad_out = torch.randn(rows, m.mask_fcn_logits.out_channels, 28, 28)
    results = []
    for f in (m, lambda v: _as_convolutions(m, v)):
        m.zero_grad()
        xi = x.clone().requires_grad_(True)
        out = f(xi)
        out.backward(grad_out)
        results.append([out, xi.grad] + [p.grad.clone() for p in m.parameters()])
    assert results[0][0].shape == (rows, m.mask_fcn_logits.out_channels, 28, 28)
    for ours, theirs in zip(*results, strict=True):
        _close(ours, theirs)


@pytest.mark.parametrize("rows", [0, 1, 31, 32, 33, 70])
def test_inference_in_chunks_matches_the_convolutions(rows):
    m = _predictor(1)
    x = torch.randn(rows, 8, 14, 14).contiguous(memory_format=torch.channels_last)
    with torch.inference_mode():
        ours, theirs = m(x), _as_convolutions(m, x)
    assert ours.shape == theirs.shape
    _close(ours, theirs)
    with torch.no_grad():  # the chunks do not change a value: the same rows in one product give the same logits
        m.ROWS_PER_CHUNK = max(rows, 1)
        torch.testing.assert_close(m(x), ours, rtol=0, atol=0)
