"""One MLPerf training run: NVIDIA v0.7's order of events and MLPerf log, on this package's engine.

:class:`MLPerfRun` builds the run and owns its lifecycle and outcome: its output folder, its logs, the model,
optimizer, loaders and evaluator, the training loop (:class:`~maskrcnn_benchmark.engine.trainer.Trainer`) with its
hooks, and the :class:`RunOutcome`. What happens inside the loop belongs to the hooks, each with its own state
(:mod:`~maskrcnn_benchmark.engine.mlperf_hooks`: evaluation, and the MLPerf epoch marks and stop decision); every
MLPerf key is written by :class:`~maskrcnn_benchmark.utils.mlperf_logger.MLPerfLogger`, one method per event.

Order of events (the reference's): submission info, cache_clear, init_start; the config resolved
(:func:`~maskrcnn_benchmark.engine.resolve.resolve`); model, optimizer and weights; hyperparameter keys; init_stop
and run_start; data loaders (timed, as NVIDIA does); training, with blocking inference at every epoch end and COCO
scoring in a background process, until both targets are met; run_stop.
"""
import logging
import os
import random
import time
from dataclasses import dataclass, field
from typing import List, Optional

import numpy as np
import torch

from ..config import ignored_settings
from ..data import check_num_classes, make_data_loader, make_device_loader, polygon_slots, static_sizes
from ..evaluation import BackgroundScorer, COCOEvaluator, COCOScorer, run_inference
from ..modeling import build_detection_model
from ..solver import make_lr_scheduler, make_optimizer
from ..utils import comm
from ..utils.amp import autocast_dtype, make_grad_scaler
from ..utils.checkpoint import DetectronCheckpointer
from ..utils.errors import ConfigError, WeightsError
from ..utils.host_memory import glibc_version, keep_freed_blocks
from ..utils.logger import TRACEBACK_LOGGER, setup_logger
from ..utils.mlperf_logger import MLPerfLogger
from ..utils.rng import PROCESS, derived_seed, set_rng_state
from ..utils.run_folder import claim_output_folder
from .compile import CompiledForward
from .events import EpochScores
from .hooks import CheckpointHook, MetricsHook, ProfilerHook
from .mlperf_hooks import EvaluationFailed, EvaluationHook, MLPerfStopHook, meets_targets
from .preflight import check_before_init, resume_checkpoint
from .resolve import resolve
from .trainer import Trainer, iterations_per_epoch

logger = logging.getLogger(__name__)


@dataclass
class RunOptions:
    """What the command line adds to the config."""
    seed: Optional[int] = None         # master seed; None: random, logged
    resume: str = ""                   # checkpoint of this trainer to continue exactly (or its run's folder)
    sync_eval: bool = False            # score COCO in-process instead of in the background
    coco_backend: str = ""             # overrides TEST.COCO_BACKEND
    timeout: Optional[int] = None      # overrides DISTRIBUTED_TIMEOUT
    local_rank: Optional[int] = None   # from the launcher
    ruleset: str = "3.1.0"             # reported only: the log holds the keys of every ruleset


@dataclass
class RunOutcome:
    success: bool
    converged_epoch: Optional[int]
    targets: tuple
    scores: List[EpochScores] = field(default_factory=list)
    images: int = 0
    train_seconds: float = 0.0         # training iterations, without the blocking evaluation
    run_seconds: float = 0.0           # run_start to run_stop: the time to train
    eval_seconds: List[float] = field(default_factory=list)     # blocking, eval_start to eval_stop, per epoch
    scoring_seconds: List[float] = field(default_factory=list)  # COCO scoring per epoch
    background_scoring: bool = True

    def summary(self):
        """The lines rank 0 prints at the end (NVIDIA's throughput line first)."""
        lines = [f"&&&& MLPERF METRIC THROUGHPUT={self.images / max(self.train_seconds, 1e-9):.4f} images / s"]
        verdict = (f"reached box AP >= {self.targets[0]} and mask AP >= {self.targets[1]} at epoch "
                   f"{self.converged_epoch}" if self.success else "did NOT reach the target")
        lines.append(f"time to train: {self.run_seconds:.1f} s ({self.run_seconds / 60:.2f} min); {verdict}")
        if self.eval_seconds:
            blocking = self.eval_seconds
            scoring = self.scoring_seconds
            lines.append(f"evaluation: {len(blocking)} epochs, blocking {sum(blocking):.1f} s in total (eval_start "
                         f"to eval_stop, {sum(blocking) / len(blocking):.1f} s per epoch); COCO scoring "
                         f"{sum(scoring) / max(len(scoring), 1):.1f} s per epoch "
                         f"{'in the background' if self.background_scoring else 'inside that time'}")
        return lines


