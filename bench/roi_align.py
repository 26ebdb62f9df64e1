#!/usr/bin/env python
"""The multi-level ROIAlign op (``maskrcnn::multilevel_roi_align``) against torchvision's kernel, on the CPU.

    python bench/roi_align.py [--threads 2] [--repeats 9]

Ours: one call for all ROIs, each with its level (what the training step and inference run). torchvision: its
``roi_align`` kernel (``aligned=False``) on each level's ROIs, split on the host (the form a sync-free step cannot
use). Both compute the same numbers (bitwise: tests/layers/test_roi_align.py). Random ROIs over 4 FPN levels of
the given batch, channels and image size; forward alone, then forward + backward. Prints the median ms of
``--repeats`` runs of each case, interleaved.
"""
import argparse
import statistics
import sys
import time

import torch
from torchvision.ops import roi_align as tv_roi_align

from maskrcnn_benchmark.layers.roi_align import multilevel_roi_align

SCALES = [0.25, 0.125, 0.0625, 0.03125]
# (what, images, channels, image height, image width, ROIs, output size)
CASES = [
    ("demo training: box head", 4, 64, 128, 128, 256, 7),
    ("demo training: mask head", 4, 64, 128, 128, 64, 14),
    ("demo inference: mask head, 100 detections per image", 4, 64, 128, 128, 400, 14),
    ("demo inference: box head, 8 images x 150 proposals", 8, 64, 128, 128, 1200, 7),
    ("COCO training: box head (2 images x 512)", 2, 256, 800, 1088, 1024, 7),
    ("COCO training: mask head (2 images x 128)", 2, 256, 800, 1088, 256, 14),
]


def case(images, channels, height, width, rois, gen):
    feats = [torch.randn(images, channels, -(-height // int(1 / s)), -(-width // int(1 / s)), generator=gen)
             for s in SCALES]
    xy = torch.rand(rois, 2, generator=gen) * torch.tensor([width * 0.8, height * 0.8])
    wh = torch.rand(rois, 2, generator=gen) * torch.tensor([width * 0.3, height * 0.3]) + 4
    boxes = torch.cat([torch.randint(0, images, (rois, 1), generator=gen).float(), xy, xy + wh], 1)
    levels = torch.randint(0, len(SCALES), (rois,), generator=gen)
    return feats, boxes, levels


def ours(feats, boxes, levels, size, backward):
    out = multilevel_roi_align(feats, boxes, levels, size, SCALES, 2)
    if backward:
        torch.autograd.grad(out, feats, torch.ones_like(out))


def torchvision_per_level(feats, boxes, levels, size, backward):
    outs = []
    for lvl, (f, s) in enumerate(zip(feats, SCALES)):
        idx = (levels == lvl).nonzero().flatten()
        outs.append(tv_roi_align(f, boxes[idx], size, s, 2, aligned=False))
    if backward:
        out = torch.cat(outs)
        torch.autograd.grad(out, feats, torch.ones_like(out), allow_unused=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=9)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    print(f"roi_align: torch {torch.__version__}, {torch.get_num_threads()} threads, median of {args.repeats}\n")
    print("| case | ROIs | ours: forward ms | torchvision per level: forward ms | ours: fwd + bwd ms "
          "| torchvision per level: fwd + bwd ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for what, images, channels, height, width, rois, size in CASES:
        feats, boxes, levels = case(images, channels, height, width, rois, gen)
        row = []
        for backward in (False, True):
            fs = [f.requires_grad_(backward) for f in feats]
            times = {ours: [], torchvision_per_level: []}
            for fn in times:
                fn(fs, boxes, levels, size, backward)  # warm-up
            for _ in range(args.repeats):
                for fn in times:
                    t = time.perf_counter()
                    fn(fs, boxes, levels, size, backward)
                    times[fn].append(1000 * (time.perf_counter() - t))
            row += [statistics.median(times[ours]), statistics.median(times[torchvision_per_level])]
        print(f"| {what} | {rois} | {row[0]:.1f} | {row[1]:.1f} | {row[2]:.1f} | {row[3]:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
