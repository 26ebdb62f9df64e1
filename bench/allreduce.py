#!/usr/bin/env python
"""All-reduce bus bandwidth between the GPUs of this machine (NCCL), as nccl-tests reports it.

    python bench/allreduce.py [--gpus N] [--mbytes 256] [--iters 20] [--backend nccl|gloo]

One process per GPU (torch.multiprocessing), float32 all-reduce of ``--mbytes`` MB, ``--iters`` timed after 5 warm-up
calls. algbw = bytes / time; busbw = algbw * 2 (n - 1) / n (the ring's traffic per link, nccl-tests' definition).
``--backend gloo`` runs the same on CPU processes (for tests). Last line: ``allreduce: N ranks, S MB, algbw A GB/s,
busbw B GB/s``.
"""
import argparse
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _worker(rank, world, port, args, queue):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group(args.backend, rank=rank, world_size=world)
    device = torch.device("cuda", rank) if args.backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    x = torch.ones(int(args.mbytes * 1e6) // 4, device=device)
    for _ in range(5):
        dist.all_reduce(x)
    if device.type == "cuda":
        torch.cuda.synchronize()
    dist.barrier()
    t = time.perf_counter()
    for _ in range(args.iters):
        dist.all_reduce(x)
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = (time.perf_counter() - t) / args.iters
    if rank == 0:
        queue.put(seconds)
    dist.destroy_process_group()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gpus", type=int, default=None, help="ranks (default: every visible GPU; 2 with gloo)")
    p.add_argument("--mbytes", type=float, default=256.0)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--backend", default="nccl", choices=["nccl", "gloo"])
    args = p.parse_args(argv)
    world = args.gpus or (torch.cuda.device_count() if args.backend == "nccl" else 2)
    if world < 2:
        print(f"allreduce: skipped, {world} GPU(s) visible (needs 2 or more)")
        return 0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.start_processes(_worker, args=(world, port, args, queue), nprocs=world, join=True, start_method="spawn")
    seconds = queue.get()
    algbw = args.mbytes * 1e6 / seconds / 1e9
    busbw = algbw * 2 * (world - 1) / world
    print(f"| ranks | size | time per all-reduce | algbw | busbw |\n|---:|---:|---:|---:|---:|\n"
          f"| {world} | {args.mbytes:g} MB | {seconds * 1e3:.2f} ms | {algbw:.1f} GB/s | {busbw:.1f} GB/s |")
    print(f"allreduce: {world} ranks, {args.mbytes:g} MB, algbw {algbw:.2f} GB/s, busbw {busbw:.2f} GB/s "
          f"({args.backend})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
