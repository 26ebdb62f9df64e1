"""The static training step (what a compiled run executes): same losses and gradients as the eager step, no graph
break, bounded recompiles. docs/numerics.md, "A step with static shapes"."""
import pytest
import torch

from helpers import r50_cfg, sample_with_and_without_padding, shapes_image, small_cfg
from maskrcnn_benchmark.engine.compile import graph_breaks
from maskrcnn_benchmark.modeling import build_detection_model
from maskrcnn_benchmark.modeling.roi_heads.mask_head.loss import polygon_mask_targets
from maskrcnn_benchmark.modeling.roi_heads.mask_head.mask_head import batch_mask_targets
from maskrcnn_benchmark.modeling.compat import target_batch
from maskrcnn_benchmark.structures import BoxList, SegmentationMask, to_image_list
from maskrcnn_benchmark.synthetic.batch import synthetic_batch


def _batch(n=2, width=128, height=96):
    images, targets = [], []
    for i in range(n):
        image, target = shapes_image(width, height)
        images.append(image.flip(-1) if i % 2 else image)
        targets.append(target.transpose(0) if i % 2 else target)
    return to_image_list(images, 32), targets


def _losses_and_grads(model, images, targets, seed=1):
    torch.manual_seed(seed)
    model.zero_grad(set_to_none=True)
    losses = model(images, targets)
    sum(losses.values()).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return {k: v.detach() for k, v in losses.items()}, grads


def test_static_step_computes_the_eager_losses_and_gradients():
    """Ground truth padded to 96 slots: not a bit changes, losses or gradients. (Failed before the padding parts
    of the polygon buffers were given an instance after the real ones: they were counted as parts of instance 0,
    whose mask targets then took other instances' polygons; and before the sampler drew its keys independently of
    the row length.) With the mask head's fixed rows too: the same losses bitwise."""
    torch.manual_seed(0)
    model = build_detection_model(small_cfg()).train()
    images, targets = _batch()
    eager_losses, eager_grads = _losses_and_grads(model, images, target_batch(targets))
    static = target_batch(targets, max_gt=96)  # 96 slots, the ROI heads' fixed rows
    padded = target_batch(targets, max_gt=96)
    padded.static = False  # 96 slots, the ROI heads' rows as needed
    padded_losses, padded_grads = _losses_and_grads(model, images, padded)
    static_losses, static_grads = _losses_and_grads(model, images, static)
    assert static_losses.keys() == padded_losses.keys() == eager_losses.keys()
    for k in eager_losses:
        assert torch.equal(padded_losses[k], eager_losses[k]), k
        assert torch.equal(static_losses[k], eager_losses[k]), k
    assert static_grads.keys() == padded_grads.keys() == eager_grads.keys()
    for k, g in eager_grads.items():
        assert torch.equal(padded_grads[k], g), k
        # The fixed rows (128 per image instead of the batch's positives) add rows of weight zero: the same terms
        # plus zeros, but the convolutions' weight gradients are then reduced in blocks of another size, which
        # reorders float32 additions. Measured: at most 1e-6 of the tensor's largest gradient (9e-7, stem conv).
        scale = float(g.abs().max())
        assert float((static_grads[k] - g).abs().max()) <= 1e-5 * scale, k


def test_padded_polygon_buffers_give_the_same_mask_targets():
    _, targets = _batch(3)
    rois = torch.tensor([[10.0, 20.0, 60.0, 70.0], [0.0, 0.0, 127.0, 95.0], [30.0, 10.0, 90.0, 50.0]])
    image, matched = torch.tensor([0, 1, 2]), torch.tensor([1, 0, 1])
    tight = batch_mask_targets(target_batch(targets), rois, image, matched, 28)
    padded_batch = target_batch(targets, max_gt=96)
    assert padded_batch.poly_vertices.shape[0] == 3 * 96  # one row of polygons per ground-truth slot
    padded = batch_mask_targets(padded_batch, rois, image, matched, 28)
    assert tight.any() and torch.equal(padded, tight)
    # the same targets from the reference's interface (flat packed polygons of one image at a time)
    for k in range(3):
        masks = targets[int(image[k])].get_field("masks")
        one = polygon_mask_targets(masks.packed_polygons(), matched[k:k + 1], rois[k:k + 1], 28)
        assert torch.equal(one[0], tight[k])


