#!/usr/bin/env python
"""Graph breaks of the training forward under ``torch._dynamo.explain`` (default dynamo config, CPU).

Two 320x480 images with their targets -> the loss dict, for the R-50-FPN model of the MLPerf config, in the
static form a compiled step runs (ground truth padded to DATALOADER.MAX_ANNOTATIONS_PER_IMAGE slots, the mask
head's fixed rows), in the eager form (BoxList targets, the mask head sized to the batch's positives), and
torchvision's ``maskrcnn_resnet50_fpn`` on the same batch for scale. The last line is
``graph breaks: N (G graphs)`` for ours.

    python bench/graph_breaks.py [--no-torchvision]
"""
import argparse
import os
import sys

import torch

from maskrcnn_benchmark.config import load_config
from maskrcnn_benchmark.engine.compile import graph_breaks, make_static
from maskrcnn_benchmark.modeling import build_detection_model
from maskrcnn_benchmark.structures import TargetBatch, to_image_list

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_step import CONFIG, synthetic_batch  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--no-torchvision", action="store_true")
    args = p.parse_args(argv)
    torch.manual_seed(0)
    cfg = load_config(CONFIG, ["MODEL.DEVICE", "cpu", "DTYPE", "float32"])
    model = make_static(build_detection_model(cfg).train())
    images, targets, tv_targets = synthetic_batch(2, 320, 480, 81)
    batch = TargetBatch.from_boxlists(targets, max_gt=cfg.DATALOADER.MAX_ANNOTATIONS_PER_IMAGE)
    rows = [("maskrcnn_benchmark (ours, static step)",
             graph_breaks(model, to_image_list(images, cfg.DATALOADER.SIZE_DIVISIBILITY), batch))]
    eager = build_detection_model(cfg).train()  # the eager form: per-image BoxList targets, rows as needed
    rows.append(("maskrcnn_benchmark (ours, eager form)",
                 graph_breaks(eager, to_image_list(images, cfg.DATALOADER.SIZE_DIVISIBILITY), targets)))
    if not args.no_torchvision:
        from torchvision.models.detection import maskrcnn_resnet50_fpn

        tv = maskrcnn_resnet50_fpn(weights=None, weights_backbone=None, num_classes=81).train()
        rows.append(("torchvision maskrcnn_resnet50_fpn",
                     graph_breaks(tv, [i / 255 for i in images], tv_targets)))
    print(f"torch {torch.__version__}, training forward, two 320x480 images, torch._dynamo.explain")
    print()
    print(f"| {'model':40} | {'graph breaks':>12} | {'graphs':>6} |")
    print(f"|{'-' * 42}|{'-' * 14}|{'-' * 8}|")
    for name, (breaks, graphs, _) in rows:
        print(f"| {name:40} | {breaks:12d} | {graphs:6d} |")
    for name, (_, _, reasons) in rows[:2]:
        for r in reasons:
            print(f"  {name}: {r}")
    breaks, graphs, _ = rows[0][1]
    print()
    print(f"graph breaks: {breaks} ({graphs} graphs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
