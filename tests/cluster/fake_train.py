#!/usr/bin/env python3
"""Stand-in for tools/train_mlperf.py in launch/cluster tests.

Same command line as the trainer (``--config-file X [--local_rank N] KEY VALUE ...``, all ignored but echoed)
and the same distributed setup (env:// from RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, gloo).  Every rank joins,
all-reduces a few times ("epochs"); rank 0 prints a minimal MLPerf 0.7.0 maskrcnn ``:::MLLOG`` log that passes
the compliance checker. Like the trainer it logs ``cache_clear`` from ``MLPERF_CACHE_CLEARED`` (the Slurm
scripts set it when they dropped the caches).

Environment knobs:
  FAKE_TRAIN_SLEEP=S        sleep S seconds inside the first epoch (to be killed mid-run)
  FAKE_TRAIN_SLEEP_RANK=R   only rank R sleeps (default: every rank)
  FAKE_TRAIN_PIDDIR=DIR     each rank writes DIR/rank<R>.pid (and DIR/rank<R>.host)
  FAKE_TRAIN_EXIT=N         rank FAKE_TRAIN_EXIT_RANK (default 0) exits with N after the first epoch
  FAKE_TRAIN_TIMEOUT=S      collective timeout (default 120 s)
  MASKRCNN_PROFILE=torch|memory and MASKRCNN_PROFILE_DIR: per-iteration profiling (see utils/profiling.py)
"""

import datetime
import os
import socket
import sys
import time



def parse(argv):
    local_rank, config_file, overrides = None, None, []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--local_rank"):
            if "=" in a:
                local_rank = int(a.split("=", 1)[1])
            else:
                i += 1
                local_rank = int(argv[i])
        elif a == "--config-file":
            i += 1
            config_file = argv[i]
        else:
            overrides.append(a)
        i += 1
    return local_rank, config_file, overrides


def main(argv):
    import torch
    import torch.distributed as dist

    local_rank, config_file, overrides = parse(argv)
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if local_rank is None:
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    host = socket.gethostname()

    piddir = os.environ.get("FAKE_TRAIN_PIDDIR")
    if piddir:
        os.makedirs(piddir, exist_ok=True)
        with open(os.path.join(piddir, f"rank{rank}.host"), "w") as f:
            f.write(host)
        with open(os.path.join(piddir, f"rank{rank}.pid"), "w") as f:
            f.write(str(os.getpid()))

    mllogger = None
    if rank == 0:
        from mlperf_logging import mllog
        from mlperf_logging.mllog import constants as C

        mllogger = mllog.get_mllogger()

    def log(kind, key, value=None, **meta):
        if mllogger is not None:
            getattr(mllogger, kind)(key=key, value=value, metadata=meta or None)
            sys.stdout.flush()

    log("event", "cache_clear", os.environ.get("MLPERF_CACHE_CLEARED", "0") == "1")
    log("event", "init_start")
    print(f"fake_train: rank={rank}/{world} local_rank={local_rank} host={host} "
          f"affinity={sorted(os.sched_getaffinity(0))} config={config_file} overrides={' '.join(overrides)}",
          file=sys.stderr, flush=True)
    timeout = datetime.timedelta(seconds=float(os.environ.get("FAKE_TRAIN_TIMEOUT", "120")))
    if world > 1:
        dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world, timeout=timeout)

    def allreduce(x):
        if world > 1:
            dist.all_reduce(x)
        return x

    from maskrcnn_benchmark.utils import profiling

    prof = profiling.from_env(rank=rank)

    gbs = 2 * world
    if rank == 0:
        for key, value in [
            (C.SUBMISSION_BENCHMARK, "maskrcnn"), (C.SUBMISSION_ORG, os.environ.get("SUBMISSION_ORG", "test")),
            (C.SUBMISSION_DIVISION, "closed"), (C.SUBMISSION_STATUS, "research"),
            (C.SUBMISSION_PLATFORM, f"{os.environ.get('SLURM_JOB_NUM_NODES', '1')}xfake"),
            ("seed", 1), (C.GLOBAL_BATCH_SIZE, gbs), (C.OPT_BASE_LR, round(0.02 * world, 2)),
            (C.OPT_LR_WARMUP_STEPS, 10), (C.OPT_LR_WARMUP_FACTOR, 0.02 * world / 10),
            (C.OPT_LR_DECAY_FACTOR, 0.1), (C.OPT_LR_DECAY_STEPS, [90, 120]),
            ("num_image_candidates", 1000 * 2), ("min_image_size", 800), ("max_image_size", 1333),
            (C.TRAIN_SAMPLES, 64), (C.EVAL_SAMPLES, 16),
        ]:
            log("event", key, value)
    x = allreduce(torch.tensor([float(rank + 1)]))
    expected = world * (world + 1) / 2
    if x.item() != expected:
        print(f"fake_train: rank {rank}: all_reduce gave {x.item()}, expected {expected}", file=sys.stderr)
        return 1
    log("end", "init_stop")
    log("start", "run_start")

    sleep_s = float(os.environ.get("FAKE_TRAIN_SLEEP", "0"))
    sleep_rank = os.environ.get("FAKE_TRAIN_SLEEP_RANK")
    epochs = 2
    it = 0
    for epoch in range(1, epochs + 1):
        log("start", "block_start", first_epoch_num=epoch, epoch_count=1)
        log("start", "epoch_start", epoch_num=epoch)
        if epoch == 1 and sleep_s and (sleep_rank is None or int(sleep_rank) == rank):
            print(f"fake_train: rank {rank} sleeping {sleep_s}s", file=sys.stderr, flush=True)
            time.sleep(sleep_s)
        for _ in range(4):
            y = allreduce(torch.ones(1024))
            assert y[0].item() == world
            it += 1
            prof.step(it)
        if epoch == 1 and os.environ.get("FAKE_TRAIN_EXIT") and rank == int(os.environ.get("FAKE_TRAIN_EXIT_RANK", "0")):
            print(f"fake_train: rank {rank} exiting with {os.environ['FAKE_TRAIN_EXIT']}", file=sys.stderr, flush=True)
            sys.stdout.flush()
            os._exit(int(os.environ["FAKE_TRAIN_EXIT"]))  # no gloo teardown (it may abort the process)
        log("end", "epoch_stop", epoch_num=epoch)
        log("start", "eval_start", epoch_num=epoch)
        acc = allreduce(torch.tensor([0.2 * epoch, 0.18 * epoch])) / world
        log("end", "eval_stop", epoch_num=epoch)
        log("event", "eval_accuracy", {"BBOX": round(acc[0].item(), 4), "SEGM": round(acc[1].item(), 4)},
            epoch_num=epoch)
        log("end", "block_stop", first_epoch_num=epoch)
    prof.close()
    log("end", "run_stop", status="success")
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    print(f"fake_train: rank {rank} done, allreduce={x.item()} expected={expected}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
