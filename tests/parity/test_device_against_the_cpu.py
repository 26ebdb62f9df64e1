"""The package on the test device against the same code on this node's CPU: the parity oracle that is there on
any node, with or without ../shared/golden (``make gpu-check`` runs it with ``MASKRCNN_TEST_DEVICE=cuda``). On a
CPU run the tests that would compare the CPU with itself skip; the ROIAlign test still compares the op with
torchvision's kernel level by level.

Float32, TF32 off (conftest). Tolerances, stated once: NMS keep sets exact (the "+1" IoU is computed in float32 on
both and compared with the same threshold; a last-bit difference at the threshold would show as a mismatch and is
reported, not tolerated); multi-level ROIAlign bitwise torchvision's kernel on the same device, level by level,
and within 1e-4 absolute of the CPU (torchvision's CPU and CUDA kernels compute the sample points in float32 in
another order: 1.5e-5 measured on an H200; ../shared/golden's README gives 1e-4 for such float32 coordinate
differences); mask targets exact (integer rasterization); the training losses within 1e-3 relative (a whole forward:
convolutions whose algorithms differ between devices), with every sampler taking all candidates so that no random
draw (different generators on the two devices) enters the comparison."""
import math

import pytest
import torch
from torchvision.ops import roi_align

from helpers import sample_with_and_without_padding, shapes_image, small_cfg
from maskrcnn_benchmark.layers.nms import nms_keep_padded
from maskrcnn_benchmark.layers.roi_align import multilevel_roi_align
from maskrcnn_benchmark.modeling import build_detection_model
from maskrcnn_benchmark.modeling.compat import train_forward


def _boxes(g, k, seed):
    gen = torch.Generator().manual_seed(seed)
    xy = torch.rand(g, k, 2, generator=gen) * 200
    wh = torch.rand(g, k, 2, generator=gen) * 60 + 1
    scores = torch.rand(g, k, generator=gen)
    scores[:, ::7] = 0.5  # exact ties
    return torch.cat((xy, xy + wh), -1), scores, torch.rand(g, k, generator=gen) > 0.1


@pytest.fixture
def other_device(device):
    """The test device, where it is not the CPU: a comparison of the CPU with itself cannot fail."""
    if device.type == "cpu":
        pytest.skip("compares the test device with this node's CPU, and the test device is the CPU "
                    "(MASKRCNN_TEST_DEVICE=cuda, as make gpu-check sets it, runs it)")
    return device


@pytest.mark.parametrize("seed", [0, 1])
def test_nms_keep_sets_equal_the_cpus(other_device, seed):
    device = other_device
    boxes, scores, valid = _boxes(10, 700, seed)
    ours = nms_keep_padded(boxes.to(device), scores.to(device), valid.to(device), 0.7).cpu()
    assert torch.equal(ours, nms_keep_padded(boxes, scores, valid, 0.7))


def _nms_cases():
    """tests/layers/test_nms_device.py's adversarial cases, its oracle, and the MLPerf step's size."""
    import os
    import runpy

    cases = runpy.run_path(os.path.join(os.path.dirname(os.path.dirname(__file__)), "layers", "test_nms_device.py"))
    boxes, scores, valid = cases["random_groups"](60, 2000, 7, spread=1200.0, size=200.0)
    return cases["adversarial"]() + [("2000 boxes x 5 levels x 12 images", boxes, scores, valid, 0.7)], cases["oracle"]


def test_nms_on_the_adversarial_cases_keeps_what_batched_nms_keeps_on_the_cpu(other_device):
    """On the device (the Triton scan on CUDA), each adversarial case and the MLPerf step's size against the CPU's
    batched_nms (torchvision's CPU kernel): the same keep mask."""
    cases, oracle = _nms_cases()
    for name, boxes, scores, valid, thr in cases:
        ours = nms_keep_padded(boxes.to(other_device), scores.to(other_device), valid.to(other_device), thr).cpu()
        assert torch.equal(ours, oracle(boxes, scores, valid, thr)), name


def test_multilevel_roi_align_equals_the_cpus(device):
    gen = torch.Generator().manual_seed(0)
    features = [torch.randn(2, 8, 64 // 2 ** i, 96 // 2 ** i, generator=gen) for i in range(4)]
    xy = torch.rand(300, 2, generator=gen) * 300
    wh = torch.rand(300, 2, generator=gen) * 200 + 1
    rois = torch.cat((torch.randint(0, 2, (300, 1), generator=gen).float(), xy, xy + wh), 1)
    levels = torch.randint(0, 4, (300,), generator=gen)
    scales = [1 / 4, 1 / 8, 1 / 16, 1 / 32]
    ours = multilevel_roi_align([f.to(device) for f in features], rois.to(device), levels.to(device), 7, scales, 2)
    # torchvision's kernel on the same device, each level on its own ROIs: bitwise
    kernel = torch.zeros_like(ours)
    for level, (f, scale) in enumerate(zip(features, scales)):
        mine = levels.to(device) == level
        kernel[mine] = roi_align(f.to(device), rois.to(device)[mine], 7, scale, 2, aligned=False)
    assert torch.equal(ours, kernel)
    # and the CPU's result, off the CPU: the kernels' float32 sample points differ in the last bits (see the module
    # docstring); on the CPU it would be the same call again, which proves nothing
    if ours.device.type != "cpu":
        torch.testing.assert_close(ours.cpu(), multilevel_roi_align(features, rois, levels, 7, scales, 2), rtol=0,
                                   atol=1e-4)


def test_the_training_losses_equal_the_cpus(other_device):
    device = other_device
    take_all = ("MODEL.RPN.BATCH_SIZE_PER_IMAGE", 100000000, "MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE", 100000000,
                "MODEL.RPN.PRE_NMS_TOP_N_TRAIN", 100000, "MODEL.RPN.POST_NMS_TOP_N_TRAIN", 100000,
                "MODEL.RPN.FPN_POST_NMS_TOP_N_TRAIN", 100000, "MODEL.RPN.NMS_THRESH", 1.0)
    torch.manual_seed(0)
    model = build_detection_model(small_cfg(*take_all)).train()
    image, target = shapes_image()
    ref = {k: float(v) for k, v in train_forward(model, [image], [target]).items()}
    model.to(device)
    ours = {k: float(v) for k, v in train_forward(model, [image.to(device)], [target.to(device)]).items()}
    assert ours.keys() == ref.keys()
    for k in ref:
        assert math.isclose(ours[k], ref[k], rel_tol=1e-3, abs_tol=1e-5), (k, ours[k], ref[k])


def test_the_samplers_draws_do_not_depend_on_row_padding_on_the_device(device):
    """The static step appends 96 ground-truth slots to each image's proposals where the eager step appends the
    batch's largest count; the sampler's keys are a hash of each candidate's position, so that the padding changes
    no draw (tests/modeling/test_static_step.py checks it on the CPU). torch.rand keys did not on CUDA, whose
    generator hands an element to another thread when the tensor's size changes; this checks it at the box head's
    size (12 images x 2,000 proposals, as the DGX H100 recipe samples them) on the test device."""
    labels = torch.randint(-1, 2, (12, 2000 + 7), generator=torch.Generator().manual_seed(0)).to(device)
    pos, neg, pos_p, neg_p, same_after = sample_with_and_without_padding(labels, 96 - 7)
    assert pos.sum() > 0 and neg.sum() > 0 and same_after
    assert torch.equal(pos_p[:, :labels.shape[1]], pos) and torch.equal(neg_p[:, :labels.shape[1]], neg)
    assert not pos_p[:, labels.shape[1]:].any() and not neg_p[:, labels.shape[1]:].any()
