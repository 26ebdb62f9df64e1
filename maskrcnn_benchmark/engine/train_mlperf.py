"""The MLPerf training run (``tools/train_mlperf.py``): NVIDIA v0.7's command line and log, our engine.

    python tools/train_mlperf.py --config-file configs/e2e_mask_rcnn_R_50_FPN_1x.yaml [--local_rank N]
        [--seed S] [--resume CHECKPOINT] [--sync-eval] KEY VALUE ...

Order of events follows the reference: submission info, cache_clear, init_start; model, optimizer and
weights; hyperparameter keys; init_stop and run_start; data loaders (timed, as NVIDIA does); training with
per-epoch evaluation until both targets are met; run_stop.
"""
import argparse
import logging
import os
import random
import signal
import sys
import time

import numpy as np
import torch

from ..config import ConfigError, ignored_settings, load_config
from ..data import make_data_loader
from ..data.datasets import DatasetError
from ..evaluation import AsyncScorer, COCOEvaluator, ScoringError, inference_on_dataset
from ..modeling import build_detection_model
from ..solver import make_lr_scheduler, make_optimizer
from ..utils import comm
from ..utils.c2_model_loading import WeightsError
from ..utils.checkpoint import DetectronCheckpointer
from ..utils.env import setup_environment
from ..utils.logger import setup_logger
from ..utils.mlperf_logger import MLPerfLogger
from ..utils.rng import set_rng_state
from ..utils.run_folder import claim_output_folder
from .hooks import CheckpointHook, MetricsHook, MLPerfHook, ProfilerHook
from .trainer import NonFiniteLossError, Trainer, iterations_per_epoch, make_grad_scaler

USER_ERRORS = (ConfigError, DatasetError, WeightsError, ScoringError, OSError, KeyError, ValueError)


def error_line(exc):
    """One line for the user: KeyError's bare message, and the original message of an error re-raised from a
    DataLoader worker (whose text otherwise carries the worker's whole traceback)."""
    msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
    if "Original Traceback" in msg:
        last = [line for line in msg.splitlines() if line.strip()][-1]
        msg = last.split(": ", 1)[1] if ": " in last else last
    return msg.strip()


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="MLPerf Mask R-CNN training")
    p.add_argument("--config-file", default="", metavar="FILE", help="path to a YAML config")
    p.add_argument("--local_rank", "--local-rank", type=int, default=None, help="set by bind_launch")
    p.add_argument("--seed", type=int, default=None, help="master seed (default: random, logged)")
    p.add_argument("--resume", default="", metavar="CHECKPOINT",
                   help="resume from a checkpoint of this trainer: model, optimizer, LR schedule, gradient scaler, "
                        "data order and random state continue where it was saved")
    p.add_argument("--ruleset", default=os.environ.get("MLPERF_RULESET", "3.1.0"),
                   help="accepted for compatibility: the log always holds the keys of every Mask R-CNN ruleset "
                        "(0.7.0 ... 3.1.0)")
    p.add_argument("--sync-eval", action="store_true", help="score COCO in-process instead of asynchronously")
    p.add_argument("--coco-backend", default="", choices=["", "auto", "faster_coco_eval", "pycocotools"],
                   help="COCO scoring backend (default: TEST.COCO_BACKEND, auto = faster-coco-eval if installed)")
    p.add_argument("--timeout", type=int, default=None,
                   help="seconds a collective may wait for the other ranks (default: DISTRIBUTED_TIMEOUT)")
    p.add_argument("opts", nargs=argparse.REMAINDER, help="KEY VALUE config overrides")
    return p.parse_args(argv)


def _seed_everything(seed, rank):
    local = (seed + rank) % 2 ** 32
    random.seed(local)
    np.random.seed(local)
    torch.manual_seed(local)


