#!/usr/bin/env python3
"""Stand-in for tools/train_mlperf.py in launch/cluster tests.

Same command line as the trainer (``--config-file X [--local_rank N] KEY VALUE ...``, all ignored but echoed)
and the same rendezvous (env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; rank 0 listens on the master port, the
others connect to it, as torch's TCPStore does). Every rank joins, all-reduces a few times per "epoch" (sums
through rank 0, over those connections; a rank that dies ends the others' next collective with an error, as
gloo's would); rank 0 writes, through the package's own MLPerfLogger, an MLPerf log that
every Mask R-CNN ruleset's compliance checker accepts: the submission keys (MLPERF_SUBMISSION_ORG, ...), a random
seed shared by the ranks (distinct per run, as the seed checker wants), RCP 96's recipe (the DGX H100 config's),
and evaluations whose AP reaches the target at the last epoch (FAKE_TRAIN_EPOCHS, default 14: what RCP 96
converges in). It logs ``cache_clear`` from ``MLPERF_CACHE_CLEARED`` (the Slurm scripts set it) and writes the
log to OUTPUT_DIR/mlperf_log.txt too when the command line has ``OUTPUT_DIR`` (as the trainer does).

Environment knobs:
  FAKE_TRAIN_EPOCHS=E       epochs (the last one meets the target; default 14)
  FAKE_TRAIN_SLEEP=S        sleep S seconds inside the first epoch (to be killed mid-run)
  FAKE_TRAIN_SLEEP_RANK=R   only rank R sleeps (default: every rank)
  FAKE_TRAIN_PIDDIR=DIR     each rank writes DIR/rank<R>.pid (and DIR/rank<R>.host)
  FAKE_TRAIN_EXIT=N         rank FAKE_TRAIN_EXIT_RANK (default 0) exits with N after the first epoch (only in the
                            trial FAKE_TRAIN_EXIT_TRIAL, e.g. trial_2, when set)
  FAKE_TRAIN_TIMEOUT=S      collective timeout (default 120 s)
  MASKRCNN_PROFILE=torch|memory and MASKRCNN_PROFILE_DIR: per-iteration profiling (see utils/profiling.py)

No torch (unless profiling): the launch and cluster tests start dozens of these ranks, and importing torch costs
each one about 2.5 CPU-seconds on the 2-core CI machine. The real trainer's runs on the cluster test gloo itself.
"""

import json
import os
import socket
import sys
import time


