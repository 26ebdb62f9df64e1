import torch

from maskrcnn_benchmark.modeling.balanced_positive_negative_sampler import BalancedPositiveNegativeSampler
from maskrcnn_benchmark.modeling.box_coder import BoxCoder
from maskrcnn_benchmark.modeling.matcher import Matcher
from maskrcnn_benchmark.modeling.roi_heads.mask_head import Masker
from maskrcnn_benchmark.modeling.rpn.anchor_generator import AnchorGenerator, generate_anchors
from maskrcnn_benchmark.modeling.rpn.rpn import RPNPostProcessor
from maskrcnn_benchmark.modeling.utils import rank_within_groups


def test_cell_anchors_match_detectron_by_hand():
    # stride 16, size 32: ratio 0.5 -> 23x12 base rounded (half-to-even) then x2; ratio 2 -> 11x22 then x2.
    a = generate_anchors(16, (32,), (0.5, 1.0, 2.0))
    assert a.tolist() == [[-15, -4, 30, 19], [-8, -8, 23, 23], [-3, -14, 18, 29]]


def test_grid_anchor_order_is_location_major():
    gen = AnchorGenerator(sizes=(32,), aspect_ratios=(0.5, 1.0, 2.0), anchor_strides=(16,))
    (anchors,) = gen.grid_anchors([(2, 3)], "cpu")
    assert anchors.shape == (18, 4)
    # second location is one stride to the right, same three cell anchors
    torch.testing.assert_close(anchors[3:6], anchors[0:3] + torch.tensor([16.0, 0, 16, 0]))
    torch.testing.assert_close(anchors[9:12], anchors[0:3] + torch.tensor([0.0, 16, 0, 16]))
    vis = gen.visibility(anchors, torch.tensor([[64.0, 64.0]]))
    assert vis.shape == (1, 18) and not vis[0, 0] and vis[0, 13]  # location (16, 16), ratio 1: [8, 8, 39, 39]


def test_precomputed_anchors_are_found_however_the_device_was_spelled():
    """The compiled step's anchors are precomputed for ``cfg``'s device and read back under the feature maps'
    device: on a GPU ``cuda`` against ``cuda:0``, here ``cpu:0`` against ``cpu``. A miss made the traced step
    compute the anchors and keep them in the module's cache (see the next test)."""
    gen = AnchorGenerator()
    sizes = [(8, 12), (4, 6), (2, 3), (1, 2), (1, 1)]
    gen.precompute(sizes, torch.device("cpu", 0))
    first = gen.grid_anchors(sizes, torch.device("cpu"))
    assert gen.grid_anchors(sizes, torch.device("cpu")) is first and not gen._cache


