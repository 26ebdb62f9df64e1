import math

import pytest
import torch

from helpers import empty_target, r50_cfg, shapes_image, small_cfg
from maskrcnn_benchmark.modeling import build_detection_model
from maskrcnn_benchmark.modeling.compat import image_list, train_forward
from maskrcnn_benchmark.structures import BoxList, SegmentationMask

LOSS_KEYS = {"loss_objectness", "loss_rpn_box_reg", "loss_classifier", "loss_box_reg", "loss_mask"}


@pytest.mark.slow
def _torchvision_mask_rcnn_r50_fpn(num_classes=81):
    """torchvision's Mask R-CNN R-50-FPN with FrozenBN (as the reference's; its BN would add parameters)."""
    from torchvision.models import resnet50
    from torchvision.models.detection import MaskRCNN
    from torchvision.models.detection.backbone_utils import _resnet_fpn_extractor
    from torchvision.ops import FrozenBatchNorm2d

    return MaskRCNN(_resnet_fpn_extractor(resnet50(norm_layer=FrozenBatchNorm2d), 5), num_classes)


def test_r50_fpn_builds_from_yaml_with_44m_parameters_and_trains_one_step():
    """The parameters of every part equal torchvision's Mask R-CNN R-50-FPN (an outside oracle with the same
    modules: the window 43.5-44.8M it replaced let a missing RPN conv, 590k, or mask-head conv pass)."""
    cfg = r50_cfg()
    model = build_detection_model(cfg)
    count = lambda module: sum(p.numel() for p in module.parameters())  # noqa: E731
    oracle = _torchvision_mask_rcnn_r50_fpn()
    assert [count(model.backbone), count(model.rpn), count(model.roi_heads)] == \
        [count(oracle.backbone), count(oracle.rpn), count(oracle.roi_heads)]
    assert count(model) == count(oracle) == 44_347_573
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    assert any(n.startswith("backbone.body.stem") for n in frozen)
    assert any(n.startswith("backbone.body.layer1") for n in frozen)
    assert not any(n.startswith("backbone.body.layer2") for n in frozen)
    img, target = shapes_image(160, 128)
    model.train()
    losses = train_forward(model, [img, img.flip(-1)[:, :, :150]], [target, empty_target(150, 128)])
    assert set(losses) == LOSS_KEYS
    assert all(torch.isfinite(v) for v in losses.values())
    sum(losses.values()).backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None for g in grads)


def test_eval_returns_boxlists_with_masks_of_image_size():
    cfg = small_cfg("MODEL.ROI_MASK_HEAD.POSTPROCESS_MASKS", True, "MODEL.ROI_HEADS.SCORE_THRESH", 0.0)
    model = build_detection_model(cfg).eval()
    img1, _ = shapes_image(128, 96)
    img2, _ = shapes_image(100, 80)
    out = model(image_list(model, [img1, img2[:, :80, :100]]))
    assert len(out) == 2
    for det, (w, h) in zip(out, [(128, 96), (100, 80)]):
        assert isinstance(det, BoxList) and det.size == (w, h)
        assert set(det.fields()) == {"scores", "labels", "mask"}
        assert len(det) > 0 and len(det) <= cfg.MODEL.ROI_HEADS.DETECTIONS_PER_IMG
        assert det.get_field("mask").shape == (len(det), 1, h, w)
        assert det.get_field("labels").min() >= 1
        b = det.bbox
        assert (b[:, 0] >= 0).all() and (b[:, 2] <= w - 1).all() and (b[:, 3] <= h - 1).all()


def test_training_handles_batch_without_any_ground_truth():
    model = build_detection_model(small_cfg()).train()
    img, _ = shapes_image()
    losses = train_forward(model, [img, img], [empty_target(128, 96), empty_target(128, 96)])
    assert set(losses) == LOSS_KEYS and all(torch.isfinite(v) for v in losses.values())
    assert losses["loss_mask"].item() == 0 and losses["loss_box_reg"].item() == 0


@pytest.mark.slow
def test_small_model_overfits_one_image():
    torch.manual_seed(0)
    cfg = small_cfg()
    model = build_detection_model(cfg).train()
    img, target = shapes_image()
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.01, momentum=0.9)
    history = []
    for _ in range(60):
        losses = train_forward(model, [img], [target])
        loss = sum(losses.values())
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
        opt.step()
        history.append(loss.item())
    start = sum(history[:3]) / 3
    end = sum(history[-3:]) / 3
    assert end < 0.5 * start, (start, end)


