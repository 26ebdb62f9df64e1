"""The training step's NMS on the device (layers/nms.py ``nms_keep_padded``: bitmask + scan, no host sync) keeps
exactly what ``batched_nms`` (torchvision's kernel with the reference's "+1" IoU, the inference path) keeps, on
random and adversarial groups; the scan in tensor ops and in the Triton kernel (run by Triton's interpreter on the
CPU) alike; and where the order of the "+1" arithmetic decides (an IoU within one float32 step of the
threshold), it decides as the reference's kernel."""
import os

import pytest
import torch

import importlib

N = importlib.import_module("maskrcnn_benchmark.layers.nms")  # the module (the package exports the function)


def oracle(boxes, scores, valid, thr):
    """The keep mask of ``batched_nms`` over the valid entries of each row (today's path)."""
    g, k = scores.shape
    rows = torch.arange(g)[:, None].expand(g, k)
    sel = valid.reshape(-1)
    flat = torch.arange(g * k)[sel]
    keep = N.batched_nms(boxes.reshape(-1, 4)[sel], scores.reshape(-1)[sel], rows.reshape(-1)[sel], thr)
    out = torch.zeros(g * k, dtype=torch.bool)
    out[flat[keep]] = True
    return out.view(g, k)


def random_groups(g, k, seed, spread=100.0, size=40.0):
    gen = torch.Generator().manual_seed(seed)
    xy = torch.rand(g, k, 2, generator=gen) * spread
    wh = torch.rand(g, k, 2, generator=gen) * size
    boxes = torch.cat((xy, xy + wh), -1)
    scores = torch.rand(g, k, generator=gen)
    valid = torch.rand(g, k, generator=gen) > 0.1
    return boxes, scores, valid


def adversarial():
    """(name, boxes (G, K, 4), scores, valid, threshold)."""
    cases = []
    b, s, v = random_groups(3, 150, 0)
    cases.append(("random", b, s, v, 0.7))
    b, s, v = random_groups(2, 130, 1)
    cases.append(("score ties", b, (s * 4).floor() / 4, v, 0.5))  # 4 score values: many exact ties
    same = torch.tensor([10.0, 10, 50, 50]).expand(2, 70, 4).clone()
    cases.append(("identical boxes", same, torch.rand(2, 70), torch.ones(2, 70, dtype=torch.bool), 0.5))
    cases.append(("identical boxes and scores", same, torch.ones(2, 70), torch.ones(2, 70, dtype=torch.bool), 0.7))
    b, s, v = random_groups(2, 66, 2)
    b[:, ::3, 2:] = b[:, ::3, :2]  # point boxes (a "+1" area of 1)
    b[:, 1::5, 2] = b[:, 1::5, 0] - 1  # zero width under "+1": 0/0 IoU, never suppressing nor suppressed
    cases.append(("zero-area boxes", b, s, v, 0.3))
    grid = torch.stack(torch.meshgrid(torch.arange(8.0), torch.arange(9.0), indexing="ij"), -1).reshape(-1, 2) * 100
    apart = torch.cat((grid, grid + 20), -1)[None]
    cases.append(("nothing suppressed", apart, torch.rand(1, 72), torch.ones(1, 72, dtype=torch.bool), 0.1))
    chain = torch.tensor([[i * 8.0, 0.0, i * 8.0 + 20, 20.0] for i in range(65)])[None]  # each overlaps the next
    cases.append(("suppression chain", chain, torch.linspace(1, 0, 65)[None], torch.ones(1, 65, dtype=torch.bool),
                  0.4))
    cases.append(("one box", torch.tensor([[[1.0, 2, 30, 40]]]), torch.ones(1, 1),
                  torch.ones(1, 1, dtype=torch.bool), 0.7))
    b, s, _ = random_groups(2, 40, 3)
    cases.append(("nothing valid", b, s, torch.zeros(2, 40, dtype=torch.bool), 0.7))
    # "+1" IoUs 0.952 (first, second), 0.868 (second, third) and 0.826 (first, third) around the threshold 0.85:
    # the second is suppressed, and a suppressed box suppresses nothing, so the third is kept (the float32 step at
    # the threshold itself: AT_THE_THRESHOLD below)
    b = torch.tensor([[0.0, 0, 9, 9], [0, 0, 9, 9.5], [0, 0, 10, 10]])[None]
    cases.append(("around the threshold", b, torch.tensor([[0.9, 0.8, 0.7]]), torch.ones(1, 3, dtype=torch.bool),
                  0.85))
    return cases


