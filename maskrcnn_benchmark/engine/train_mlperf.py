"""The MLPerf training run (``tools/train_mlperf.py``): NVIDIA v0.7's command line and log, our engine.

    python tools/train_mlperf.py --config-file configs/e2e_mask_rcnn_R_50_FPN_1x.yaml [--local_rank N]
        [--seed S] [--resume CHECKPOINT] [--ruleset 0.7.0] [--sync-eval] KEY VALUE ...

Order of events follows the reference: submission info, cache_clear, init_start; model, optimizer and
weights; hyperparameter keys; init_stop and run_start; data loaders (timed, as NVIDIA does); training with
per-epoch evaluation until both targets are met; run_stop.
"""
import argparse
import logging
import os
import random
import sys
import time

import numpy as np
import torch

from ..config import ConfigError, load_config
from ..data import make_data_loader
from ..data.datasets import DatasetError
from ..data.datasets.evaluation.coco_eval import predictions_to_coco
from ..modeling import build_detection_model
from ..solver import make_lr_scheduler, make_optimizer
from ..utils import comm
from ..utils.c2_model_loading import WeightsError
from ..utils.checkpoint import DetectronCheckpointer
from ..utils.logger import setup_logger
from ..utils.mlperf_logger import MLPerfLogger
from .hooks import CheckpointHook, MetricsHook, MLPerfHook, ProfilerHook
from .inference import inference
from .scoring import COCOScorer
from .trainer import NonFiniteLossError, Trainer, iterations_per_epoch

USER_ERRORS = (ConfigError, DatasetError, WeightsError, OSError, KeyError, ValueError)


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
                   help="resume model, optimizer and LR schedule from a checkpoint of this trainer")
    p.add_argument("--ruleset", default=os.environ.get("MLPERF_RULESET", "0.7.0"),
                   help="MLPerf ruleset whose keys to log (0.7.0 ... 3.1.0)")
    p.add_argument("--sync-eval", action="store_true", help="score COCO in-process instead of asynchronously")
    p.add_argument("--timeout", type=int, default=1800, help="distributed timeout in seconds")
    p.add_argument("opts", nargs=argparse.REMAINDER, help="KEY VALUE config overrides")
    return p.parse_args(argv)


def _seed_everything(seed, rank):
    local = (seed + rank) % 2 ** 32
    random.seed(local)
    np.random.seed(local)
    torch.manual_seed(local)


def run(args, cfg, ml, logger):
    ml.start("init_start")
    rank, world, local_rank, device = comm.init_distributed(args.local_rank, cfg.MODEL.DEVICE, args.timeout)
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    seed = comm.broadcast_object(seed)
    ml.event("seed", seed)
    _seed_everything(seed, rank)
    logger.info("world size %d, device %s, seed %d", world, device, seed)
    logger.info("config:\n%s", cfg.dump())
    if cfg.SOLVER.IMS_PER_BATCH % world:
        raise ConfigError(f"SOLVER.IMS_PER_BATCH ({cfg.SOLVER.IMS_PER_BATCH}) must be divisible by the "
                          f"number of processes ({world})")

    model = build_detection_model(cfg).to(device)
    optimizer = make_optimizer(cfg, model)
    scheduler = make_lr_scheduler(cfg, optimizer)
    checkpointer = DetectronCheckpointer(cfg, model, optimizer, scheduler, cfg.OUTPUT_DIR,
                                         save_to_disk=rank == 0, logger=logger)
    start_iter = 0
    if args.resume:
        start_iter = int(checkpointer.resume(args.resume).get("iteration", 0))
    else:
        checkpointer.load(cfg.MODEL.WEIGHT)
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

    scorer = COCOScorer(test_set.ann_file, asynchronous=not args.sync_eval)
    bare_model = model.module if hasattr(model, "module") else model

    def evaluate(epoch):
        preds = inference(bare_model, test_loader, device, cfg.DTYPE)
        if comm.is_main_process():
            mlperf_hook._rank0(lambda: scorer.submit(epoch, *predictions_to_coco(preds, test_set),
                                                     image_ids=test_set.ids))

    mlperf_hook = MLPerfHook(ml, evaluate, scorer, cfg.MLPERF.MIN_BBOX_MAP, cfg.MLPERF.MIN_SEGM_MAP,
                             per_epoch_eval=cfg.PER_EPOCH_EVAL)
    hooks = [ProfilerHook(rank), MetricsHook(20), mlperf_hook]
    if cfg.SAVE_CHECKPOINTS:
        hooks.insert(1, CheckpointHook(checkpointer, cfg.SOLVER.CHECKPOINT_PERIOD))
    trainer = Trainer(model, optimizer, scheduler, train_loader, device, cfg.SOLVER.MAX_ITER, ipe,
                      dtype=cfg.DTYPE, start_iter=start_iter, hooks=hooks,
                      clip_grad_norm=cfg.SOLVER.CLIP_GRAD_NORM, channels_last=cfg.NHWC)
    t0 = time.time()
    trainer.train()
    train_seconds = time.time() - t0 - mlperf_hook.eval_seconds
    elapsed = time.time() - run_start
    if comm.is_main_process():
        done = trainer.images_seen
        print(f"&&&& MLPERF METRIC THROUGHPUT={done / max(train_seconds, 1e-9):.4f} images / s", flush=True)
        verdict = (f"reached box AP >= {cfg.MLPERF.MIN_BBOX_MAP} and mask AP >= {cfg.MLPERF.MIN_SEGM_MAP} "
                   f"at epoch {mlperf_hook.converged_epoch}" if mlperf_hook.success else "did NOT reach the target")
        print(f"time to train: {elapsed:.1f} s ({elapsed / 60:.2f} min); {verdict}", flush=True)
    return 0 if mlperf_hook.success else 3


def main(argv=None):
    args = parse_args(argv)
    rank = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")) or 0)
    try:
        cfg = load_config(args.config_file, args.opts, freeze=True)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 1
    try:
        logger = setup_logger(cfg.OUTPUT_DIR, rank)
        ml = MLPerfLogger(os.path.join(cfg.OUTPUT_DIR, "mlperf_log.txt"), rank=rank, ruleset=args.ruleset)
    except (OSError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 1
    ml.submission_info(num_nodes=int(os.environ.get("SLURM_NNODES", "1")))
    ml.event("cache_clear", os.environ.get("MLPERF_CACHE_CLEARED", "0") == "1")
    clean_exit = False
    try:
        code = run(args, cfg, ml, logger)
        clean_exit = True
        return code
    except NonFiniteLossError as e:
        print(f"error: {e}; aborting the run", file=sys.stderr, flush=True)
        return 2
    except USER_ERRORS as e:
        print(f"error: {error_line(e)}", file=sys.stderr, flush=True)
        return 1
    finally:
        if "run_start" in ml.logged and "run_stop" not in ml.logged:
            ml.end("run_stop", metadata={"status": "aborted"})
        ml.close()
        if clean_exit:
            comm.synchronize()  # no rank tears the process group down while another still uses it
        comm.destroy()