def _train_losses(cfg, dtype=None):
    torch.manual_seed(0)
    model = build_detection_model(cfg).train()
    img, target = shapes_image()
    torch.manual_seed(1)
    if dtype is None:
        return train_forward(model, [img], [target])
    with torch.autocast("cpu", dtype=dtype):
        return train_forward(model, [img], [target])


def test_fp32_bf16_and_channels_last_agree():
    # Every anchor becomes a proposal (no top-N, no suppression) and the samplers take everything, so the runs
    # differ by numerics only: at initialization all objectness probabilities are ~0.5 and in bf16 most of them
    # tie, so a top-N/NMS choice among them, and a random draw over them, would pick different proposals.
    take_all = ("MODEL.RPN.BATCH_SIZE_PER_IMAGE", 100000000, "MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE", 100000000,
                "MODEL.RPN.PRE_NMS_TOP_N_TRAIN", 100000, "MODEL.RPN.POST_NMS_TOP_N_TRAIN", 100000,
                "MODEL.RPN.FPN_POST_NMS_TOP_N_TRAIN", 100000, "MODEL.RPN.NMS_THRESH", 1.0)
    ref = _train_losses(small_cfg(*take_all))
    nhwc = _train_losses(small_cfg("NHWC", True, *take_all))
    bf16 = _train_losses(small_cfg(*take_all), torch.bfloat16)
    # Relative bounds only (an absolute one let loss_rpn_box_reg, 0.0014, be anything up to 0.02). Measured on
    # this machine (2026-11-27): channels_last at most 7e-7 relative (loss_mask: other convolution kernels, the
    # same float32 arithmetic up to summation order); bfloat16 at most 0.020 relative (loss_box_reg; 8 significant
    # bits, a rounding of 0.4% per op, through the whole network), loss_rpn_box_reg 3e-5.
    for k in LOSS_KEYS:
        assert math.isclose(nhwc[k].item(), ref[k].item(), rel_tol=1e-5), k
        assert math.isclose(bf16[k].item(), ref[k].item(), rel_tol=0.05), k


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_init_r50_losses_finite_with_extreme_activations(seed):
    """Full R-50-FPN, random init (FrozenBN is the identity, so activations grow huge) on random 0-255 images:
    every loss and every gradient is finite, as the reference's are. Decoded proposals can collapse to zero
    width; their background rows' regression targets are then inf/NaN, which must not reach the loss."""
    torch.manual_seed(seed)
    model = build_detection_model(r50_cfg()).train()
    images = [torch.rand(3, 224, 288) * 255, torch.rand(3, 256, 256) * 255]
    targets = []
    for w, h in ((288, 224), (256, 256)):
        boxes = torch.tensor([[20.0, 30, 120, 150], [60, 10, 200, 90]])
        t = BoxList(boxes, (w, h))
        t.add_field("labels", torch.tensor([3, 7]))
        t.add_field("masks", SegmentationMask([[[x1, y1, x2, y1, x2, y2, x1, y2]] for x1, y1, x2, y2 in
                                               boxes.tolist()], (w, h)))
        targets.append(t)
    losses = train_forward(model, images, targets)
    for k, v in losses.items():
        assert torch.isfinite(v), (k, v)
    sum(losses.values()).backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


@pytest.mark.parametrize("nhwc", [False, True])
def test_every_gradient_has_its_parameters_strides(nhwc):
    """DDP's bucket views take each parameter's strides: a gradient with other strides is copied every step and
    warns "Grad strides do not match bucket view strides" in the first backward (seen in every multi-rank CPU
    run: the channels-last mask head gave the 1x1 mask-logits weight channels-last gradient strides)."""
    model = build_detection_model(small_cfg(*(("NHWC", True) if nhwc else ()))).train()
    img, target = shapes_image()
    sum(train_forward(model, [img], [target]).values()).backward()
    mismatched = [(n, p.stride(), p.grad.stride()) for n, p in model.named_parameters()
                  if p.grad is not None and p.grad.stride() != p.stride()]
    assert not mismatched