def test_the_samplers_keys_are_a_function_of_the_position_alone():
    """The keys were torch.rand((P, N)) read column-major: prefix-stable on the CPU, but on CUDA torch's generator
    hands elements to threads by the tensor's size, so padding the rows changed the draws, and it advanced the
    generator by P x N, so every later draw moved too. The keys are now a hash of one random base and each
    candidate's position: the padding changes neither the draws nor what the generator gives next."""
    labels = torch.randint(-1, 2, (12, 2007), generator=torch.Generator().manual_seed(0))
    pos, neg, pos_p, neg_p, same_after = sample_with_and_without_padding(labels, 89)
    assert same_after
    assert torch.equal(pos_p[:, :2007], pos) and torch.equal(neg_p[:, :2007], neg)
    assert not pos_p[:, 2007:].any() and not neg_p[:, 2007:].any()
    assert int(pos.sum()) == 12 * 128 and torch.equal(neg.sum(1), 512 - pos.sum(1))


def test_more_annotations_than_the_cap_keep_all_of_them():
    boxes = torch.tensor([[float(i), 0.0, i + 5.0, 5.0] for i in range(100)])
    t = BoxList(boxes, (200, 10))
    t.add_field("labels", torch.ones(100, dtype=torch.int64))
    t.add_field("masks", SegmentationMask([[[i, 0, i + 5, 0, i + 5, 5]] for i in range(100)], (200, 10)))
    batch = target_batch([t], max_gt=96)
    assert batch.num_slots == 128 and int(batch.valid.sum()) == 100
    assert torch.equal(batch.boxes[0, :100], boxes)


def test_training_forward_has_no_graph_break():
    """The R-50-FPN config's training forward of a static step under torch._dynamo.explain (default config), on
    two 128x192 images with 64 box-head samples per image, its body cut to one bottleneck per stage (R-14-FPN: the
    same FrozenBN stem and bottleneck modules as R-50's 16, traced in 5 s instead of 7): one graph. (38 breaks
    before the static step; bench/graph_breaks.py prints the table for the whole R-50-FPN at 320x480 and the
    recipe's 512 samples.) The sizes only set tensor shapes, not the traced path; explain also runs the model,
    which these sizes make 3x quicker. A break that comes back is listed with its reason."""
    cfg = r50_cfg("MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE", 64, "MODEL.BACKBONE.CONV_BODY", "R-14-FPN")
    torch.manual_seed(0)
    model = build_detection_model(cfg).train()
    images, targets, _ = synthetic_batch(2, 128, 192, 81)
    breaks, graphs, reasons = graph_breaks(model, to_image_list(images, 32),
                                           target_batch(targets, max_gt=96))
    assert (breaks, graphs, reasons) == (0, 1, [])


@pytest.mark.slow  # dynamo traces the trunk (3 s): kept out of make test-fast, which must stay under a minute
def test_backbone_fpn_and_rpn_head_compile_as_one_graph():
    torch.manual_seed(0)
    model = build_detection_model(small_cfg()).train()

    def trunk(x):
        features = model.backbone(x)
        return features, model.rpn.head(features)

    images, _ = _batch()
    torch._dynamo.reset()
    compiled = torch.compile(trunk, fullgraph=True, dynamic=False, backend="aot_eager")
    (features, (logits, deltas)) = compiled(images.tensors)
    ref_features, (ref_logits, ref_deltas) = trunk(images.tensors)
    for ours, ref in zip(list(features) + list(logits) + list(deltas),
                         list(ref_features) + list(ref_logits) + list(ref_deltas)):
        torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)  # aot_eager decomposes: last-bit differences
    torch._dynamo.reset()


