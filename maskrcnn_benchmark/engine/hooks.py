"""Training hooks: metric logging, periodic checkpoints, and the MLPerf epoch/eval/early-stop protocol."""
import logging
import time

from ..utils import comm
from ..utils.rng import get_rng_state
from .trainer import HookBase

logger = logging.getLogger(__name__)


class MetricsHook(HookBase):
    """Every ``period`` iterations (rank 0): losses (averaged over ranks unless ``reduce`` is False, NVIDIA's
    DISABLE_REDUCED_LOGGING: rank 0's own losses, no collective), LR, images/s. Plain log lines, never inside an
    MLPerf line and never a progress bar."""

    def __init__(self, period=20, reduce=True):
        self.period = period
        self.reduce = reduce
        self._t = None
        self._images = 0

    def before_train(self):
        self._t = time.perf_counter()
        self._images = self.trainer.images_seen

    def after_step(self):
        t = self.trainer
        if t.iter % self.period and t.iter != t.max_iter:
            return
        losses = comm.reduce_dict(t.loss_dict) if self.reduce else t.loss_dict
        now = time.perf_counter()
        ips = (t.images_seen - self._images) / max(now - self._t, 1e-9)
        self._t, self._images = now, t.images_seen
        if comm.is_main_process():
            total = sum(v.item() for v in losses.values())
            parts = "  ".join(f"{k}: {v.item():.4f}" for k, v in sorted(losses.items()))
            lr = t.optimizer.param_groups[0]["lr"]
            logger.info("iter: %d  epoch: %d  loss: %.4f  %s  lr: %.6f  images/s: %.2f",
                        t.iter, t.epoch, total, parts, lr, ips)


class CheckpointHook(HookBase):
    """Every ``period`` iterations (and at the end) rank 0 saves model, optimizer, LR schedule, gradient scaler,
    the iteration and every rank's random-number state (gathered), so ``--resume`` continues exactly."""

    def __init__(self, checkpointer, period, save_final=True, seed=None):
        self.checkpointer = checkpointer
        self.period = period
        self.save_final = save_final
        self.seed = seed

    def _save(self, name):
        states = comm.all_gather(get_rng_state())
        if comm.is_main_process():
            self.checkpointer.save(name, iteration=self.trainer.iter, seed=self.seed, rng_states=states)

    def after_step(self):
        it = self.trainer.iter
        if self.period > 0 and it % self.period == 0:
            self._save(f"model_{it:07d}")

    def after_train(self):
        if self.save_final and self.trainer.error is None:
            self._save("model_final")


GO_ON, TARGET_MET, FAILED, NOTHING_PENDING = 0, 1, 2, 4  # only rank 0's value matters (all-reduce MAX)


