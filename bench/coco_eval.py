#!/usr/bin/env python
"""COCO scoring and post-processing at COCO-val scale: ours vs pycocotools, in the same run.

    python bench/coco_eval.py                       # 5000 images, ~7 objects and 100 detections each, 80 classes
    python bench/coco_eval.py --images 500 --post-images 100     # quicker
    python bench/coco_eval.py --ours-only           # our scoring alone, one JSON line (make gpu-check's stage)

Synthetic data, generated once (``--cache DIR`` keeps it): 640x480 / 480x640 images, ground-truth polygons
(1 % crowd RLE regions), detections around them and at random, each with a box and an RLE mask. Prints a table:
the reference (pycocotools: loadRes + COCOeval per IoU type) and ours (``score_coco``: backend, worker processes),
the check that all 12 stats and the per-class AP of both IoU types are identical, and the post-processing time
(paste + RLE encode of 100 detections per image) per 1000 images for each method. The last line reads
``coco eval: <R>x pycocotools, stats identical: yes|no``.
"""
import argparse
import contextlib
import io
import json
import os
import pickle
import sys
import tempfile
import time

import numpy as np
import torch

from maskrcnn_benchmark.evaluation import STAT_NAMES, Detections, score_coco
from maskrcnn_benchmark.evaluation import scoring
from maskrcnn_benchmark.evaluation.postprocess import detections_to_coco
from maskrcnn_benchmark.structures import BoxList


def _polygon(rng, cx, cy, rx, ry, k):
    ang = np.sort(rng.uniform(0, 2 * np.pi, k))
    rad = rng.uniform(0.6, 1.0, k)
    return np.round(np.stack((cx + rx * rad * np.cos(ang), cy + ry * rad * np.sin(ang)), 1).reshape(-1), 2)


def make_data(folder, images, dets_per_image, objects, classes, seed=0):
    from pycocotools import mask as mask_utils

    ann_file = os.path.join(folder, "instances.json")
    det_file = os.path.join(folder, "detections.pkl")
    if os.path.exists(ann_file) and os.path.exists(det_file):
        with open(det_file, "rb") as f:
            dets = pickle.load(f)
        if dets.mask_areas is not None:
            return ann_file, dets
    rng = np.random.default_rng(seed)
    imgs, anns = [], []
    cols = {k: [] for k in ("img", "cat", "box", "score", "counts", "h", "w", "area")}
    for i in range(1, images + 1):
        w, h = (640, 480) if rng.random() < 0.7 else (480, 640)
        imgs.append({"id": i, "width": w, "height": h, "file_name": f"{i:012d}.jpg"})
        gts = []
        for _ in range(max(1, rng.poisson(objects))):
            rx, ry = rng.uniform(4, w / 4), rng.uniform(4, h / 4)
            cx, cy = rng.uniform(rx, w - rx), rng.uniform(ry, h - ry)
            poly = _polygon(rng, cx, cy, rx, ry, int(rng.integers(8, 25)))
            rle = mask_utils.frPyObjects([poly.tolist()], h, w)[0]
            cat = int(rng.integers(1, classes + 1))
            crowd = int(rng.random() < 0.01)
            seg = dict(rle, counts=rle["counts"].decode()) if crowd else [poly.tolist()]
            bb = mask_utils.toBbox(rle).tolist()
            anns.append({"id": len(anns) + 1, "image_id": i, "category_id": cat, "iscrowd": crowd, "bbox": bb,
                         "area": float(mask_utils.area(rle)), "segmentation": seg})
            gts.append((cx, cy, rx, ry, cat))
        polys = []
        for d in range(dets_per_image):
            if d < 3 * len(gts) and rng.random() < 0.8:  # around an object, of varying quality
                cx, cy, rx, ry, cat = gts[d % len(gts)]
                q = rng.uniform(0.02, 0.4)
                cx, cy = cx + rng.normal(0, q * rx), cy + rng.normal(0, q * ry)
                rx, ry = rx * rng.uniform(1 - q, 1 + q), ry * rng.uniform(1 - q, 1 + q)
                cat = cat if rng.random() < 0.85 else int(rng.integers(1, classes + 1))
                score = rng.uniform(0.3, 1.0)
            else:
                rx, ry = rng.uniform(3, w / 5), rng.uniform(3, h / 5)
                cx, cy = rng.uniform(0, w), rng.uniform(0, h)
                cat, score = int(rng.integers(1, classes + 1)), rng.uniform(0.05, 0.6)
            polys.append(_polygon(rng, cx, cy, rx, ry, 12).tolist())
            cols["img"].append(i)
            cols["cat"].append(cat)
            cols["score"].append(float(np.float32(score)))
        rles = mask_utils.frPyObjects(polys, h, w)
        cols["box"] += mask_utils.toBbox(rles).tolist()
        cols["counts"] += [r["counts"].decode() for r in rles]
        cols["area"] += mask_utils.area(rles).tolist()  # known to the encoder in a real run
        cols["h"] += [h] * len(rles)
        cols["w"] += [w] * len(rles)
    with open(ann_file, "w") as f:
        json.dump({"images": imgs, "annotations": anns,
                   "categories": [{"id": c, "name": f"class{c}"} for c in range(1, classes + 1)]}, f)
    dets = Detections(cols["img"], cols["cat"], cols["box"], cols["score"], cols["img"], cols["cat"],
                      cols["counts"], cols["h"], cols["w"], cols["score"], cols["area"])
    with open(det_file, "wb") as f:
        pickle.dump(dets, f)
    return ann_file, dets