def run(args, cfg, ml, logger):
    ml.start("init_start")
    rank, world, local_rank, device = comm.init_distributed(args.local_rank, cfg.MODEL.DEVICE,
                                                            args.timeout or cfg.DISTRIBUTED_TIMEOUT)
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    seed = comm.broadcast_object(seed)
    _seed_everything(seed, rank)
    logger.info("config:\n%s", cfg.dump())
    ignored = ignored_settings(cfg)
    if ignored:
        logger.warning("these config values have no effect on this model and are ignored: %s", ", ".join(ignored))
    if cfg.SOLVER.IMS_PER_BATCH % world:
        raise ConfigError(f"SOLVER.IMS_PER_BATCH ({cfg.SOLVER.IMS_PER_BATCH}) must be divisible by the "
                          f"number of processes ({world})")

    model = build_detection_model(cfg).to(device)
    ml.weights_initialization()
    optimizer = make_optimizer(cfg, model)
    scheduler = make_lr_scheduler(cfg, optimizer)
    scaler = make_grad_scaler(device, cfg.DTYPE)
    checkpointer = DetectronCheckpointer(cfg, model, optimizer, scheduler, cfg.OUTPUT_DIR,
                                         save_to_disk=rank == 0, logger=logger, scaler=scaler)
    start_iter, resumed = 0, {}
    if args.resume:
        resumed = checkpointer.resume(args.resume)
        start_iter = int(resumed.get("iteration", 0))
        if resumed.get("seed") is not None and resumed["seed"] != seed:
            if args.seed is None:
                seed = int(resumed["seed"])  # the data order of the interrupted run continues
            else:
                logger.warning("--seed %d differs from the checkpoint's seed %d: the data order will not continue "
                               "the interrupted run's", args.seed, resumed["seed"])
    else:
        checkpointer.load_weights(cfg.MODEL.WEIGHT)
    ml.event("seed", seed)
    logger.info("world size %d, device %s, seed %d", world, device, seed)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None, broadcast_buffers=False)
    ml.hyperparameters(cfg, world)
    comm.synchronize()
    ml.end("init_stop")

    ml.start("run_start")
    run_start = time.time()
    train_loader = make_data_loader(cfg, is_train=True, num_replicas=world, rank=rank, start_iter=start_iter,
                                    seed=seed)
    test_loader = make_data_loader(cfg, is_train=False, num_replicas=world, rank=rank)[0]
    train_set, test_set = train_loader.dataset, test_loader.dataset
    ml.event("train_samples", len(train_set))
    ml.event("eval_samples", len(test_set))
    ipe = iterations_per_epoch(len(train_set), cfg.SOLVER.IMS_PER_BATCH)
    logger.info("%d training images, %d iterations per epoch, up to %d iterations", len(train_set), ipe,
                cfg.SOLVER.MAX_ITER)

    backend = args.coco_backend or cfg.TEST.COCO_BACKEND
    scorer = AsyncScorer(test_set.ann_file, image_ids=test_set.ids, backend=backend,
                         workers=cfg.TEST.COCO_WORKERS, asynchronous=not args.sync_eval)
    evaluator = COCOEvaluator(test_set, backend=backend, workers=cfg.TEST.COCO_WORKERS,
                              mask_method=cfg.TEST.MASK_ENCODING)
    bare_model = model.module if hasattr(model, "module") else model

    def evaluate(epoch):
        return inference_on_dataset(bare_model, test_loader, evaluator, device, cfg.DTYPE)

    mlperf_hook = MLPerfHook(ml, evaluate, scorer, cfg.MLPERF.MIN_BBOX_MAP, cfg.MLPERF.MIN_SEGM_MAP,
                             per_epoch_eval=cfg.PER_EPOCH_EVAL)
    hooks = [ProfilerHook(rank), MetricsHook(20, reduce=not cfg.DISABLE_REDUCED_LOGGING), mlperf_hook]
    if cfg.SAVE_CHECKPOINTS:
        hooks.insert(1, CheckpointHook(checkpointer, cfg.SOLVER.CHECKPOINT_PERIOD, seed=seed))
    trainer = Trainer(model, optimizer, scheduler, train_loader, device, cfg.SOLVER.MAX_ITER, ipe,
                      dtype=cfg.DTYPE, start_iter=start_iter, hooks=hooks,
                      clip_grad_norm=cfg.SOLVER.CLIP_GRAD_NORM, channels_last=cfg.NHWC, scaler=scaler)
    states = resumed.get("rng_states")
    if states is not None:
        if len(states) == world:
            set_rng_state(states[rank])  # last, so nothing after it draws: the next iteration draws as it did
        else:
            logger.warning("the checkpoint holds the random state of %d processes, this run has %d: not restored",
                           len(states), world)
    t0 = time.time()
    trainer.train()
    train_seconds = time.time() - t0 - sum(mlperf_hook.eval_seconds)
    elapsed = time.time() - run_start
    if comm.is_main_process():
        done = trainer.images_seen
        print(f"&&&& MLPERF METRIC THROUGHPUT={done / max(train_seconds, 1e-9):.4f} images / s", flush=True)
        verdict = (f"reached box AP >= {cfg.MLPERF.MIN_BBOX_MAP} and mask AP >= {cfg.MLPERF.MIN_SEGM_MAP} "
                   f"at epoch {mlperf_hook.converged_epoch}" if mlperf_hook.success else "did NOT reach the target")
        print(f"time to train: {elapsed:.1f} s ({elapsed / 60:.2f} min); {verdict}", flush=True)
        blocking, scoring = mlperf_hook.eval_seconds, mlperf_hook.scoring_seconds
        if blocking:
            print(f"evaluation: {len(blocking)} epochs, blocking {sum(blocking):.1f} s in total "
                  f"(eval_start to eval_stop, {sum(blocking) / len(blocking):.1f} s per epoch); COCO scoring "
                  f"{sum(scoring) / max(len(scoring), 1):.1f} s per epoch "
                  f"{'in the background' if scorer.asynchronous else 'inside that time'}", flush=True)
    return 0 if mlperf_hook.success else 3


class Stopped(Exception):
    """SIGTERM (Slurm's time limit, scancel, bind_launch stopping the ranks of a failed job), SIGINT or SIGHUP."""

    def __init__(self, signum):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _ignore(signum, frame):
    pass