def _disc_targets(n, width, height, vertices):
    """One disc per image with ``vertices`` corners: batches that differ only in their polygon buffers."""
    import math

    out = []
    for i in range(n):
        cx, cy, r = width / 2 + i, height / 2, min(width, height) / 4
        poly = [c for k in range(vertices) for c in (cx + r * math.cos(2 * math.pi * k / vertices),
                                                    cy + r * math.sin(2 * math.pi * k / vertices))]
        t = BoxList(torch.tensor([[cx - r, cy - r, cx + r, cy + r]]), (width, height))
        t.add_field("labels", torch.tensor([1 + i % 3]))
        t.add_field("masks", SegmentationMask([[poly]], (width, height)))
        out.append(t)
    return out


@pytest.mark.slow  # dynamo traces the step twice (3.6 s): kept out of make test-fast, which must stay under a minute
def test_static_step_compiles_once_per_image_size(shape=(96, 128)):
    """Batches of one padded size, with different image sizes inside it and polygon buffers of different sizes
    (16 ... 128 vertices per slot): dynamo compiles the training forward once, never again. (One padded size
    here; tests/engine/test_compiled_run.py trains 100 iterations through the loader over two, landscape and
    portrait, and counts one graph per size.)"""
    from torch._dynamo.utils import counters

    from maskrcnn_benchmark.engine.compile import _mark_polygon_buffers_dynamic, precompute_anchors

    torch.manual_seed(0)
    model = build_detection_model(small_cfg()).train()
    precompute_anchors(model, [shape], "cpu")
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, backend="eager", dynamic=False)
    seen = set()
    for step, vertices in enumerate((8, 30, 60, 100)):
        h, w = shape[0] - 8 * step, shape[1] - 16 * step
        images = to_image_list([torch.randn(3, h, w) for _ in range(2)], 32, fixed_sizes=[shape])
        assert images.tensors.shape[-2:] == shape
        batch = target_batch(_disc_targets(2, w, h, vertices), max_gt=96)
        seen.add(batch.poly_vertices.shape[1])
        _mark_polygon_buffers_dynamic(batch)
        compiled(images, batch)
    assert len(seen) == 4  # four different vertex buffers
    assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])
    torch._dynamo.reset()



def test_eager_box_head_runs_on_the_sampled_rows_only():
    """With fewer proposals than BATCH_SIZE_PER_IMAGE (small images, an RPN early in training) the eager step's box
    head runs on the largest sample count of an image in the batch, the static step on all its slots; the losses
    are the same. (Failed before: the eager step also ran every slot, 1.6x its step time on 256x384 images.)"""
    from maskrcnn_benchmark.modeling.roi_heads.box_head.loss import make_roi_box_loss_evaluator
    from maskrcnn_benchmark.modeling.rpn.rpn import Proposals

    cfg = small_cfg()
    evaluator = make_roi_box_loss_evaluator(cfg)
    s = cfg.MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE
    _, targets = _batch(2)
    g = torch.Generator().manual_seed(0)
    slots = 200  # the RPN's fixed proposal slots per image, mostly empty here
    boxes, valid = torch.zeros(2, slots, 4), torch.zeros(2, slots, dtype=torch.bool)
    for i, (count, t) in enumerate(zip((7, 12), targets)):
        xy = torch.rand(count, 2, generator=g) * 60
        own = torch.cat((torch.cat((xy, xy + 8 + torch.rand(count, 2, generator=g) * 30), 1), t.bbox))
        boxes[i, :len(own)], valid[i, :len(own)] = own, True
    counts = valid.sum(1)
    assert int(counts.max()) < s
    proposals = Proposals(boxes, torch.ones(2, slots), valid)
    torch.manual_seed(3)
    eager = evaluator.subsample(proposals, target_batch(targets))
    torch.manual_seed(3)
    static = evaluator.subsample(proposals, target_batch(targets, static=True))
    most = int(counts.max())  # IoU thresholds 0.5/0.5: no proposal is ignored, all are sampled
    assert eager.slot_rois.shape[0] == 2 * most and static.slot_rois.shape[0] == 2 * s
    assert torch.equal(eager.rois, static.rois) and torch.equal(eager.labels, static.labels)
    rows = torch.arange(2 * s).view(2, s)[:, :most].reshape(-1)
    assert torch.equal(eager.slot_valid, static.slot_valid[rows]) and not static.slot_valid.view(2, s)[:, most:].any()
    k = cfg.MODEL.ROI_BOX_HEAD.NUM_CLASSES
    logits, deltas = torch.randn(2 * s, k, generator=g), torch.randn(2 * s, 4 * k, generator=g)
    for a, b in zip(evaluator(logits, deltas, static), evaluator(logits[rows], deltas[rows], eager)):
        # the same terms, with more zero rows in the static sum: equal up to float32 summation order
        torch.testing.assert_close(a, b, rtol=1e-6, atol=0)


