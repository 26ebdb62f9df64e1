#!/usr/bin/env python
"""The training step's device NMS (``maskrcnn::nms_keep_padded``) on the CPU, against torchvision's NMS per group.

    python bench/nms_device.py [--threads 1] [--repeats 10]

Random boxes (the layout of tests/layers/test_nms_device.py), IoU threshold 0.7, every case timed ``--repeats``
times after one warm-up call; prints the median ms of each, and checks that both keep the same boxes. The cases:
the demo's RPN (4 images x 5 levels, 300 candidates each) and the MLPerf recipe's (12 images x 5 levels, 2000).
torchvision's kernel is the oracle, with a result of data-dependent length (on a GPU it finishes on the host);
ours has no host sync (bench/host_syncs.py) and, on the CPU, scans one box at a time with tensor ops.
"""
import argparse
import statistics
import sys
import time

import torch

from maskrcnn_benchmark.layers.nms import batched_nms, nms_keep_padded

CASES = (("demo RPN: 4 images x 5 levels", 20, 300, 100.0, 40.0),
         ("MLPerf RPN: 12 images x 5 levels", 60, 2000, 1200.0, 200.0))


def groups(g, k, spread, size, seed=0):
    gen = torch.Generator().manual_seed(seed)
    xy = torch.rand(g, k, 2, generator=gen) * spread
    wh = torch.rand(g, k, 2, generator=gen) * size + 2
    return torch.cat([xy, xy + wh], -1), torch.rand(g, k, generator=gen), torch.rand(g, k, generator=gen) > 0.05


def median_ms(fn, repeats):
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(1000 * (time.perf_counter() - t))
    return statistics.median(times)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=10)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"nms_device: torch {torch.__version__}, {torch.get_num_threads()} thread(s), medians of {args.repeats}\n")
    print("| case | groups x boxes | ours (device form), ms | torchvision per group, ms |")
    print("|---|---|---:|---:|")
    for name, g, k, spread, size in CASES:
        boxes, scores, valid = groups(g, k, spread, size)
        group = torch.arange(g)[:, None].expand(g, k)

        def ours():
            return nms_keep_padded(boxes, scores, valid, 0.7)

        def theirs():
            return batched_nms(boxes[valid], scores[valid], group[valid], 0.7)

        kept = torch.zeros(g, k, dtype=torch.bool)
        kept.view(-1)[valid.view(-1).nonzero()[:, 0][theirs()]] = True
        if not torch.equal(ours(), kept):
            print(f"{name}: the keep sets differ", file=sys.stderr)
            return 1
        print(f"| {name} | {g} x {k} | {median_ms(ours, args.repeats):.1f} | {median_ms(theirs, args.repeats):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
