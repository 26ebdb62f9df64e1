"""Small models and hand-made images shared by the tests."""
import importlib
import math
import os
import struct
import zlib

import torch

from maskrcnn_benchmark.config import get_cfg, merge_cfg_from_file, merge_cfg_from_list
from maskrcnn_benchmark.structures import BoxList, SegmentationMask

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
R50_YAML = os.path.join(REPO, "configs", "e2e_mask_rcnn_R_50_FPN_1x.yaml")

SMALL_OVERRIDES = [
    "MODEL.DEVICE", "cpu",
    "MODEL.BACKBONE.CONV_BODY", "R-14-FPN",
    "MODEL.BACKBONE.FREEZE_CONV_BODY_AT", 0,
    "MODEL.RESNETS.STEM_FUNC", "StemWithGN",
    "MODEL.RESNETS.TRANS_FUNC", "BottleneckWithGN",
    "MODEL.RESNETS.WIDTH_PER_GROUP", 8,
    "MODEL.RESNETS.STEM_OUT_CHANNELS", 16,
    "MODEL.RESNETS.RES2_OUT_CHANNELS", 32,
    "MODEL.GROUP_NORM.NUM_GROUPS", 8,
    "MODEL.BACKBONE.OUT_CHANNELS", 32,
    "MODEL.RPN.PRE_NMS_TOP_N_TRAIN", 300,
    "MODEL.RPN.POST_NMS_TOP_N_TRAIN", 300,
    "MODEL.RPN.FPN_POST_NMS_TOP_N_TRAIN", 200,
    "MODEL.RPN.PRE_NMS_TOP_N_TEST", 300,
    "MODEL.RPN.POST_NMS_TOP_N_TEST", 300,
    "MODEL.RPN.FPN_POST_NMS_TOP_N_TEST", 100,
    "MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE", 64,
    "MODEL.ROI_BOX_HEAD.MLP_HEAD_DIM", 128,
    "MODEL.ROI_BOX_HEAD.NUM_CLASSES", 4,
    "MODEL.ROI_MASK_HEAD.CONV_LAYERS", (32, 32),
    "DTYPE", "float32",
]


def uninitialised_memory_is_nan(monkeypatch):
    """``torch.empty_like`` returns NaN-filled tensors (floating point) for the rest of the test: one of the contents
    uninitialised memory may hold, so a test that must see a read of it does not depend on what the allocator
    happens to hand out."""
    empty_like = torch.empty_like

    def uninitialised(t, *args, **kwargs):
        out = empty_like(t, *args, **kwargs)
        return out.fill_(float("nan")) if out.is_floating_point() else out

    monkeypatch.setattr(torch, "empty_like", uninitialised)


def small_cfg(*extra):
    cfg = get_cfg()
    merge_cfg_from_file(cfg, R50_YAML)
    merge_cfg_from_list(cfg, SMALL_OVERRIDES + list(extra))
    return cfg


def r50_cfg(*extra):
    cfg = get_cfg()
    merge_cfg_from_file(cfg, R50_YAML)
    merge_cfg_from_list(cfg, ["MODEL.DEVICE", "cpu", "DTYPE", "float32"] + list(extra))
    return cfg


def _disc(cx, cy, r, n=16):
    return [c for k in range(n) for c in (cx + r * math.cos(2 * math.pi * k / n),
                                          cy + r * math.sin(2 * math.pi * k / n))]


def shapes_image(width=128, height=96):
    """A dark image with a bright square (class 1) and a disc (class 2), plus its target BoxList."""
    img = torch.full((3, height, width), -40.0)
    img[:, 20:50, 15:45] = 80.0
    yy, xx = torch.meshgrid(torch.arange(height), torch.arange(width), indexing="ij")
    img[:, ((xx - 90) ** 2 + (yy - 55) ** 2) < 18 ** 2] = 40.0
    img[0] += 30.0
    target = BoxList(torch.tensor([[15.0, 20.0, 44.0, 49.0], [72.0, 37.0, 108.0, 73.0]]), (width, height))
    target.add_field("labels", torch.tensor([1, 2]))
    target.add_field("masks", SegmentationMask(
        [[[15.0, 20.0, 45.0, 20.0, 45.0, 50.0, 15.0, 50.0]], [_disc(90.0, 55.0, 18.0)]], (width, height)))
    return img, target


def empty_target(width, height):
    t = BoxList(torch.zeros((0, 4)), (width, height))
    t.add_field("labels", torch.zeros((0,), dtype=torch.int64))
    t.add_field("masks", SegmentationMask([], (width, height)))
    return t


def bomb_png(side=30000):
    """A PNG whose header claims side x side pixels: about 100 bytes, 900 Mpx if it were decoded."""
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" * 64))
            + chunk(b"IEND", b""))


SHARED = os.path.join(os.path.dirname(REPO), "shared")  # ../shared beside the checkout (CI lays a copy there)


def require_shared(path, what):
    """Skip, naming ``path``, when a file or folder of ../shared is absent; under ``CI=true`` fail instead: CI always
    has ../shared beside the clone, so a missing one there is a broken setup, not a reason to test less. (gpu-check's
    parity stage, ``MASKRCNN_TEST_DEVICE`` set, runs on nodes without ../shared and judges skips itself: NOT RUN.)"""
    import pytest

    if os.path.exists(path):
        return
    message = f"{what} not found at {path} (../shared beside the checkout)"
    if os.environ.get("CI") == "true" and not os.environ.get("MASKRCNN_TEST_DEVICE"):
        pytest.fail(f"{message}: CI=true, where ../shared must be present", pytrace=False)
    pytest.skip(message)


def guard_processes(environ):
    """Whether this session guards against processes started by fast tests: yes, except for the parity tests on a
    device (gpu-check's parity stage, ``MASKRCNN_TEST_DEVICE`` naming an accelerator), where Triton starts
    processes of its own to find the driver (``ldconfig -p``, seen on an H200 with torch 2.11 and Triton 3.6) and
    no make target's time is at stake."""
    return (environ.get("MASKRCNN_TEST_DEVICE") or "cpu") == "cpu"


def sample_with_and_without_padding(labels, pad):
    """The box head's sampler (512 per image, a quarter positive) on ``labels (N, P)`` and on the same rows padded
    with ``pad`` ignored slots, each from seed 4: ``(pos, neg, padded pos, padded neg, whether the generator then
    gave the same numbers)``."""
    from maskrcnn_benchmark.modeling.balanced_positive_negative_sampler import BalancedPositiveNegativeSampler

    sampler = BalancedPositiveNegativeSampler(512, 0.25)
    torch.manual_seed(4)
    pos, neg = sampler(labels)
    after = torch.rand(3, device=labels.device)
    torch.manual_seed(4)
    pos_p, neg_p = sampler(torch.cat((labels, labels.new_full((labels.shape[0], pad), -1)), 1))
    return pos, neg, pos_p, neg_p, torch.equal(torch.rand(3, device=labels.device), after)


def bench_module(name):
    """A script of bench/ imported as a module (bench/ is not a package; it stays off sys.path afterwards)."""
    import sys

    folder = os.path.join(REPO, "bench")
    sys.path.insert(0, folder)
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(folder)
