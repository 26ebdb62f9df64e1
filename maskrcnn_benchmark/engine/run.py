"""One MLPerf training run: NVIDIA v0.7's order of events and MLPerf log, on this package's engine.

:class:`MLPerfRun` owns the run: its MLPerf log (every key from the submission lines to ``run_stop``), when
evaluation happens, the decision to stop, and the outcome (:class:`RunOutcome`). The training loop
(:class:`~maskrcnn_benchmark.engine.trainer.Trainer`) only trains; the run takes part in it as a hook, and like
every hook it reads and writes the loop's shared store (``trainer.storage``).

Order of events (the reference's): submission info, cache_clear, init_start; model, optimizer and weights;
hyperparameter keys; init_stop and run_start; data loaders (timed, as NVIDIA does); training, with blocking
inference at every epoch end and COCO scoring in a background process, until both targets are met; run_stop.

The stop decision: scores arrive on rank 0 only, but every rank must stop at the same iteration. Rank 0's state
(scores pending, target met, its own work failed) travels to all ranks in a non-blocking all-reduce that is read one
iteration later (:class:`StopDecision`), and only while a score is pending; epoch ends, which synchronize anyway
(the gather of the detections), agree at once.
"""
import logging
import os
import random
import time
from dataclasses import dataclass, field
from typing import List, Optional

import numpy as np
import torch

from ..config import given_keys, ignored_settings
from ..data import check_num_classes, make_data_loader, make_device_loader, num_classes_from_data, static_sizes
from ..data.build import NUM_CLASSES_KEY
from ..evaluation import BackgroundEvaluator, COCOEvaluator, COCOScorer, run_inference
from ..modeling import build_detection_model
from ..solver import make_lr_scheduler, make_optimizer
from ..utils import comm
from ..utils.amp import autocast_dtype, make_grad_scaler
from ..utils.checkpoint import DetectronCheckpointer
from ..utils.logger import TRACEBACK_LOGGER, setup_logger
from ..utils.mlperf_logger import MLPerfLogger
from ..utils.rng import set_rng_state
from ..utils.run_folder import claim_output_folder
from .compile import CompiledForward, compile_enabled, compile_mode
from .events import EpochScores
from .preflight import check_before_init
from .hooks import CheckpointHook, MetricsHook, ProfilerHook
from .trainer import HookBase, Trainer, iterations_per_epoch

logger = logging.getLogger(__name__)


class EvaluationFailed(RuntimeError):
    """Work that only rank 0 does (turning detections into COCO results, scoring) failed; every rank stops."""


@dataclass
class RunOptions:
    """What the command line adds to the config."""
    seed: Optional[int] = None         # master seed; None: random, logged
    resume: str = ""                   # checkpoint of this trainer to continue exactly
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
    run_seconds: float = 0.0           # run_start to the end of training: the time to train
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


class StopDecision:
    """Rank 0's view of the run, agreed by all ranks: bits of one small integer (all-reduce MAX; only rank 0
    contributes, so the maximum is rank 0's value)."""

    PENDING, TARGET_MET, FAILED = 1, 2, 4

    def __init__(self):
        self._flag = comm.AsyncFlag()
        self._exchanging = False  # an epoch's scores are pending: exchange every iteration

    def agree(self, state):
        """Blocking: every rank gets rank 0's ``state`` now (epoch ends, the end of training)."""
        code = self._flag.agree(state)
        self._exchanging = bool(code & self.PENDING)
        return code

    def exchange(self, state):
        """Non-blocking while scores are pending: returns rank 0's state of the previous iteration."""
        if not self._exchanging:
            return 0
        code = self._flag.exchange(state)
        if code is None:  # the first post since the last agreement: nothing to read yet
            return 0
        self._exchanging = bool(code & self.PENDING)
        return code

    def close(self):
        self._flag.close()