def reference(ann_file, dets):
    """pycocotools as maskrcnn-benchmark's coco_eval uses it: one COCO of the ground truth, loadRes per type."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    bbox, segm = dets.to_coco_lists()
    out, per_class = {}, {}
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(ann_file)
        for iou_type, results in (("bbox", bbox), ("segm", segm)):
            ev = COCOeval(gt, gt.loadRes(results), iou_type)
            ev.evaluate()
            ev.accumulate()
            ev.summarize()
            out[iou_type] = dict(zip(STAT_NAMES, (float(v) for v in ev.stats)))
            per_class[iou_type] = scoring._per_class_ap(ev.eval["precision"], sorted(gt.getCatIds()), gt)
    return out, per_class, time.perf_counter() - t0


def postprocess_times(images, dets_per_image, methods, seed=0):
    """ms per 1000 images of detections_to_coco (paste + encode) for 800x1066 model outputs of 480x640 images."""
    g = torch.Generator().manual_seed(seed)
    inputs = []
    for _ in range(images):
        probs = torch.rand(dets_per_image, 1, 28, 28, generator=g) ** 2
        centre = torch.rand(dets_per_image, 2, generator=g) * torch.tensor([1066.0, 800.0])
        size = torch.rand(dets_per_image, 2, generator=g) ** 2 * 400 + 8
        pred = BoxList(torch.cat((centre - size / 2, centre + size / 2), 1).clamp(min=0), (1066, 800))
        pred.add_field("scores", torch.rand(dets_per_image, generator=g))
        pred.add_field("labels", torch.randint(1, 81, (dets_per_image,), generator=g))
        pred.add_field("mask", probs)
        inputs.append(pred)
    lut = list(range(81))
    out = {}
    for method in methods:
        t0 = time.perf_counter()
        for k, pred in enumerate(inputs):
            detections_to_coco([pred], [k], [(640, 480)], lut, method=method)
        out[method] = 1000 * (time.perf_counter() - t0) / images * 1000
    return out


def _difference(a, b):
    """|a - b|; 0 when both are NaN (a class with no ground truth), infinite when only one is."""
    if np.isnan(a) or np.isnan(b):
        return 0.0 if np.isnan(a) and np.isnan(b) else float("inf")
    return abs(a - b)


def largest_difference(ours, ref_stats, ref_per_class):
    """The largest difference between our scores and pycocotools' over the 2 x 12 stats and the per-class AP
    (infinite when a class is scored on one side only)."""
    worst = 0.0
    for t in ("bbox", "segm"):
        for k in STAT_NAMES:
            worst = max(worst, _difference(ours[t]["stats"][k], ref_stats[t][k]))
        if set(ours[t]["per_class"]) != set(ref_per_class[t]):
            return float("inf")
        for name, v in ref_per_class[t].items():
            worst = max(worst, _difference(ours[t]["per_class"][name], v))
    return worst


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--images", type=int, default=5000)
    p.add_argument("--dets", type=int, default=100, help="detections per image")
    p.add_argument("--objects", type=float, default=7.0, help="mean ground-truth objects per image")
    p.add_argument("--classes", type=int, default=80)
    p.add_argument("--workers", type=int, default=0, help="scoring processes (0: one per allowed core)")
    p.add_argument("--backend", default="auto")
    p.add_argument("--post-images", type=int, default=100, help="images for the post-processing timing")
    p.add_argument("--cache", default="", help="folder to keep the generated data in")
    p.add_argument("--ours-only", action="store_true",
                   help="time only our scoring (what a run's background process does with an epoch's results) and "
                        "print one JSON line {\"event\": \"scoring\", ...}: make gpu-check's scoring stage")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    folder = args.cache or tempfile.mkdtemp(prefix="coco_eval_bench_")
    os.makedirs(folder, exist_ok=True)
    t0 = time.perf_counter()
    ann_file, dets = make_data(folder, args.images, args.dets, args.objects, args.classes)
    print(f"data: {args.images} images, {len(dets)} detections with masks, {args.classes} classes "
          f"({time.perf_counter() - t0:.1f} s to make or load, in {folder})")

    if args.ours_only:
        t0 = time.perf_counter()
        ours = score_coco(ann_file, dets, backend=args.backend, workers=args.workers)
        print(json.dumps({"event": "scoring", "images": args.images, "detections": len(dets),
                          "seconds": round(time.perf_counter() - t0, 2), "backend": ours["backend"],
                          "workers": scoring.default_workers() if args.workers <= 0 else args.workers}), flush=True)
        return 0
    ref_stats, ref_per_class, ref_seconds = reference(ann_file, dets)
    scoring._GT_CACHE.clear()  # ours loads the ground truth too, as the first epoch does
    t0 = time.perf_counter()
    ours = score_coco(ann_file, dets, backend=args.backend, workers=args.workers)
    our_seconds = time.perf_counter() - t0
    workers = scoring.default_workers() if args.workers <= 0 else args.workers
    worst = largest_difference(ours, ref_stats, ref_per_class)
    identical = worst <= 1e-6
    post = postprocess_times(args.post_images, args.dets, ("box", "full"))

    print()
    print("| scorer | bbox AP | segm AP | seconds (bbox + segm) |")
    print("|---|---:|---:|---:|")
    print(f"| pycocotools (reference, serial) | {ref_stats['bbox']['AP']:.4f} | {ref_stats['segm']['AP']:.4f} "
          f"| {ref_seconds:.1f} |")
    print(f"| ours: {ours['backend']}, {workers} worker process(es) | {ours['bbox']['stats']['AP']:.4f} "
          f"| {ours['segm']['stats']['AP']:.4f} | {our_seconds:.1f} |")
    print()
    print(f"largest difference over the 2 x 12 stats and the per-class AP: {worst:.2e}")
    print()
    print("| post-processing (paste + RLE, 100 detections/image, 800x1066 -> 640x480) | ms per 1000 images |")
    print("|---|---:|")
    for method, ms in post.items():
        print(f"| {method} | {ms:.0f} |")
    print()
    print(f"coco eval: {ref_seconds / our_seconds:.1f}x pycocotools, stats identical: {'yes' if identical else 'no'}")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
