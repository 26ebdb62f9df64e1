#!/usr/bin/env python
"""Rank 0's serial share of an evaluation's hand-over: unpickling every rank's detections and merging them.

    python bench/eval_gather.py [--ranks 32] [--images 5000] [--dets 100]

Each rank's detections (synthetic: ``--dets`` boxes and RLE masks per image, COCO-val sized strings) are pickled
as the gather sends them, in the two forms a rank can send: one object per image (a ``{image id: Detections}``
dict) or this rank's images concatenated (``COCOEvaluator.local_part``). The table gives rank 0's time to unpickle
the parts and merge them (``COCOEvaluator.merge``: each image once, in image-id order), median of ``--rounds``;
every other rank waits that long in the next collective.
"""
import argparse
import pickle
import statistics
import sys
import time

import numpy as np

from maskrcnn_benchmark.evaluation.detections import Detections
from maskrcnn_benchmark.evaluation.evaluator import COCOEvaluator


def _per_rank(ranks, images, dets, seed=0):
    rng = np.random.default_rng(seed)
    alphabet = np.frombuffer(b"0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz", np.uint8)
    out = [dict() for _ in range(ranks)]
    for image_id in range(images):
        ids = np.full(dets, image_id)
        cats = rng.integers(1, 91, dets)
        scores = rng.random(dets)
        counts = [alphabet[rng.integers(0, len(alphabet), n)].tobytes().decode() for n in rng.integers(40, 400, dets)]
        out[image_id % ranks][image_id] = Detections(ids, cats, rng.random((dets, 4)) * 500, scores, ids, cats, counts,
                                                     np.full(dets, 480), np.full(dets, 640), scores,
                                                     rng.integers(1, 5000, dets))
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, default=32)
    p.add_argument("--images", type=int, default=5000)
    p.add_argument("--dets", type=int, default=100)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    per_rank = _per_rank(args.ranks, args.images, args.dets)
    evaluators = []
    for part in per_rank:
        e = COCOEvaluator.__new__(COCOEvaluator)
        e._per_image = part
        evaluators.append(e)
    forms = {
        "one object per image": ([pickle.dumps(part, pickle.HIGHEST_PROTOCOL) for part in per_rank],
                                 lambda parts: Detections.concat([d for i, d in sorted(
                                     {k: v for part in reversed(parts) for k, v in part.items()}.items())])),
        "each rank's images concatenated": ([pickle.dumps(e.local_part(), pickle.HIGHEST_PROTOCOL)
                                             for e in evaluators], COCOEvaluator.merge),
    }
    print(f"{args.ranks} ranks, {args.images} images, {args.dets} detections each (boxes and RLE masks)")
    print("| what each rank sends | MB pickled (all ranks) | rank 0: unpickle + merge, s |\n|---|---:|---:|")
    for name, (blobs, merge) in forms.items():
        seconds = []
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            merged = merge([pickle.loads(b) for b in blobs])
            seconds.append(time.perf_counter() - t0)
        assert len(merged) == args.images * args.dets
        print(f"| {name} | {sum(map(len, blobs)) / 1e6:.0f} | {statistics.median(seconds):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