def test_a_traced_step_keeps_no_anchors_in_the_module():
    """Anchors of a size that was not precomputed, under torch.compile: computed in the graph, never written to
    the module's cache (such a write makes the anchors an output of the graph that the next step reads: with CUDA
    graphs, memory a later replay overwrote; seen on an H200 as "accessing tensor output of CUDAGraphs that has
    been overwritten by a subsequent run" in the RPN)."""
    gen = AnchorGenerator()
    features = [torch.zeros(1, 4, 8 // 2 ** i or 1, 12 // 2 ** i or 1) for i in range(5)]
    torch._dynamo.reset()
    traced = torch.compile(lambda fs: gen(None, fs), backend="eager", fullgraph=True)(features)
    torch._dynamo.reset()
    assert not gen._cache
    for a, b in zip(traced, gen(None, features)):
        assert torch.equal(a, b)


def test_box_coder_roundtrip_and_reference_values():
    coder = BoxCoder((10.0, 10.0, 5.0, 5.0))
    props = torch.tensor([[0.0, 0.0, 9.0, 9.0], [10.0, 20.0, 49.0, 39.0]])
    gts = torch.tensor([[1.0, 1.0, 10.0, 10.0], [5.0, 25.0, 54.0, 44.0]])
    deltas = coder.encode(gts, props)
    torch.testing.assert_close(deltas[0], torch.tensor([1.0, 1.0, 0.0, 0.0]))
    torch.testing.assert_close(coder.decode(deltas, props), gts, atol=1e-4, rtol=0)


def test_matcher_thresholds_and_low_quality_matches():
    # 2 gt (+1 padded row with -1), 4 predictions
    iou = torch.tensor([[[0.9, 0.5, 0.2, 0.1], [0.1, 0.65, 0.25, 0.0], [-1, -1, -1, -1]]])
    m = Matcher(0.7, 0.3, allow_low_quality_matches=False)(iou)
    assert m.tolist() == [[0, -2, -1, -1]]
    m = Matcher(0.7, 0.3, allow_low_quality_matches=True)(iou)
    assert m.tolist() == [[0, 1, -1, -1]]


def test_sampler_respects_budget_and_fraction_per_image():
    labels = torch.full((3, 1000), -1)
    labels[0, :50] = 1
    labels[0, 50:900] = 0
    labels[1, :500] = 1
    labels[1, 500:520] = 0
    labels[2, :10] = 0
    pos, neg = BalancedPositiveNegativeSampler(256, 0.5)(labels)
    assert pos.sum(1).tolist() == [50, 128, 0]
    assert neg.sum(1).tolist() == [206, 20, 10]
    assert (labels[pos] == 1).all() and (labels[neg] == 0).all()
    assert not (pos & neg).any()


def test_rank_within_groups():
    groups = torch.tensor([2, 0, 2, 1, 0, 2])
    assert rank_within_groups(groups).tolist() == [0, 0, 1, 0, 1, 2]


def _post(per_batch, top_n):
    from maskrcnn_benchmark.modeling.box_coder import BoxCoder as BC

    return RPNPostProcessor(pre_nms_top_n=50, post_nms_top_n=50, nms_thresh=0.7, min_size=0,
                            fpn_post_nms_top_n=top_n, per_batch=per_batch, box_coder=BC((1.0, 1.0, 1.0, 1.0)))


def test_fpn_post_nms_top_n_per_batch_vs_per_image():
    # Image 0 has high objectness everywhere, image 1 low: per batch, image 0 takes most of the budget.
    anchors = [torch.tensor([[x * 20.0, 0.0, x * 20.0 + 15, 15.0] for x in range(10)])]
    obj = [torch.stack((torch.linspace(5, 4, 10), torch.linspace(-4, -5, 10)))]
    reg = [torch.zeros(2, 10, 4)]
    sizes = [(64, 256), (64, 256)]
    per_batch = _post(True, 12)(anchors, obj, reg, sizes)
    assert [len(b) for b in per_batch] == [10, 2]
    per_image = _post(False, 6)(anchors, obj, reg, sizes)
    assert [len(b) for b in per_image] == [6, 6]
    assert torch.allclose(per_image[1].get_field("objectness"), obj[0][1, :6].sigmoid())


def test_masker_pastes_reference_geometry():
    masker = Masker(threshold=0.5, padding=1)
    mask = torch.ones(1, 1, 28, 28)
    out = masker.paste(mask, torch.tensor([[10.0, 5.0, 37.0, 32.0]]), 50, 60)
    assert out.shape == (1, 1, 50, 60) and out.dtype == torch.bool
    ys, xs = out[0, 0].nonzero(as_tuple=True)
    # The box is expanded by 30/28 for the one-pixel zero padding and truncated to integers as the reference
    # does (x: 9.04..37.96 -> 9..37), so a full mask covers 10..36 (the padding cells fall on 9 and 37).
    assert xs.min().item() == 10 and xs.max().item() == 36
    assert ys.min().item() == 5 and ys.max().item() == 31


def test_pooler_gives_zero_features_to_an_inverted_box():
    """A box inverted in one direction has a negative "+1" area, so no FPN level (NaN): the reference pools
    nothing for it (and ours did not crash on a negative bincount)."""
    from maskrcnn_benchmark.modeling.poolers import Pooler

    pooler = Pooler(7, (0.25, 0.125, 0.0625, 0.03125), 2)
    feats = [torch.randn(1, 4, 64 // s, 64 // s) for s in (1, 2, 4, 8)]
    rois = torch.tensor([[0.0, 10, 10, 40, 40], [0.0, 30, 10, 20, 40], [0.0, 0, 0, 200, 200]])  # 2nd: w = -9
    out = pooler(feats, rois)
    assert out.shape == (3, 4, 7, 7) and (out[1] == 0).all() and out[0].abs().sum() > 0 and out[2].abs().sum() > 0


def test_the_samplers_draws_pick_each_candidate_as_randperm_would():
    """The reference samples each image's candidates with torch.randperm: every positive is picked with
    probability budget / positives, every negative with what remains / negatives. Ours draws keys from one 32-bit
    base per call (docs/numerics.md); over 5000 calls (seeded) each candidate's frequency is within 5 binomial
    standard deviations of randperm's probability."""
    import math

    torch.manual_seed(0)
    sampler = BalancedPositiveNegativeSampler(16, 0.25)  # 4 positives, 12 negatives per image
    labels = torch.zeros(3, 64, dtype=torch.long)
    labels[:, :10] = 1  # 10 positive candidates, 54 negative
    calls, picked = 5000, torch.zeros(3, 64)
    for _ in range(calls):
        pos, neg = sampler(labels)
        picked += (pos | neg).float()
    for rows, p in ((slice(0, 10), 4 / 10), (slice(10, 64), 12 / 54)):
        freq = picked[:, rows] / calls
        assert float((freq - p).abs().max()) <= 5 * math.sqrt(p * (1 - p) / calls), (p, freq)