@pytest.mark.parametrize("static", [False, True], ids=["eager", "static"])
def test_an_image_without_objects_trains_with_the_others(static):
    """The training filter keeps an image whose only boxes are crowd regions (the reference's filter counts them),
    and crowd regions are never targets: such an image trains with no object at all (the reference's matcher
    raised on an image without ground truth). Its anchors and proposals are all negatives; the batch's losses and
    gradients stay finite, in both forms of the step."""
    torch.manual_seed(0)
    model = build_detection_model(small_cfg()).train()
    images, targets = _batch()
    empty = BoxList(torch.zeros((0, 4)), targets[1].size, mode="xyxy")
    empty.add_field("labels", torch.zeros((0,), dtype=torch.int64))
    empty.add_field("masks", SegmentationMask([], targets[1].size, mode="poly"))
    batch = target_batch([targets[0], empty], max_gt=96 if static else 0)
    batch.static = static
    losses, grads = _losses_and_grads(model, images, batch)
    assert all(torch.isfinite(v) for v in losses.values()), losses
    assert all(torch.isfinite(g).all() for g in grads.values())
    assert float(losses["loss_objectness"]) > 0 and float(losses["loss_classifier"]) > 0


def _crowded(size):
    """100 objects of 6x6 on a grid (more than the 96 ground-truth slots: the batch grows to 128)."""
    boxes, polygons = [], []
    for i in range(100):
        x, y = 2 + 12 * (i % 10), 2 + 9 * (i // 10)
        boxes.append([float(x), float(y), x + 6.0, y + 6.0])
        polygons.append([[x, y, x + 6, y, x + 6, y + 6, x, y + 6]])
    t = BoxList(torch.tensor(boxes), size, mode="xyxy")
    t.add_field("labels", torch.randint(1, 3, (100,), generator=torch.Generator().manual_seed(0)))
    t.add_field("masks", SegmentationMask(polygons, size, mode="poly"))
    return t


def _empty(size):
    t = BoxList(torch.zeros((0, 4)), size, mode="xyxy")
    t.add_field("labels", torch.zeros((0,), dtype=torch.int64))
    t.add_field("masks", SegmentationMask([], size, mode="poly"))
    return t


@pytest.mark.parametrize("second", [_empty, _crowded], ids=["an image without objects", "more objects than slots"])
def test_the_static_step_equals_the_eager_one_at_the_edges(second):
    """The equality above held on one ordinary batch only: an image without ground truth (every slot padding) and
    one with more objects than the 96 slots (the batch grows to 128) give the eager step's losses bitwise and its
    gradients to float32 summation order, as the ordinary batch does."""
    torch.manual_seed(0)
    model = build_detection_model(small_cfg()).train()
    images, targets = _batch()
    targets = [targets[0], second(targets[1].size)]
    eager_losses, eager_grads = _losses_and_grads(model, images, target_batch(targets))
    static = target_batch(targets, max_gt=96)
    assert static.static and static.num_slots == (128 if second is _crowded else 96)
    static_losses, static_grads = _losses_and_grads(model, images, static)
    assert static_losses.keys() == eager_losses.keys()
    for k in eager_losses:
        assert torch.equal(static_losses[k], eager_losses[k]), k
    assert static_grads.keys() == eager_grads.keys()
    for k, g in eager_grads.items():  # the tolerance of the test above, for the same reason
        assert float((static_grads[k] - g).abs().max()) <= 1e-5 * float(g.abs().max()), k