@pytest.mark.parametrize("case", adversarial(), ids=lambda c: c[0])
def test_keeps_what_batched_nms_keeps(case):
    _, boxes, scores, valid, thr = case
    got = N.nms_keep_padded(boxes, scores, valid, thr)
    assert torch.equal(got, oracle(boxes, scores, valid, thr))


@pytest.mark.parametrize("case", adversarial(), ids=lambda c: c[0])
def test_the_padded_inference_nms_keeps_what_batched_nms_keeps(case):
    """batched_nms_padded (the box post-processing's NMS off the CPU) on the groups flattened and shuffled, unequal
    sizes (the invalid entries left out): the same kept set as batched_nms, by decreasing score."""
    _, boxes, scores, valid, thr = case
    g, k = scores.shape
    sel = valid.reshape(-1)
    flat_boxes, flat_scores = boxes.reshape(-1, 4)[sel], scores.reshape(-1)[sel]
    groups = torch.arange(g)[:, None].expand(g, k).reshape(-1)[sel] * 7 + 3  # any group ids
    perm = torch.randperm(len(groups), generator=torch.Generator().manual_seed(0))
    flat_boxes, flat_scores, groups = flat_boxes[perm], flat_scores[perm], groups[perm]
    got = N.batched_nms_padded(flat_boxes, flat_scores, groups, thr)
    expected = N.batched_nms(flat_boxes, flat_scores, groups, thr)
    assert sorted(got.tolist()) == sorted(expected.tolist())
    assert (flat_scores[got][1:] <= flat_scores[got][:-1]).all()


def test_the_padded_inference_nms_waits_for_the_host_three_times_whatever_the_groups():
    """batched_nms waits for the host once per group on a GPU (torchvision's kernel finishes there): in the box
    post-processing, once per image and class with candidates. The padded form: three times per call."""
    from maskrcnn_benchmark.utils.host_syncs import HostSyncCounter

    counts = {}
    for groups in (2, 40):
        boxes, scores, valid = random_groups(groups, 30, 5)
        ids = torch.arange(groups)[:, None].expand(groups, 30).reshape(-1)
        for name, fn in (("padded", N.batched_nms_padded), ("per group", N.batched_nms)):
            with HostSyncCounter() as counter:
                fn(boxes.reshape(-1, 4), scores.reshape(-1), ids, 0.5)
            counts[name, groups] = sum(counter.sites.values())
    assert counts["padded", 2] == counts["padded", 40] == 3
    assert counts["per group", 40] >= 40


def test_rpn_scale_2000_boxes_5_levels_12_images():
    """The size of the MLPerf step's RPN NMS: 12 images x 5 levels, 2000 candidates each."""
    boxes, scores, valid = random_groups(60, 2000, 7, spread=1200.0, size=200.0)
    got = N.nms_keep_padded(boxes, scores, valid, 0.7)
    assert torch.equal(got, oracle(boxes, scores, valid, 0.7))
    assert 0 < got.sum() < valid.sum()  # some kept, some suppressed: the case decides something