class MLPerfHook(HookBase):
    """Epoch boundaries, per-epoch evaluation and early stop, logged with the MLPerf keys.

    At each epoch end: ``epoch_stop``/``block_stop``, then ``eval_start``, distributed inference
    (``evaluate(epoch)`` returns the gathered detections on rank 0; blocking on every rank) and ``eval_stop``;
    rank 0 hands the detections to the scorer (asynchronous by default). After every iteration rank 0 collects
    finished scores (one ``done()`` check), logs ``eval_accuracy`` and decides whether both targets are met. The
    decision reaches every rank through a non-blocking all-reduce (:class:`~maskrcnn_benchmark.utils.comm.
    AsyncFlag`): all ranks stop together at the end of the iteration after the one in which the target epoch's
    scores arrived (the same iteration with one process, or when scoring is synchronous). The exchange only
    runs while a score is pending (from an epoch end until rank 0 has the scores), not every iteration of the
    run: it costs a small all-reduce per iteration (``bench/stop_signal.py``). A failure of
    rank-0-only work (COCO conversion, scoring) travels the same way and aborts every rank, instead of leaving
    the others blocked. ``run_stop`` closes the run with status success or aborted.
    """

    def __init__(self, mllogger, evaluate, scorer, min_bbox_map, min_segm_map, per_epoch_eval=True):
        self.ml = mllogger
        self.evaluate = evaluate
        self.scorer = scorer
        self.targets = (min_bbox_map, min_segm_map)
        self.per_epoch_eval = per_epoch_eval
        self.success = False
        self.converged_epoch = None
        self.stop_iteration = None
        self.eval_seconds = []  # blocking time (eval_start to eval_stop) per evaluated epoch
        self.scoring_seconds = []
        self.accuracies = []  # (epoch, bbox, segm)
        self._open_epoch = None
        self._failure = None
        self._flag = None
        self._polling = False  # every rank: an epoch's scores are pending

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

    def _record(self, finished):
        for epoch, scores in finished:
            bbox = scores["bbox"]["stats"]["AP"]
            segm = scores["segm"]["stats"]["AP"]
            self.accuracies.append((epoch, bbox, segm))
            if "seconds" in scores:
                self.scoring_seconds.append(scores["seconds"])
            self.ml.event("eval_accuracy", {"BBOX": bbox, "SEGM": segm}, metadata={"epoch_num": epoch})
            logger.info("epoch %d: box AP %.4f, mask AP %.4f (targets %.3f / %.3f; scored by %s in %.1f s)",
                        epoch, bbox, segm, *self.targets, scores.get("backend", "?"), scores.get("seconds", 0.0))
            if not self.success and bbox >= self.targets[0] and segm >= self.targets[1]:
                self.success = True
                self.converged_epoch = epoch

    def _rank0(self, fn, *args):
        """Rank-0-only work; an exception is kept and becomes FAILED in the next decision."""
        if self._failure is None:
            try:
                fn(*args)
            except Exception as e:  # noqa: BLE001
                self._failure = e

    def _local_code(self):
        if not comm.is_main_process():
            return GO_ON
        if self._failure is not None:
            return FAILED
        if self.success:
            return TARGET_MET
        return GO_ON if self.scorer.pending else NOTHING_PENDING

    def _act(self, code):
        if code == NOTHING_PENDING:
            return False
        if code == FAILED:
            raise RuntimeError(f"evaluation failed on rank 0: {self._failure or 'see rank 0'}")
        if code == TARGET_MET:
            self.success = True  # rank 0 decided; every rank now agrees
            self.stop_iteration = self.trainer.iter
            self.trainer.request_stop()
            return True
        return False

    def before_train(self):
        self._flag = comm.AsyncFlag()
        self._start_epoch(self.trainer.start_iter // self.trainer.iters_per_epoch + 1)

    def _run_eval(self, epoch):
        t0 = time.perf_counter()
        self.ml.start("eval_start", metadata={"epoch_num": epoch})
        detections = self.evaluate(epoch)
        if comm.is_main_process():
            self._rank0(self.scorer.submit, epoch, detections)
            if not self.scorer.asynchronous:
                self._rank0(lambda: self._record(self.scorer.poll()))
        self.ml.end("eval_stop", metadata={"epoch_num": epoch})
        self.eval_seconds.append(time.perf_counter() - t0)

    def after_step(self):
        t = self.trainer
        epoch_end = t.iter % t.iters_per_epoch == 0 or t.iter >= t.max_iter
        if epoch_end:
            self._stop_epoch()
            if self.per_epoch_eval or t.iter >= t.max_iter:
                self._run_eval(t.epoch)
        if comm.is_main_process() and self.scorer.pending:
            self._rank0(lambda: self._record(self.scorer.poll()))
        if epoch_end:
            # epoch ends are synchronization points anyway (the gather of the detections): decide there at once
            code = self._flag.agree(self._local_code())
            self._polling = code == GO_ON
        elif self._polling:
            code = self._flag.exchange(self._local_code())
            self._polling = code == GO_ON
        else:
            code = GO_ON
        if self._act(code):
            return
        if epoch_end and t.iter < t.max_iter:
            self._start_epoch(t.epoch + 1)

    def after_train(self):
        t = self.trainer
        try:
            if t.error is None and not self.success:
                if comm.is_main_process():
                    self._rank0(lambda: self._record(self.scorer.wait_all()))
                code = self._flag.agree(self._local_code())
                if code == FAILED:
                    raise RuntimeError(f"evaluation failed on rank 0: {self._failure or 'see rank 0'}")
                self.success = code == TARGET_MET
            elif t.error is None and self._flag is not None:
                self._flag.close()  # never wait on other ranks after an error: one of them may be gone
        finally:
            self._stop_epoch()
            self.scorer.shutdown()
            status = "success" if (self.success and t.error is None and self._failure is None) else "aborted"
            self.ml.end("run_stop", metadata={"status": status})


class ProfilerHook(HookBase):
    """``PROFILE=torch|memory`` (via MASKRCNN_PROFILE): a torch.profiler trace or a per-iteration memory CSV."""

    def __init__(self, rank=0):
        from ..utils import profiling

        self.profiler = profiling.from_env(rank=rank)

    def after_step(self):
        self.profiler.step(self.trainer.iter)

    def after_train(self):
        self.profiler.close()
