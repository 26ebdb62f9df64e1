#!/usr/bin/env python
"""The CPU's hot ops of the demo against the same ops of another checkout (a commit before a change).

    git worktree add /tmp/before <commit>
    python bench/ops_ab.py --before /tmp/before [--repeats 15] [--threads 2] [--scale 1.0]

Loads the other checkout's ``layers/roi_align.py``, ``layers/nms.py``, ``layers/mask_paste.py`` and
``evaluation/postprocess.py`` beside this checkout's (their custom ops renamed into a ``maskrcnn_before``
namespace; relative imports resolve in this checkout's package), runs both on the same inputs, interleaved, and
prints the fastest of ``--repeats`` runs of each case in ms (the least disturbed: this machine's speed drifts by
tens of percent) and whether the two give the same results (bitwise: tensors equal, the same strings). Cases: the
multi-level ROIAlign's CPU forward (and, for training, backward) at the demo's and COCO's sizes (bench/roi_align.py's cases), the device NMS's
bitmask and keep mask, the mask paste of a demo evaluation (100 images of 34 detections), the COCO strings of
3,400 masks.
``--scale`` multiplies the ROI, box and detection counts (a quick run: 0.05).
"""
import argparse
import os
import sys
import time
import types

import numpy as np
import torch

import maskrcnn_benchmark
import roi_align as roi_align_bench
from maskrcnn_benchmark.evaluation import postprocess
from maskrcnn_benchmark.layers import mask_paste

roi_align = sys.modules["maskrcnn_benchmark.layers.roi_align"]
nms = sys.modules["maskrcnn_benchmark.layers.nms"]

# the ROIAlign cases of bench/roi_align.py (this directory: ``python bench/ops_ab.py`` puts it on the path)
ROI_CASES, SCALES = roi_align_bench.CASES, roi_align_bench.SCALES
NMS_CASES = [(40, 300), (20, 300), (10, 2000)]  # groups x boxes: a demo evaluation batch's RPN, training's, COCO's


def load_before(root, module):
    """``module`` (dotted, in this package) from the checkout at ``root``, its custom ops renamed."""
    path = os.path.join(root, *module.split(".")) + ".py"
    if not os.path.isfile(path):
        raise SystemExit(f"ops_ab: {path} not found: --before must be a checkout of this project")
    with open(path) as f:
        source = f.read().replace('"maskrcnn::', '"maskrcnn_before::')
    mod = types.ModuleType(module + "_before")
    mod.__file__, mod.__package__ = path, module.rpartition(".")[0]
    exec(compile(source, path, "exec"), mod.__dict__)
    return mod


def same(a, b):
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def fastest(fns, repeats):
    """Interleaved: the fastest of ``repeats`` runs of each function (ms), and the results of the last run."""
    best, results = [float("inf")] * len(fns), [None] * len(fns)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            t = time.perf_counter()
            results[i] = fn()
            best[i] = min(best[i], (time.perf_counter() - t) * 1000)
    return best, results


def smooth_masks(d, gen):
    """``(d, 1, 28, 28)`` probabilities of one Gaussian blob each (what a trained mask head gives)."""
    yy, xx = torch.meshgrid(torch.arange(28.0), torch.arange(28.0), indexing="ij")
    centre = torch.rand(d, 2, generator=gen) * 10 + 9
    spread = torch.rand(d, 1, 1, generator=gen) * 30 + 10
    return torch.exp(-((yy - centre[:, :1, None]) ** 2 + (xx - centre[:, 1:, None]) ** 2) / (2 * spread))[:, None]


