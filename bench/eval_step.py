#!/usr/bin/env python
"""Blocking evaluation time per image: the package's inference and post-processing, as a training run's epoch end.

    python bench/eval_step.py --device cuda --images 625 --height 800 --width 1333 --batch 8 --dtype float16
    python bench/eval_step.py --device cpu --images 8 --height 96 --width 128 --batch 2 --json

The R-50-FPN model of the MLPerf config (random weights, ``SCORE_THRESH`` 0 so that every image gives the
config's ``DETECTIONS_PER_IMG`` detections, the most post-processing a trained model can ask for) runs in eval
mode over ``--images`` synthetic images of one size, ``--batch`` (``TEST.IMS_PER_BATCH``) at a time, through the
run's own loop: :func:`~maskrcnn_benchmark.evaluation.run_inference` into a
:class:`~maskrcnn_benchmark.evaluation.COCOEvaluator` (boxes to the original image, masks pasted and RLE encoded on
the device, one transfer per batch). COCO scoring is not timed here: a run scores in a background process while
training goes on (bench/coco_eval.py times it). 625 images = COCO val's 5000 over one node's 8 GPUs: the blocking
evaluation of one epoch on one node, what ``make gpu-check``'s projection uses. ``--json``: one summary line
``{"event": "summary", "images": N, "seconds": S, "ms_per_image": M}``.
"""
import argparse
import json
import os
import time

import torch

from maskrcnn_benchmark.config import load_config
from maskrcnn_benchmark.evaluation import COCOEvaluator, run_inference
from maskrcnn_benchmark.modeling import build_detection_model
from maskrcnn_benchmark.structures import to_image_list

CONFIG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs",
                      "e2e_mask_rcnn_R_50_FPN_1x.yaml")


class _Images:
    """The few attributes of a dataset that COCOEvaluator reads: every image ``width x height``, 80 classes."""

    def __init__(self, n, width, height):
        self.n, self.width, self.height = n, width, height
        self.contiguous_category_id_to_json_id = {i: i for i in range(1, 81)}
        self.id_to_img_map = {i: i + 1 for i in range(n)}

    def __len__(self):
        return self.n

    def get_img_info(self, i):
        return {"width": self.width, "height": self.height}


class _Loader(list):
    """Batches already on the device, as a DeviceLoader yields them."""

    def __init__(self, batches, dataset):
        super().__init__(batches)
        self.dataset = dataset


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda")
    p.add_argument("--images", type=int, default=625)
    p.add_argument("--height", type=int, default=800)
    p.add_argument("--width", type=int, default=1333)
    p.add_argument("--batch", type=int, default=8, help="TEST.IMS_PER_BATCH")
    p.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    cfg = load_config(CONFIG, ["MODEL.DEVICE", device.type, "MODEL.ROI_HEADS.SCORE_THRESH", 0.0,
                               "TEST.IMS_PER_BATCH", args.batch])
    torch.manual_seed(0)
    model = build_detection_model(cfg).to(device).eval()
    d = cfg.DATALOADER.SIZE_DIVISIBILITY
    batches = []
    for start in range(0, args.images, args.batch):
        ids = tuple(range(start, min(start + args.batch, args.images)))
        images = to_image_list([torch.randn(3, args.height, args.width) * 50 for _ in ids], d).to(device)
        batches.append((images, None, ids))
    dataset = _Images(args.images, args.width, args.height)
    evaluator = COCOEvaluator(dataset, scorer=None)
    run_inference(model, _Loader(batches[:1], dataset), evaluator, device, args.dtype)  # warm-up: cuDNN, allocator
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    run_inference(model, _Loader(batches, dataset), evaluator, device, args.dtype)
    detections = evaluator.gather()
    seconds = time.perf_counter() - t0
    summary = {"event": "summary", "images": args.images, "seconds": round(seconds, 3),
               "ms_per_image": round(1000 * seconds / args.images, 2), "detections": len(detections),
               "size": f"{args.height}x{args.width}", "batch": args.batch, "dtype": args.dtype, "device": str(device)}
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"blocking evaluation: {args.images} images of {args.height}x{args.width}, batch {args.batch}, "
              f"{args.dtype} on {device}: {seconds:.2f} s ({summary['ms_per_image']} ms per image, "
              f"{len(detections)} detections)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