class MLPerfRun:
    """Build, train and evaluate one MLPerf run from ``cfg``; ``run()`` returns its :class:`RunOutcome`.

    The run owns its output folder (rank 0 claims ``cfg.OUTPUT_DIR``: one run at a time, fresh logs, see
    :mod:`~maskrcnn_benchmark.utils.run_folder`), its text log (``log.txt``) and its MLPerf log
    (``mlperf_log.txt`` on rank 0, and stdout). ``rank`` defaults to the launcher's (RANK, SLURM_PROCID).
    """

    def __init__(self, cfg, options=None, rank=None, mllogger=None):
        self.cfg = cfg
        self.options = options or RunOptions()
        if rank is None:
            rank = comm.launch_rank()
        self.rank = rank
        self.ml = mllogger
        self.targets = (cfg.MLPERF.MIN_BBOX_MAP, cfg.MLPERF.MIN_SEGM_MAP)

    # ================================================================================================ the run
    def run(self):
        cfg = self.cfg
        # a bad path or batch ends the run here: before compiling, and before an earlier run's files in OUTPUT_DIR
        # are moved aside for this one
        if self.options.resume:  # a run's folder names its last checkpoint
            self.options.resume = resume_checkpoint(self.options.resume)
        check_before_init(cfg, *comm.launch_sizes(), resume=self.options.resume,
                          coco_backend=self.options.coco_backend or "")
        lock, rotated, removed = claim_output_folder(cfg.OUTPUT_DIR, fresh=not self.options.resume,
                                                     reads=[cfg.MODEL.WEIGHT]) if self.rank == 0 else (None, [], [])
        try:
            # the other ranks' log files in OUTPUT_DIR are opened once the process group exists (_run), when rank 0
            # has claimed the folder: a refused run's other ranks write nothing into the running run's folder
            setup_logger(cfg.OUTPUT_DIR if self.rank == 0 else None, self.rank)
            if rotated:
                logger.info("an earlier run's files moved aside: %s", ", ".join(rotated))
            if removed:
                logger.warning("removed %d temporary file(s) left by an interrupted run: %s", len(removed),
                               ", ".join(removed))
            if self.ml is None:
                self.ml = MLPerfLogger(os.path.join(cfg.OUTPUT_DIR, "mlperf_log.txt"), rank=self.rank,
                                       ruleset=self.options.ruleset)
            return self._logged_run()
        finally:
            if lock is not None:
                lock.close()

    def _logged_run(self):
        ml = self.ml
        clean = False
        try:
            ml.submission_info(num_nodes=comm.launch_nodes())
            ml.cache_clear()
            outcome = self._run()
            clean = True
            return outcome
        except Exception as e:
            lost = comm.as_rank_lost(e)  # while the process group (and its heartbeats) still exist
            if lost is not None:
                logging.getLogger(TRACEBACK_LOGGER).error("%s", lost, exc_info=e)
                raise lost from e
            raise
        finally:
            if "run_start" in ml.logged and "run_stop" not in ml.logged:
                try:
                    ml.run_stop(success=False)
                except OSError:  # the log's own file failed: the error in flight already says so
                    pass
            ml.close()
            if clean:
                comm.synchronize()  # no rank tears the process group down while another still uses it
            comm.destroy()

    def _run(self):
        opts, ml = self.options, self.ml
        ml.init_start()
        rank, world, _, device = comm.init_distributed(opts.local_rank, self.cfg.MODEL.DEVICE,
                                                       opts.timeout or self.cfg.DISTRIBUTED_TIMEOUT, side_group=True)
        if rank != 0:
            setup_logger(self.cfg.OUTPUT_DIR, rank)  # rank 0 has claimed the folder: its rank log there
        if device.type == "cpu" and keep_freed_blocks():  # no page faults for each large tensor (utils/host_memory)
            logger.info("host allocator: glibc %s malloc serves large blocks from its heap and keeps freed ones",
                        glibc_version())
        seed = comm.broadcast_object(opts.seed if opts.seed is not None else int.from_bytes(os.urandom(4), "little"))
        _seed_everything(seed, rank)
        cfg = self.cfg = resolve(self.cfg, device, world)  # every auto value fixed, and logged, once
        logger.info("config:\n%s", cfg.dump())
        ignored = ignored_settings(cfg)
        if ignored:
            logger.warning("these config values have no effect on this model and are ignored: %s", ", ".join(ignored))

        static = cfg.COMPILE  # a compiled step: static batches (fixed shapes), fused SGD
        model = build_detection_model(cfg).to(device)
        ml.weights_initialization()
        optimizer = make_optimizer(cfg, model, fused=True if static else None)
        scheduler = make_lr_scheduler(cfg, optimizer)
        scaler = make_grad_scaler(device, cfg.DTYPE)
        checkpointer = DetectronCheckpointer(cfg, model, optimizer, scheduler, cfg.OUTPUT_DIR,
                                             save_to_disk=rank == 0, logger=logger, scaler=scaler)
        start_iter, seed, rng_states = self._load_weights(checkpointer, seed)
        ml.seed(seed)
        logger.info("world size %d, device %s, seed %d", world, device, seed)
        if world > 1:
            model = torch.nn.parallel.DistributedDataParallel(
                model, device_ids=[device.index] if device.type == "cuda" else None, broadcast_buffers=False)
        forward = None
        if static:  # compiled before the clock starts, on synthetic batches (engine.compile)
            per_gpu = cfg.SOLVER.IMS_PER_BATCH // world
            forward = CompiledForward(model, cfg.COMPILE_MODE, cfg.COMPILE_BACKEND, batch_size=per_gpu)
            forward.warm_up(static_sizes(cfg, per_gpu), per_gpu, device, cfg.DATALOADER.MAX_ANNOTATIONS_PER_IMAGE,
                            autocast_dtype(device, cfg.DTYPE), polygon_slots(cfg))
        ml.hyperparameters(cfg, world)
        comm.synchronize()
        ml.init_stop()

        ml.run_start(resumed_from=start_iter if opts.resume else None)
        run_start = time.time()
        train_loader = make_device_loader(cfg, make_data_loader(cfg, is_train=True, num_replicas=world, rank=rank,
                                                                start_iter=start_iter, seed=seed, static=static),
                                          device, static=static)
        test_loader = make_device_loader(cfg, make_data_loader(cfg, is_train=False, num_replicas=world,
                                                               rank=rank)[0], device, is_train=False)
        train_set, test_set = train_loader.dataset, test_loader.dataset
        check_num_classes(cfg.MODEL.ROI_BOX_HEAD.NUM_CLASSES, train_set, [test_set])
        ml.dataset_sizes(len(train_set), len(test_set))
        ipe = iterations_per_epoch(len(train_set), cfg.SOLVER.IMS_PER_BATCH)
        logger.info("%d training images, %d iterations per epoch, up to %d iterations", len(train_set), ipe,
                    cfg.SOLVER.MAX_ITER)

        background = BackgroundScorer(COCOScorer.for_dataset(test_set, backend=opts.coco_backend or
                                                             cfg.TEST.COCO_BACKEND, workers=cfg.TEST.COCO_WORKERS),
                                      asynchronous=not opts.sync_eval,
                                      niceness=10 if device.type == "cuda" else 0)  # rank 0's host thread first
        evaluator = COCOEvaluator(test_set, background, mask_method=cfg.TEST.MASK_ENCODING)
        bare_model = model.module if hasattr(model, "module") else model
        evaluation = EvaluationHook(evaluator, lambda: run_inference(bare_model, test_loader, evaluator, device,
                                                                     cfg.DTYPE), ml, per_epoch=cfg.PER_EPOCH_EVAL,
                                    poll=background.poll, targets=self.targets)
        protocol = MLPerfStopHook(self.targets, ml)
        hooks = [ProfilerHook(rank), MetricsHook(20, reduce=not cfg.DISABLE_REDUCED_LOGGING), protocol, evaluation]
        if cfg.SAVE_CHECKPOINTS:  # last: an epoch end's checkpoint holds the state after its evaluation, as the
            #                       next iteration starts from it; the final one is written after run_stop
            hooks.append(CheckpointHook(checkpointer, cfg.SOLVER.CHECKPOINT_PERIOD, seed=seed,
                                        evaluation=evaluation))
        trainer = Trainer(model, optimizer, scheduler, train_loader, device, cfg.SOLVER.MAX_ITER, ipe,
                          dtype=cfg.DTYPE, start_iter=start_iter, hooks=hooks,
                          clip_grad_norm=cfg.SOLVER.CLIP_GRAD_NORM, scaler=scaler, forward=forward)
        if rng_states is not None:
            if len(rng_states) == world:
                set_rng_state(rng_states[rank])  # last, so nothing after it draws: the next iteration draws as it did
            else:
                logger.warning("the checkpoint was written by %d processes, this run has %d: each process's share "
                               "of the data differs from the interrupted run's, and their random states are not "
                               "restored (the batches and draws are not those of an uninterrupted run)",
                               len(rng_states), world)
        t0 = time.time()
        try:
            trainer.train()
        except EvaluationFailed:
            if evaluation.failure is not None:  # rank 0: its own error, with its own type and message
                raise evaluation.failure from None
            raise
        finally:
            background.shutdown()
        end = protocol.stopped_at or time.time()  # run_stop: the final checkpoint and the scorer's shutdown after it
        return self.outcome(trainer, protocol, evaluation, background.asynchronous, train_seconds=end - t0,
                            run_seconds=end - run_start)

    def outcome(self, trainer, protocol, evaluation, background_scoring, train_seconds=0.0, run_seconds=0.0):
        """The run's outcome, read from its hooks and the loop's store."""
        eval_seconds = evaluation.eval_seconds
        return RunOutcome(
            success=protocol.target_met, converged_epoch=protocol.converged_epoch, targets=self.targets,
            scores=list(evaluation.scores), images=trainer.storage.images_seen,
            train_seconds=train_seconds - sum(eval_seconds), run_seconds=run_seconds,
            eval_seconds=list(eval_seconds), scoring_seconds=[s.seconds for s in evaluation.scores],
            background_scoring=background_scoring)

    def _load_weights(self, checkpointer, seed):
        """``--resume`` (everything, exactly) or MODEL.WEIGHT (weights only); returns the iteration to start
        from, the seed, and the saved random states (or None)."""
        opts = self.options
        if not opts.resume:
            checkpointer.load_weights(self.cfg.MODEL.WEIGHT)
            return 0, seed, None
        resumed = checkpointer.resume(opts.resume)
        iteration = int(resumed.get("iteration", 0))
        for epoch, bbox, segm in resumed.get("scores") or []:  # the epochs scored before it was written
            if meets_targets(self.targets, bbox, segm):
                raise WeightsError(f"checkpoint '{opts.resume}' was written after epoch {int(epoch)} reached the "
                                   f"targets (box AP {bbox:.4f}, mask AP {segm:.4f}; its eval_accuracy is in that "
                                   "run's log): the run converged, there is nothing to resume")
        if iteration >= self.cfg.SOLVER.MAX_ITER:
            raise ConfigError(f"SOLVER.MAX_ITER {self.cfg.SOLVER.MAX_ITER}: the checkpoint '{opts.resume}' is at "
                              f"iteration {iteration} already, nothing is left to train (raise SOLVER.MAX_ITER)")
        saved_seed = resumed.get("seed")
        if saved_seed is not None and saved_seed != seed:
            if opts.seed is None:
                seed = int(saved_seed)  # the data order of the interrupted run continues
                _seed_everything(seed, self.rank)  # and every draw follows the seed the log states (the saved
                #                                    random states, restored later, replace these where they fit)
            else:
                logger.warning("--seed %d differs from the checkpoint's seed %d: the data order will not continue "
                               "the interrupted run's", opts.seed, saved_seed)
        return iteration, seed, resumed.get("rng_states")


def process_seed(seed, rank):
    """The seed of ``rank``'s Python, numpy and torch generators in the run with ``seed``: a mix of both (with
    ``seed + rank``, rank 1 of the run with seed s drew what rank 0 of the run with seed s + 1 drew)."""
    return derived_seed(PROCESS, seed, rank) % 2 ** 32


def _seed_everything(seed, rank):
    local = process_seed(seed, rank)
    random.seed(local)
    np.random.seed(local)
    torch.manual_seed(local)