class MLPerfRun(HookBase):
    """Build, train and evaluate one MLPerf run from ``cfg``; ``run()`` returns its :class:`RunOutcome`.

    The run owns its output folder (rank 0 claims ``cfg.OUTPUT_DIR``: one run at a time, fresh logs, see
    :mod:`~maskrcnn_benchmark.utils.run_folder`), its text log (``log.txt``) and its MLPerf log
    (``mlperf_log.txt`` on rank 0, and stdout). ``rank`` defaults to the launcher's (RANK, SLURM_PROCID).
    """

    def __init__(self, cfg, options=None, rank=None, mllogger=None):
        self.cfg = cfg
        self.options = options or RunOptions()
        if rank is None:
            rank = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")) or 0)
        self.rank = rank
        self.ml = mllogger
        self.targets = (cfg.MLPERF.MIN_BBOX_MAP, cfg.MLPERF.MIN_SEGM_MAP)
        self._evaluator = None         # BackgroundEvaluator
        self._infer = None             # runs inference of the current model into the evaluator
        self._pending = []             # ScoresFutures, oldest first (rank 0)
        self._open_epoch = None
        self._decision = None

    # ================================================================================================ the run
    def run(self):
        cfg = self.cfg
        lock, rotated, removed = claim_output_folder(cfg.OUTPUT_DIR) if self.rank == 0 else (None, [], [])
        try:
            setup_logger(cfg.OUTPUT_DIR, self.rank)
            if rotated:
                logger.info("previous logs moved aside: %s", ", ".join(rotated))
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
            ml.submission_info(num_nodes=int(os.environ.get("SLURM_NNODES", "1")))
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
                    ml.end("run_stop", metadata={"status": "aborted"})
                except OSError:  # the log's own file failed: the error in flight already says so
                    pass
            ml.close()
            if clean:
                comm.synchronize()  # no rank tears the process group down while another still uses it
            comm.destroy()

    def _run(self):
        cfg, opts, ml = self.cfg, self.options, self.ml
        world, per_node = comm.launch_sizes()
        check_before_init(cfg, world, per_node)  # a bad path or batch ends the run here, not after compiling
        ml.start("init_start")
        rank, world, _, device = comm.init_distributed(opts.local_rank, cfg.MODEL.DEVICE,
                                                       opts.timeout or cfg.DISTRIBUTED_TIMEOUT)
        seed = comm.broadcast_object(opts.seed if opts.seed is not None else int.from_bytes(os.urandom(4), "little"))
        _seed_everything(seed, rank)
        logger.info("config:\n%s", cfg.dump())
        ignored = ignored_settings(cfg)
        if ignored:
            logger.warning("these config values have no effect on this model and are ignored: %s", ", ".join(ignored))

        resolve_num_classes(cfg)
        static = compile_enabled(cfg, device)  # a compiled step: fixed shapes, fused SGD
        model = build_detection_model(cfg).to(device)
        ml.weights_initialization()
        optimizer = make_optimizer(cfg, model, fused=True if static else None)
        scheduler = make_lr_scheduler(cfg, optimizer)
        scaler = make_grad_scaler(device, cfg.DTYPE)
        checkpointer = DetectronCheckpointer(cfg, model, optimizer, scheduler, cfg.OUTPUT_DIR,
                                             save_to_disk=rank == 0, logger=logger, scaler=scaler)
        start_iter, seed, rng_states = self._load_weights(checkpointer, seed)
        ml.event("seed", seed)
        logger.info("world size %d, device %s, seed %d", world, device, seed)
        if world > 1:
            model = torch.nn.parallel.DistributedDataParallel(
                model, device_ids=[device.index] if device.type == "cuda" else None, broadcast_buffers=False)
        forward = None
        if static:  # compiled before the clock starts, on synthetic batches (engine.compile)
            forward = CompiledForward(model, compile_mode(cfg, device), cfg.COMPILE_BACKEND,
                                      batch_size=cfg.SOLVER.IMS_PER_BATCH // world)
            forward.warm_up(static_sizes(cfg), cfg.SOLVER.IMS_PER_BATCH // world, device,
                            cfg.DATALOADER.MAX_ANNOTATIONS_PER_IMAGE, autocast_dtype(device, cfg.DTYPE))
        ml.hyperparameters(cfg, world)
        comm.synchronize()
        ml.end("init_stop")

        ml.start("run_start")
        run_start = time.time()
        train_loader = make_device_loader(cfg, make_data_loader(cfg, is_train=True, num_replicas=world, rank=rank,
                                                                start_iter=start_iter, seed=seed, static=static),
                                          device, static=static)
        test_loader = make_device_loader(cfg, make_data_loader(cfg, is_train=False, num_replicas=world,
                                                               rank=rank)[0], device, is_train=False)
        train_set, test_set = train_loader.dataset, test_loader.dataset
        check_num_classes(cfg.MODEL.ROI_BOX_HEAD.NUM_CLASSES, train_set, [test_set])
        ml.event("train_samples", len(train_set))
        ml.event("eval_samples", len(test_set))
        ipe = iterations_per_epoch(len(train_set), cfg.SOLVER.IMS_PER_BATCH)
        logger.info("%d training images, %d iterations per epoch, up to %d iterations", len(train_set), ipe,
                    cfg.SOLVER.MAX_ITER)

        scorer = COCOScorer.for_dataset(test_set, backend=opts.coco_backend or cfg.TEST.COCO_BACKEND,
                                        workers=cfg.TEST.COCO_WORKERS)
        evaluator = BackgroundEvaluator(COCOEvaluator(test_set, scorer, mask_method=cfg.TEST.MASK_ENCODING),
                                        asynchronous=not opts.sync_eval)
        bare_model = model.module if hasattr(model, "module") else model
        self.evaluate_with(evaluator, lambda: run_inference(bare_model, test_loader, evaluator, device, cfg.DTYPE))
        hooks = [ProfilerHook(rank), MetricsHook(20, reduce=not cfg.DISABLE_REDUCED_LOGGING), self]
        if cfg.SAVE_CHECKPOINTS:
            hooks.insert(1, CheckpointHook(checkpointer, cfg.SOLVER.CHECKPOINT_PERIOD, seed=seed))
        trainer = Trainer(model, optimizer, scheduler, train_loader, device, cfg.SOLVER.MAX_ITER, ipe,
                          dtype=cfg.DTYPE, start_iter=start_iter, hooks=hooks,
                          clip_grad_norm=cfg.SOLVER.CLIP_GRAD_NORM, scaler=scaler, forward=forward)
        if rng_states is not None:
            if len(rng_states) == world:
                set_rng_state(rng_states[rank])  # last, so nothing after it draws: the next iteration draws as it did
            else:
                logger.warning("the checkpoint holds the random state of %d processes, this run has %d: not "
                               "restored", len(rng_states), world)
        t0 = time.time()
        trainer.train()
        return self.outcome(trainer.storage, train_seconds=time.time() - t0, run_seconds=time.time() - run_start)

    def evaluate_with(self, evaluator, infer):
        """Evaluate through ``evaluator`` (a :class:`~maskrcnn_benchmark.evaluation.BackgroundEvaluator`) after
        ``infer()`` has run the model over the test set into it."""
        self._evaluator, self._infer = evaluator, infer

    def outcome(self, storage, train_seconds=0.0, run_seconds=0.0):
        """The run's outcome, read from the store."""
        eval_seconds = storage.timings.get("evaluation", [])
        return RunOutcome(
            success=storage.target_met, converged_epoch=storage.converged_epoch, targets=self.targets,
            scores=list(storage.scores), images=storage.images_seen,
            train_seconds=train_seconds - sum(eval_seconds), run_seconds=run_seconds,
            eval_seconds=list(eval_seconds), scoring_seconds=[s.seconds for s in storage.scores],
            background_scoring=getattr(self._evaluator, "asynchronous", False))

    def _load_weights(self, checkpointer, seed):
        """``--resume`` (everything, exactly) or MODEL.WEIGHT (weights only); returns the iteration to start
        from, the seed, and the saved random states (or None)."""
        opts = self.options
        if not opts.resume:
            checkpointer.load_weights(self.cfg.MODEL.WEIGHT)
            return 0, seed, None
        resumed = checkpointer.resume(opts.resume)
        saved_seed = resumed.get("seed")
        if saved_seed is not None and saved_seed != seed:
            if opts.seed is None:
                seed = int(saved_seed)  # the data order of the interrupted run continues
            else:
                logger.warning("--seed %d differs from the checkpoint's seed %d: the data order will not continue "
                               "the interrupted run's", opts.seed, saved_seed)
        return int(resumed.get("iteration", 0)), seed, resumed.get("rng_states")

    # ======================================================================= the MLPerf protocol, as a hook
    def _start_epoch(self, epoch):
        self.ml.start("block_start", metadata={"first_epoch_num": epoch, "epoch_count": 1})
        self.ml.start("epoch_start", metadata={"epoch_num": epoch})
        self._open_epoch = epoch

    def _stop_epoch(self):
        if self._open_epoch is None:
            return
        self.ml.end("epoch_stop", metadata={"epoch_num": self._open_epoch})
        self.ml.end("block_stop", metadata={"first_epoch_num": self._open_epoch})
        self._open_epoch = None

    def _record(self, epoch, scores):
        storage = self.trainer.storage
        entry = storage.put_scores(epoch, scores["bbox"]["stats"]["AP"], scores["segm"]["stats"]["AP"],
                                   scores.get("backend", "?"), scores.get("seconds", 0.0))
        self.ml.event("eval_accuracy", {"BBOX": entry.bbox, "SEGM": entry.segm}, metadata={"epoch_num": epoch})
        logger.info("epoch %d: box AP %.4f, mask AP %.4f (targets %.3f / %.3f; scored by %s in %.1f s)",
                    epoch, entry.bbox, entry.segm, *self.targets, entry.backend, entry.seconds)
        if storage.converged_epoch is None and entry.bbox >= self.targets[0] and entry.segm >= self.targets[1]:
            storage.converged_epoch = epoch

    def _rank0(self, fn, *args):
        """Rank-0-only work. A failure is kept in the store and becomes FAILED in the next decision, so that
        every rank stops at the same iteration instead of the others waiting for rank 0 in a collective."""
        storage = self.trainer.storage
        if storage.failure is None:
            try:
                fn(*args)
            except Exception as e:  # noqa: BLE001
                storage.failure = e

    def _collect(self):
        """Rank 0: record the scores that arrived, oldest first. One pipe check, which also notices (and
        restarts) a scoring process that died."""
        self._evaluator.poll()
        while self._pending and self._pending[0].done():
            future = self._pending.pop(0)
            self._record(future.epoch, future.result())

    def _state(self):
        """Rank 0's state for the decision (0 on the other ranks)."""
        if not comm.is_main_process():
            return 0
        storage = self.trainer.storage
        if storage.failure is not None:
            return StopDecision.FAILED
        if storage.converged_epoch is not None:
            return StopDecision.TARGET_MET
        return StopDecision.PENDING if self._pending else 0

    def _act(self, code):
        storage = self.trainer.storage
        if code & StopDecision.FAILED:
            failure = storage.failure
            if failure is not None:  # rank 0: its own error, with its own type and message
                raise failure
            raise EvaluationFailed("evaluation failed on rank 0 (its log says why)")
        if code & StopDecision.TARGET_MET:
            storage.target_met = True
            storage.request_stop("target reached")
            return True
        return False

    def _run_eval(self, epoch):
        t0 = time.perf_counter()
        self.ml.start("eval_start", metadata={"epoch_num": epoch})
        self._infer()
        future = self._evaluator.evaluate(epoch)
        if future is not None:  # rank 0
            self._pending.append(future)
        self.ml.end("eval_stop", metadata={"epoch_num": epoch})
        self.trainer.storage.put_timing("evaluation", time.perf_counter() - t0)

    def before_train(self):
        self._decision = StopDecision()
        self._start_epoch(self.trainer.storage.epoch_of(self.trainer.start_iter + 1))

    def after_step(self):
        s = self.trainer.storage
        epoch_end = s.is_epoch_end()
        if epoch_end:
            self._stop_epoch()
            if self.cfg.PER_EPOCH_EVAL or s.iter >= s.max_iter:
                self._run_eval(s.epoch)
        if comm.is_main_process():
            self._rank0(self._collect)
        code = self._decision.agree(self._state()) if epoch_end else self._decision.exchange(self._state())
        if self._act(code):
            return
        if epoch_end and s.iter < s.max_iter:
            self._start_epoch(s.epoch + 1)

    def after_train(self):
        t = self.trainer
        try:
            if t.error is None and not t.storage.target_met:
                if comm.is_main_process():
                    self._rank0(lambda: [self._record(f.epoch, f.result()) for f in self._pending])
                    self._pending = []
                code = self._decision.agree(self._state())
                self._act(code)
            elif t.error is None and self._decision is not None:
                self._decision.close()  # target met: wait for the exchange in flight (after an error, wait for
                #                         nothing: another rank may be gone)
        finally:
            self._stop_epoch()
            if self._evaluator is not None:
                self._evaluator.shutdown()
            ok = t.storage.target_met and t.error is None and t.storage.failure is None
            self.ml.end("run_stop", metadata={"status": "success" if ok else "aborted"})


def resolve_num_classes(cfg, is_train=True):
    """``MODEL.ROI_BOX_HEAD.NUM_CLASSES`` when the config does not set it: the categories of the training (or
    test) data + 1, read from the annotation files' category lists and logged once. A value the config sets is
    kept, and checked against the datasets when they are built (:func:`~maskrcnn_benchmark.data.
    check_num_classes`): the MLPerf configs set 81, so an MLPerf run reads no data before run_start."""
    if NUM_CLASSES_KEY in given_keys(cfg):
        return cfg.MODEL.ROI_BOX_HEAD.NUM_CLASSES
    n, what = num_classes_from_data(cfg, is_train)
    frozen = cfg.is_frozen()
    cfg.defrost()
    cfg.MODEL.ROI_BOX_HEAD.NUM_CLASSES = n
    if frozen:
        cfg.freeze()
    logger.info("%s not set: %d, from the %s data (%s, + background)", NUM_CLASSES_KEY, n,
                "training" if is_train else "test", what)
    return n


def _seed_everything(seed, rank):
    local = (seed + rank) % 2 ** 32
    random.seed(local)
    np.random.seed(local)
    torch.manual_seed(local)
