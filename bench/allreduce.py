#!/usr/bin/env python
"""All-reduce bus bandwidth between GPUs (NCCL), as nccl-tests reports it: on this machine, or across nodes.

    python bench/allreduce.py [--gpus N] [--mbytes 256] [--iters 20] [--backend nccl|gloo]
    srun --ntasks-per-node=1 python -m bind_launch --nproc_per_node=8 bench/allreduce.py --launched \
        [--min-busbw GBPS]                         # across the nodes of a job (the job's check before trial 1)

One process per GPU (torch.multiprocessing), float32 all-reduce of ``--mbytes`` MB, ``--iters`` timed after 5 warm-up
calls. algbw = bytes / time; busbw = algbw * 2 (n - 1) / n (the ring's traffic per link, nccl-tests' definition).
``--backend gloo`` runs the same on CPU processes (for tests). Last line: ``allreduce: N ranks, S MB, algbw A GB/s,
busbw B GB/s``. ``--launched``: the ranks were started by a launcher (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
LOCAL_RANK in the environment, as bind_launch sets them); rank 0 prints the lines. ``--min-busbw``: exit 3 when the
bus bandwidth is below that floor (a slow or misconfigured interconnect: NCCL_SOCKET_IFNAME, NCCL_IB_HCA).
"""
import argparse
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _worker(rank, world, port, args, queue, local_rank=None):
    if port is not None:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group(args.backend, rank=rank, world_size=world)
    device = torch.device("cuda", rank if local_rank is None else local_rank) if args.backend == "nccl" else \
        torch.device("cpu")
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
    p.add_argument("--backend", default=None, choices=["nccl", "gloo"],
                   help="default: nccl where CUDA is available, else gloo")
    p.add_argument("--launched", action="store_true", help="ranks started by a launcher (RANK, WORLD_SIZE, ...)")
    p.add_argument("--local_rank", "--local-rank", type=int, default=None, help="set by the launcher")
    p.add_argument("--min-busbw", type=float, default=0.0, metavar="GBPS",
                   help="fail (exit 3) below this bus bandwidth")
    args = p.parse_args(argv)
    if args.backend is None:
        args.backend = "nccl" if torch.cuda.is_available() else "gloo"
    if args.launched:
        return _launched(args)
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
    return _report(world, queue.get(), args)


def _launched(args):
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", args.local_rank or 0))

    class _Result:
        seconds = None

        def put(self, value):
            self.seconds = value

    result = _Result()
    _worker(rank, world, None, args, result, local_rank=local)
    return _report(world, result.seconds, args) if rank == 0 else 0


def _report(world, seconds, args):
    algbw = args.mbytes * 1e6 / seconds / 1e9
    busbw = algbw * 2 * (world - 1) / world
    print(f"| ranks | size | time per all-reduce | algbw | busbw |\n|---:|---:|---:|---:|---:|\n"
          f"| {world} | {args.mbytes:g} MB | {seconds * 1e3:.2f} ms | {algbw:.1f} GB/s | {busbw:.1f} GB/s |")
    print(f"allreduce: {world} ranks, {args.mbytes:g} MB, algbw {algbw:.2f} GB/s, busbw {busbw:.2f} GB/s "
          f"({args.backend})", flush=True)
    if busbw < args.min_busbw:
        print(f"allreduce: FAILED: busbw {busbw:.2f} GB/s is below the floor of {args.min_busbw:g} GB/s (check "
              "NCCL_SOCKET_IFNAME / NCCL_IB_HCA and the fabric)", file=sys.stderr, flush=True)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
