#!/usr/bin/env python
"""What it costs to ask "stop now?" every iteration, on N gloo ranks.

    python bench/stop_signal.py --ranks 4 --iters 300 --step-ms 20

Each rank runs ``--iters`` fake training steps (``--step-ms`` of busy compute) and, after each one, either
nothing, the trainer's non-blocking decision exchange (``AsyncFlag.exchange``: an asynchronous all-reduce on a
gloo group, read one iteration later), or a blocking all-reduce (what polling every iteration would cost without
it). Prints the time per iteration of each variant and the overhead over "nothing" (median of rank 0's runs).
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from maskrcnn_benchmark.utils.comm import AsyncFlag


def _busy(ms):
    end = time.perf_counter() + ms / 1000
    x = 0
    while time.perf_counter() < end:
        x += 1
    return x


def _rank(rank, world, init_file, iters, step_ms, repeats, out):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    flag = AsyncFlag()
    results = {"none": [], "async exchange": [], "blocking all-reduce": []}
    for _ in range(repeats):
        for name in results:
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(iters):
                _busy(step_ms)
                if name == "async exchange":
                    flag.exchange(0)
                elif name == "blocking all-reduce":
                    flag.agree(0)
            flag.close()
            results[name].append((time.perf_counter() - t0) / iters * 1000)
    if rank == 0:
        out.update({k: statistics.median(v) for k, v in results.items()})
    dist.destroy_process_group()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--iters", type=int, default=300)
    p.add_argument("--step-ms", type=float, default=20.0)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        out = mp.Manager().dict()
        mp.spawn(_rank, args=(args.ranks, os.path.join(tmp, "init"), args.iters, args.step_ms, args.repeats, out),
                 nprocs=args.ranks)
        res = dict(out)
    print(f"{args.ranks} gloo ranks, {args.iters} iterations of {args.step_ms:g} ms, median of {args.repeats}")
    print()
    print("| per iteration | ms | overhead (ms) |")
    print("|---|---:|---:|")
    for name, ms in res.items():
        print(f"| {name} | {ms:.3f} | {ms - res['none']:+.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