def _stop_on_signals():
    """The first SIGTERM/SIGINT/SIGHUP raises :class:`Stopped` in the main thread, so the run unwinds through
    its hooks (run_stop aborted, scorer and loader workers stopped, logs flushed); later ones are ignored so
    nothing interrupts that cleanup (SIGKILL still ends it).

    Slurm (time limit, scancel) and a terminal's Ctrl-C signal every process of the job, data loader workers
    included. Workers are forked and inherit this handler; in a loader worker SIGTERM and SIGHUP are ignored (the
    main process stops its workers as it unwinds, and a worker dies with its parent anyway), and SIGINT raises
    the KeyboardInterrupt a worker exits on quietly. Other forked helpers (the scorer's pool) end on the signal
    as they would without the handler: ``Pool.terminate()`` relies on it. Once stopping, the main process also stops reacting to
    SIGCHLD: torch's loader handler would otherwise turn a worker that exits while the run unwinds into a
    second error, in the middle of the cleanup."""
    main_pid = os.getpid()

    def handler(signum, frame):
        if os.getpid() != main_pid:
            if signum == signal.SIGINT:
                raise KeyboardInterrupt  # what a loader worker expects
            if torch.utils.data.get_worker_info() is not None:
                return  # a loader worker: its loader stops it
            # any other forked helper (the COCO scorer's pool): what the signal would have done, so that
            # Pool.terminate() and friends still end it
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)
        signal.signal(signal.SIGCHLD, _ignore)  # a callable: SIG_DFL would race with a SIGCHLD already pending
        raise Stopped(signum)

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, handler)


def _is_collective_failure(exc):
    dist_error = getattr(torch.distributed, "DistBackendError", ())
    if dist_error and isinstance(exc, dist_error):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and any(
        k in text for k in ("Timed out", "timed out", "Connection closed by peer", "Connection reset by peer",
                            "gloo", "NCCL", "Socket Timeout"))


def _collective_failure_line(exc):
    timeout = comm.collective_timeout()
    stalled = comm.unresponsive_ranks()
    who = ("rank " + ", ".join(map(str, stalled)) + " stopped answering (no heartbeat)") if stalled else \
        "another rank stopped answering"
    limit = f" (DISTRIBUTED_TIMEOUT {timeout:g} s)" if timeout else ""
    return f"{who}; a collective on rank {comm.get_rank()} failed{limit}: {error_line(exc).splitlines()[0]}"


def main(argv=None):
    args = parse_args(argv)
    setup_environment()  # the reference's site hook (TORCH_DETECTRON_ENV_MODULE), before anything else
    rank = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")) or 0)
    _stop_on_signals()
    try:
        cfg = load_config(args.config_file, args.opts, freeze=True)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 1
    except Stopped as e:
        print(f"error: stopped by {e}", file=sys.stderr, flush=True)
        return 128 + e.signum
    lock, rotated, removed = None, [], []
    try:
        if rank == 0:
            lock, rotated, removed = claim_output_folder(cfg.OUTPUT_DIR)
        logger = setup_logger(cfg.OUTPUT_DIR, rank)
        ml = MLPerfLogger(os.path.join(cfg.OUTPUT_DIR, "mlperf_log.txt"), rank=rank, ruleset=args.ruleset)
    except (OSError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 1
    except Stopped as e:
        print(f"error: stopped by {e}", file=sys.stderr, flush=True)
        return 128 + e.signum
    if rotated:
        logger.info("previous logs moved aside: %s", ", ".join(rotated))
    if removed:
        logger.warning("removed %d temporary file(s) left by an interrupted run: %s", len(removed), ", ".join(removed))
    ml.submission_info(num_nodes=int(os.environ.get("SLURM_NNODES", "1")))
    ml.cache_clear()
    clean_exit = False
    try:
        code = run(args, cfg, ml, logger)
        clean_exit = True
        return code
    except Stopped as e:
        print(f"error: stopped by {e}; run_stop logged as aborted", file=sys.stderr, flush=True)
        return 128 + e.signum
    except NonFiniteLossError as e:
        print(f"error: {e}; aborting the run", file=sys.stderr, flush=True)
        return 2
    except USER_ERRORS as e:
        print(f"error: {error_line(e)}", file=sys.stderr, flush=True)
        return 1
    except Exception as e:  # noqa: BLE001 - one line for the user; the log keeps the details
        if comm.get_world_size() > 1 and _is_collective_failure(e):
            print(f"error: {_collective_failure_line(e)}", file=sys.stderr, flush=True)
            return 4
        logger.exception("the run failed")
        print(f"error: {type(e).__name__}: {error_line(e).splitlines()[0]}", file=sys.stderr, flush=True)
        return 5
    finally:
        if "run_start" in ml.logged and "run_stop" not in ml.logged:
            ml.end("run_stop", metadata={"status": "aborted"})
        ml.close()
        if clean_exit:
            comm.synchronize()  # no rank tears the process group down while another still uses it
        comm.destroy()
        if lock is not None:
            lock.close()
