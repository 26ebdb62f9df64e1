import pytest
import torch

from maskrcnn_benchmark.layers import FrozenBatchNorm2d, batched_nms, nms, smooth_l1_loss


def legacy_iou(a, b):
    iw = min(a[2], b[2]) - max(a[0], b[0]) + 1
    ih = min(a[3], b[3]) - max(a[1], b[1]) + 1
    if iw <= 0 or ih <= 0:
        return 0.0
    inter = iw * ih
    area = lambda r: (r[2] - r[0] + 1) * (r[3] - r[1] + 1)  # noqa: E731
    return inter / (area(a) + area(b) - inter)


def nms_reference(boxes, scores, thresh):
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    keep = []
    for i in order:
        if all(legacy_iou(boxes[i], boxes[j]) <= thresh for j in keep):
            keep.append(i)
    return keep


def _random_boxes(n, gen):
    xy = torch.rand(n, 2, generator=gen) * 50
    wh = torch.rand(n, 2, generator=gen) * 20 + 1
    return torch.cat((xy, xy + wh), 1).round()


@pytest.mark.parametrize("thresh", [0.3, 0.5, 0.7])
def test_nms_matches_greedy_loop_with_plus_one_iou(thresh):
    gen = torch.Generator().manual_seed(3)
    boxes = _random_boxes(200, gen)
    scores = torch.rand(200, generator=gen)
    assert nms(boxes, scores, thresh).tolist() == nms_reference(boxes.tolist(), scores.tolist(), thresh)


def test_plus_one_changes_the_decision_on_small_boxes():
    # Two 2x2-pixel boxes (inclusive coordinates 0..1 and 1..2): legacy IoU = 2 / 6 = 0.333,
    # while the continuous (torchvision) IoU is 1 / 7 = 0.143.
    boxes = torch.tensor([[0.0, 0.0, 1.0, 1.0], [1.0, 0.0, 2.0, 1.0]])
    scores = torch.tensor([0.9, 0.8])
    assert nms(boxes, scores, 0.3).tolist() == [0]
    assert nms(boxes, scores, 0.4).tolist() == [0, 1]


def test_batched_nms_is_independent_per_group():
    gen = torch.Generator().manual_seed(4)
    boxes = _random_boxes(150, gen)
    scores = torch.rand(150, generator=gen)
    groups = torch.randint(0, 4, (150,), generator=gen)
    keep = set(batched_nms(boxes, scores, groups, 0.5).tolist())
    expected = set()
    for g in range(4):
        idx = (groups == g).nonzero().squeeze(1).tolist()
        local = nms_reference([boxes[i].tolist() for i in idx], [scores[i].item() for i in idx], 0.5)
        expected.update(idx[i] for i in local)
    assert keep == expected


def test_smooth_l1_hand_computed():
    x = torch.tensor([0.0, 0.05, 1.0])
    y = torch.zeros(3)
    beta = 1.0 / 9
    expected = [0.0, 0.5 * 0.05 ** 2 / beta, 1.0 - 0.5 * beta]
    assert smooth_l1_loss(x, y, beta, size_average=False).item() == pytest.approx(sum(expected))
    assert smooth_l1_loss(x, y, beta).item() == pytest.approx(sum(expected) / 3)


def test_frozen_batchnorm_applies_fixed_affine_and_has_no_parameters():
    bn = FrozenBatchNorm2d(2)
    bn.weight.copy_(torch.tensor([2.0, 3.0]))
    bn.bias.copy_(torch.tensor([1.0, -1.0]))
    bn.running_mean.copy_(torch.tensor([0.5, 0.0]))
    # a variance of 1e-4: an epsilon as torchvision's FrozenBatchNorm2d adds (1e-5) would move the scale by 5 %
    bn.running_var.copy_(torch.tensor([4.0, 1e-4]))
    x = torch.randn(1, 2, 3, 3)
    expected = torch.stack(((x[0, 0] - 0.5) / 2 * 2 + 1, x[0, 1] / 0.01 * 3 - 1))[None]
    torch.testing.assert_close(bn(x), expected)  # the reference's: scale = weight * rsqrt(running_var), no epsilon
    assert list(bn.parameters()) == []
