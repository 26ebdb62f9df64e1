#!/usr/bin/env python
"""Graph breaks of the training forward under ``torch._dynamo.explain`` (default dynamo config, CPU).

Two 320x480 images with their targets -> the loss dict, for the R-50-FPN model of the MLPerf config, in the
static form a compiled step runs (ground truth padded to DATALOADER.MAX_ANNOTATIONS_PER_IMAGE slots, the mask
head's fixed rows), in the eager form (tightly padded targets, the mask head sized to the batch's positives), and
torchvision's ``maskrcnn_resnet50_fpn`` on the same batch for scale. The last line is
``graph breaks: N (G graphs)`` for ours.

    python bench/graph_breaks.py [--no-torchvision] [--size 320x480] [KEY VALUE ...]   (config overrides)
"""
import argparse
import os
import sys

import torch

from maskrcnn_benchmark.cli.common import parse_with_overrides
from maskrcnn_benchmark.config import load_config
from maskrcnn_benchmark.engine.compile import graph_breaks
from maskrcnn_benchmark.modeling import build_detection_model
from maskrcnn_benchmark.data.collate_batch import BatchCollator
from maskrcnn_benchmark.synthetic.batch import synthetic_batch

CONFIG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs",
                      "e2e_mask_rcnn_R_50_FPN_1x.yaml")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--no-torchvision", action="store_true")
    p.add_argument("--size", default="320x480", help="HxW of the two images")
    args, opts = parse_with_overrides(p, argv)
    height, width = (int(v) for v in args.size.split("x"))
    torch.manual_seed(0)
    cfg = load_config(CONFIG, ["MODEL.DEVICE", "cpu", "DTYPE", "float32", *opts])
    model = build_detection_model(cfg).train()
    images, targets, tv_targets = synthetic_batch(2, height, width, cfg.MODEL.ROI_BOX_HEAD.NUM_CLASSES)
    d = cfg.DATALOADER.SIZE_DIVISIBILITY
    static = BatchCollator(d, max_gt=cfg.DATALOADER.MAX_ANNOTATIONS_PER_IMAGE)
    rows = [("maskrcnn_benchmark (ours, static step)", graph_breaks(model, *static.collate(images, targets)))]
    eager = build_detection_model(cfg).train()  # the eager form: tight padding, rows as needed
    rows.append(("maskrcnn_benchmark (ours, eager form)",
                 graph_breaks(eager, *BatchCollator(d).collate(images, targets))))
    if not args.no_torchvision:
        from torchvision.models.detection import maskrcnn_resnet50_fpn

        tv = maskrcnn_resnet50_fpn(weights=None, weights_backbone=None, num_classes=81).train()
        rows.append(("torchvision maskrcnn_resnet50_fpn",
                     graph_breaks(tv, [i / 255 for i in images], tv_targets)))
    print(f"torch {torch.__version__}, training forward, two {height}x{width} images, torch._dynamo.explain"
          + (f", {' '.join(opts)}" if opts else ""))
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
