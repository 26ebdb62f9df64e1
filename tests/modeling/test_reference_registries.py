"""The registries build components with the reference's signatures, so a user's own registered components and
maskrcnn-benchmark's own unit tests work unchanged. The case below is the one of maskrcnn-benchmark's
tests/test_rpn_heads.py: every registered RPN head, built from the default config as
``builder(cfg, in_channels, num_anchors)``, maps 3 levels of (2, 64, 24, 32) features to objectness logits
(N, A, H, W) and box deltas (N, 4A, H, W)."""
import copy

import torch

from maskrcnn_benchmark.config import cfg as g_cfg
from maskrcnn_benchmark.modeling import registry
from maskrcnn_benchmark.modeling.backbone import build_backbone  # noqa: F401 - the reference imports these
from maskrcnn_benchmark.modeling.rpn.rpn import build_rpn  # noqa: F401


def test_build_rpn_heads_as_the_reference_does():
    assert len(registry.RPN_HEADS) > 0
    in_channels, num_anchors = 64, 10
    for name, builder in registry.RPN_HEADS.items():
        head = builder(copy.deepcopy(g_cfg), in_channels, num_anchors)
        x = torch.rand([2, in_channels, 24, 32], dtype=torch.float32)
        out = head([x] * 3)
        assert len(out) == 2, name
        logits, deltas = out
        for level in range(3):
            assert logits[level].shape == torch.Size([2, num_anchors, 24, 32]), name
            assert deltas[level].shape == torch.Size([2, num_anchors * 4, 24, 32]), name


def test_every_head_registry_takes_cfg_first():
    """Box and mask feature extractors and predictors: ``(cfg, in_channels)``, as in the reference."""
    from helpers import small_cfg

    cfg = small_cfg()
    for reg in (registry.ROI_BOX_FEATURE_EXTRACTORS, registry.ROI_MASK_FEATURE_EXTRACTORS):
        for name, builder in reg.items():
            assert builder(cfg, 32).out_channels > 0, name
    for reg in (registry.ROI_BOX_PREDICTOR, registry.ROI_MASK_PREDICTOR):
        for name, builder in reg.items():
            assert isinstance(builder(cfg, 32), torch.nn.Module), name