def test_bitmask_words_and_scan_against_a_plain_loop():
    """The 64-bit words hold bit j of row i exactly when the IoU is above the threshold (bit 63 included), for the
    words the scan reads (from row i's own word on); the words before are left zero."""
    from torchvision.ops import box_iou

    boxes, _, _ = random_groups(1, 130, 11)
    mask = N.suppression_bitmask(boxes, 0.5)
    iou = box_iou(boxes[0] + torch.tensor([0.0, 0.0, 1.0, 1.0]), boxes[0] + torch.tensor([0.0, 0.0, 1.0, 1.0]))
    for i in (0, 63, 64, 100, 129):  # torchvision's IoU of the "+1" boxes, above the threshold
        start = (i // 64) * 64
        bits = [(int(mask[0, i, j // 64]) >> (j % 64)) & 1 for j in range(start, 130)]
        assert bits == (iou[i, start:] > 0.5).int().tolist()
        assert (mask[0, i, : i // 64] == 0).all()


_INTERPRETED = """
import runpy, sys, torch
cases = runpy.run_path(sys.argv[1])
N, adversarial, oracle = cases["N"], cases["adversarial"], cases["oracle"]
assert N._use_triton(torch.device("cpu"))
for name, boxes, scores, valid, thr in adversarial():
    order = torch.sort(scores.masked_fill(~valid, float("-inf")), dim=1, descending=True, stable=True).indices
    sorted_boxes = boxes.gather(1, order[..., None].expand(-1, -1, 4))
    sorted_valid = valid.gather(1, order)
    mask = N.suppression_bitmask(sorted_boxes, thr)
    assert torch.equal(N.scan_triton(mask, sorted_valid), N._scan_torch(mask, sorted_valid)), name
    assert torch.equal(N.nms_keep_padded(boxes, scores, valid, thr), oracle(boxes, scores, valid, thr)), name
    print("ok", name)
"""


@pytest.mark.slow  # a process of its own: Triton reads TRITON_INTERPRET when it is first imported
def test_triton_scan_interpreted_on_the_cpu():
    """The CUDA path's Triton kernel (layers/nms_triton.py), run by Triton's interpreter (TRITON_INTERPRET=1) on
    CPU tensors, scans to the same keep mask as the tensor-op scan and the oracle, on every adversarial case (the
    interpreter runs the kernel's loop in Python: the 60 x 2000 case is the device test's,
    tests/parity/test_device_against_the_cpu.py)."""
    import subprocess
    import sys

    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1")
    r = subprocess.run([sys.executable, "-c", _INTERPRETED, __file__], capture_output=True, text=True, env=env,
                       timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert r.stdout.split() == [w for c in adversarial() for w in ("ok", *c[0].split())], r.stdout


def _reference_iou(a, b):
    """maskrcnn-benchmark's csrc/cuda/nms.cu devIoU in float32, its order of operations: ``right - left + 1``,
    ``(a[2] - a[0] + 1) * (a[3] - a[1] + 1)``, ``interS / (Sa + Sb - interS)``."""
    import numpy as np

    a, b = np.float32(a), np.float32(b)
    one, zero = np.float32(1), np.float32(0)
    width = max(min(a[2], b[2]) - max(a[0], b[0]) + one, zero)
    height = max(min(a[3], b[3]) - max(a[1], b[1]) + one, zero)
    inter = width * height
    area_a = (a[2] - a[0] + one) * (a[3] - a[1] + one)
    area_b = (b[2] - b[0] + one) * (b[3] - b[1] + one)
    return inter / (area_a + area_b - inter)


# pairs whose "+1" IoU rounds above the threshold in the reference's order and to it exactly when x2 + 1 is
# rounded first (torchvision's formula on shifted boxes): the reference suppresses the second box
AT_THE_THRESHOLD = [
    (0.7, [172.99679565429688, 346.94146728515625, 242.9732666015625, 514.7828369140625],
     [185.5220489501953, 346.94146728515625, 255.49851989746094, 514.7828369140625]),
    (0.5, [130.5253143310547, 84.02534484863281, 433.66815185546875, 255.0752716064453],
     [231.90626525878906, 84.02534484863281, 535.049072265625, 255.0752716064453]),
]


@pytest.mark.parametrize("thr,a,b", AT_THE_THRESHOLD, ids=["0.7", "0.5"])
def test_the_device_nms_computes_the_iou_in_the_references_order(thr, a, b):
    """Within one float32 step of the threshold the order of the "+1" matters: the device NMS (the training step's
    RPN, the box post-processing off the CPU) suppresses where the reference's kernel does."""
    import numpy as np

    assert _reference_iou(a, b) > np.float32(thr)  # the reference's CUDA kernel: suppressed (its CPU one: too)
    boxes, scores = torch.tensor([[a, b]]), torch.tensor([[0.9, 0.8]])
    assert N.nms_keep_padded(boxes, scores, torch.ones(1, 2, dtype=torch.bool), thr).tolist() == [[True, False]]
    assert N.batched_nms_padded(boxes[0], scores[0], torch.zeros(2, dtype=torch.long), thr).tolist() == [0]