def cases(before, scale):
    """(what, before's function, after's function) for every case."""
    gen = torch.Generator().manual_seed(0)
    for what, n, c, h, w, k, s in ROI_CASES:
        k = max(1, int(k * scale))
        feats = [torch.randn(n, c, int(h * sc), int(w * sc), generator=gen).contiguous(
            memory_format=torch.channels_last) for sc in SCALES]
        shapes = [tuple(f.shape) for f in feats]
        xy = torch.rand(k, 2, generator=gen) * (w - 20)
        rois = torch.cat([torch.randint(0, n, (k, 1), generator=gen).float(), xy,
                          xy + torch.rand(k, 2, generator=gen) * w / 2 + 2], 1)
        levels = torch.randint(0, 4, (k,), generator=gen)
        grad = torch.randn(k, c, s, s, generator=gen)
        yield (f"ROIAlign forward, {what} ({k} ROIs, {s}x{s}, {c} channels)",
               *(lambda m=m: m._roi_align_gather(feats, rois, levels, s, SCALES, 2)
                 for m in (before["roi_align"], roi_align)))
        if "training" in what:
            yield (f"ROIAlign backward, {what}",
                   *(lambda m=m: m._roi_align_scatter(grad, rois, levels, shapes, SCALES, 2)
                     for m in (before["roi_align"], roi_align)))
    for g, k in NMS_CASES:
        k = max(2, int(k * scale))
        boxes = torch.rand(g, k, 4, generator=gen) * 100
        boxes[..., 2:] = boxes[..., :2] + torch.rand(g, k, 2, generator=gen) * 40
        scores, valid = torch.rand(g, k, generator=gen), torch.rand(g, k, generator=gen) > 0.1
        yield (f"NMS bitmask, {g} groups x {k} boxes",
               *(lambda m=m: m.suppression_bitmask(boxes, 0.7) for m in (before["nms"], nms)))
        yield (f"NMS keep mask (`nms_keep_padded`), {g} groups x {k} boxes",
               *(lambda m=m: m.nms_keep_padded(boxes, scores, valid, 0.7) for m in (before["nms"], nms)))
    images, per_image = max(1, int(100 * scale)), 34
    probs = [smooth_masks(per_image, gen) for _ in range(images)]
    centres = [torch.rand(per_image, 2, generator=gen) * 128 for _ in range(images)]
    boxes = [torch.cat((ct - 20, ct + 20), 1) for ct in centres]
    yield (f"mask paste of {images} images x {per_image} detections (128x128)",
           *(lambda m=m: [m.paste_mask_windows(p, b, 128, 128) for p, b in zip(probs, boxes)]
             for m in (before["mask_paste"], mask_paste)))
    d = max(1, int(3400 * scale))
    masks, x0, y0 = mask_paste.paste_mask_windows(smooth_masks(d, gen), torch.cat(
        (torch.rand(d, 2, generator=gen) * 100, torch.rand(d, 2, generator=gen) * 60 + 100), 1), 128, 128)
    points, counts = (t.numpy() for t in postprocess.rle_change_points(masks, x0, y0, 128))

    def strings(m):
        areas = []
        return m.rle_strings(points, counts, 128, 128, areas), areas

    yield (f"COCO strings of {d} masks ({len(points)} change points)",
           lambda: strings(before["postprocess"]), lambda: strings(postprocess))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="a checkout of this project (git worktree add DIR REV)")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--scale", type=float, default=1.0)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    package = os.path.basename(os.path.dirname(maskrcnn_benchmark.__file__))
    before = {name.rsplit(".", 1)[-1]: load_before(args.before, f"{package}.{name}")
              for name in ("layers.roi_align", "layers.nms", "layers.mask_paste", "evaluation.postprocess")}
    print(f"ops_ab: torch {torch.__version__}, {args.threads} threads, fastest of {args.repeats}; "
          f"before: {os.path.abspath(args.before)}\n")
    print("| op, case | before, ms | after, ms | same results |")
    print("|---|---:|---:|---|")
    differ = 0
    for what, old, new in cases(before, args.scale):
        (t_old, t_new), (r_old, r_new) = fastest([old, new], args.repeats)
        ok = same(r_old, r_new)
        differ += not ok
        print(f"| {what} | {t_old:.1f} | {t_new:.1f} | {'yes' if ok else 'NO'} |", flush=True)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