class Collective:
    """Sums of float lists across the ranks, through rank 0 (a star over TCP), and a barrier."""

    def __init__(self, rank, world, addr, port, timeout):
        self.rank, self.world = rank, world
        self.peers = []
        if world == 1:
            return
        deadline = time.monotonic() + timeout
        if rank == 0:
            server = socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True) \
                if socket.has_dualstack_ipv6() else socket.create_server(("", port))
            server.settimeout(timeout)
            peers = {}
            while len(peers) < world - 1:
                conn, _ = server.accept()
                conn.settimeout(timeout)
                f = conn.makefile("rw")
                peers[int(f.readline())] = (conn, f)
            server.close()
            self.peers = [peers[r] for r in sorted(peers)]
        else:
            while True:
                try:
                    conn = socket.create_connection((addr, port), timeout=timeout)
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
            conn.settimeout(timeout)
            f = conn.makefile("rw")
            f.write(f"{rank}\n")
            f.flush()
            self.peers = [(conn, f)]

    @staticmethod
    def _read(f):
        try:
            line = f.readline()
        except ConnectionResetError:
            line = ""
        if not line:
            # a second, as gloo takes to notice: the launcher on a killed rank's node sees that rank end first
            # (it polls every 0.1 s and names the first failed local rank in rank order)
            time.sleep(1)
            raise ConnectionError("a peer closed the connection (it died or stopped)")
        return json.loads(line)

    def allreduce(self, values):
        values = [float(v) for v in values]
        if self.world == 1:
            return values
        if self.rank == 0:
            total = values
            for _, f in self.peers:
                total = [a + b for a, b in zip(total, self._read(f))]
            for _, f in self.peers:
                f.write(json.dumps(total) + "\n")
                f.flush()
            return total
        [(_, f)] = self.peers
        f.write(json.dumps(values) + "\n")
        f.flush()
        return self._read(f)

    def close(self):
        for conn, f in self.peers:
            f.close()
            conn.close()



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

    output_dir = dict(zip(overrides[0::2], overrides[1::2])).get("OUTPUT_DIR")
    from maskrcnn_benchmark.utils.mlperf_logger import MLPerfLogger

    ml = MLPerfLogger(os.path.join(output_dir, "mlperf_log.txt") if output_dir and rank == 0 else None, rank=rank)

    def log(kind, key, value=None, **meta):
        getattr(ml, kind)(key, value, metadata=meta or None)
        sys.stdout.flush()

    ml.submission_info(num_nodes=int(os.environ.get("SLURM_JOB_NUM_NODES", "1")))
    ml.cache_clear()
    log("start", "init_start")
    print(f"fake_train: rank={rank}/{world} local_rank={local_rank} host={host} "
          f"affinity={sorted(os.sched_getaffinity(0))} config={config_file} overrides={' '.join(overrides)}",
          file=sys.stderr, flush=True)
    timeout = float(os.environ.get("FAKE_TRAIN_TIMEOUT", "120"))
    comm = Collective(rank, world, os.environ.get("MASTER_ADDR", "127.0.0.1"),
                      int(os.environ.get("MASTER_PORT", "29500")), timeout)
    allreduce = comm.allreduce

    from maskrcnn_benchmark.utils import profiling

    prof = profiling.from_env(rank=rank)

    [seed] = allreduce([int.from_bytes(os.urandom(3), "little") if rank == 0 else 0])
    ml.event("seed", int(seed))
    for key, value in [  # RCP maskrcnn_ref_96 (config_DGXH100.sh)
            ("global_batch_size", 96), ("gradient_accumulation_steps", 1), ("num_image_candidates", 6000),
            ("opt_name", "sgd_with_momentum"), ("opt_base_learning_rate", 0.12),
            ("opt_learning_rate_warmup_steps", 625), ("opt_learning_rate_warmup_factor", 0.000192),
            ("opt_learning_rate_decay_factor", 0.1), ("opt_learning_rate_decay_steps", [12000, 16000]),
            ("min_image_size", 800), ("max_image_size", 1333)]:
        ml.event(key, value)
    ml.weights_initialization()
    [x] = allreduce([rank + 1])
    expected = world * (world + 1) / 2
    if x != expected:
        print(f"fake_train: rank {rank}: all_reduce gave {x}, expected {expected}", file=sys.stderr)
        return 1
    log("end", "init_stop")
    log("start", "run_start")
    log("event", "train_samples", 117266)
    log("event", "eval_samples", 5000)

    sleep_s = float(os.environ.get("FAKE_TRAIN_SLEEP", "0"))
    sleep_rank = os.environ.get("FAKE_TRAIN_SLEEP_RANK")
    epochs = int(os.environ.get("FAKE_TRAIN_EPOCHS", "14"))
    it = 0
    t_start = time.monotonic()
    for epoch in range(1, epochs + 1):
        log("start", "block_start", first_epoch_num=epoch, epoch_count=1)
        log("start", "epoch_start", epoch_num=epoch)
        if epoch == 1 and sleep_s and (sleep_rank is None or int(sleep_rank) == rank):
            print(f"fake_train: rank {rank} sleeping {sleep_s}s", file=sys.stderr, flush=True)
            time.sleep(sleep_s)
        for _ in range(4):
            y = allreduce([1.0] * 1024)
            assert y[0] == world
            it += 1
            prof.step(it)
        if (epoch == 1 and os.environ.get("FAKE_TRAIN_EXIT") and rank == int(os.environ.get("FAKE_TRAIN_EXIT_RANK", "0"))
                and os.environ.get("FAKE_TRAIN_EXIT_TRIAL", os.environ.get("TRIAL_NAME")) == os.environ.get("TRIAL_NAME")):
            print(f"fake_train: rank {rank} exiting with {os.environ['FAKE_TRAIN_EXIT']}", file=sys.stderr, flush=True)
            sys.stdout.flush()
            os._exit(int(os.environ["FAKE_TRAIN_EXIT"]))  # no gloo teardown (it may abort the process)
        log("end", "epoch_stop", epoch_num=epoch)
        log("end", "block_stop", first_epoch_num=epoch)
        log("start", "eval_start", epoch_num=epoch)
        # the AP curve: the targets at the last epoch, below before; every rank agrees on it
        acc = [s / world * t for s, t in zip(allreduce([epoch / epochs] * 2), (0.380, 0.342))]
        log("end", "eval_stop", epoch_num=epoch)
        log("event", "eval_accuracy", {"BBOX": round(acc[0], 4), "SEGM": round(acc[1], 4)},
            epoch_num=epoch)
    prof.close()
    log("end", "run_stop", status="success")
    if rank == 0:  # the trainer's closing line (RunOutcome.summary): what gpu-check reads of a run
        print(f"&&&& MLPERF METRIC THROUGHPUT={it * 96 / max(time.monotonic() - t_start, 1e-9):.4f} images / s",
              flush=True)
    ml.close()
    allreduce([0])  # the barrier
    comm.close()
    print(f"fake_train: rank {rank} done, allreduce={x} expected={expected}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
