"""General training hooks: metric logging, periodic checkpoints, profiling. Each reads the loop's shared
:class:`~maskrcnn_benchmark.engine.events.EventStorage`; the hooks of the MLPerf protocol (evaluation, epoch
marks, the stop decision) are in :mod:`~maskrcnn_benchmark.engine.mlperf_hooks`."""
import datetime
import logging
import time

import torch

from ..utils import comm
from ..utils.errors import NonFiniteLossError
from ..utils.fileio import WriteError
from ..utils.rng import get_rng_state
from ..utils.signals import Stopped
from .trainer import HookBase

logger = logging.getLogger(__name__)


class MetricsHook(HookBase):
    """Every ``period`` iterations (rank 0): losses (averaged over ranks unless ``reduce`` is False, NVIDIA's
    DISABLE_REDUCED_LOGGING: rank 0's own losses, no collective), LR, images/s (over the iterations since the
    last line, an epoch end's evaluation included), the float16 loss scale, the time left to MAX_ITER at the run's
    mean time per iteration (the reference's ``eta``) and on CUDA the peak memory allocated (its ``max mem``, MB:
    the allocator's own counter, no device read). Plain log lines, never inside an MLPerf line and never a
    progress bar."""

    def __init__(self, period=20, reduce=True):
        self.period = period
        self.reduce = reduce
        self._t = None
        self._images = 0
        self._start = None

    def before_train(self):
        self._t = self._start = time.perf_counter()
        self._images = self.trainer.storage.images_seen

    def after_step(self):
        s = self.trainer.storage
        if s.iter % self.period and s.iter != s.max_iter:
            return
        latest = s.latest("loss")
        losses = comm.reduce_dict(latest) if self.reduce else latest
        now = time.perf_counter()
        ips = (s.images_seen - self._images) / max(now - self._t, 1e-9)
        self._t, self._images = now, s.images_seen
        if comm.is_main_process():
            values = {k: float(v) for k, v in sorted(losses.items())}
            parts = "  ".join(f"{k}: {v:.4f}" for k, v in values.items())
            # a device tensor with the fused SGD: read once here (left to the log record, each handler that
            # formats it would read it again, and a count of the line's reads would miss it when none does)
            lr = float(self.trainer.optimizer.param_groups[0]["lr"])
            scaler = getattr(self.trainer, "scaler", None)
            # float16: the GradScaler's scale (it halves at each skipped step; make gpu-check counts them)
            scale = f"  loss scale: {scaler.get_scale():g}" if scaler is not None and scaler.is_enabled() else ""
            done = s.iter - self.trainer.start_iter
            eta = datetime.timedelta(seconds=int((now - self._start) / max(done, 1) * (s.max_iter - s.iter)))
            device = getattr(self.trainer, "device", None)
            memory = (f"  max mem: {torch.cuda.max_memory_allocated(device) // 2 ** 20}"
                      if device is not None and device.type == "cuda" else "")
            logger.info("iter: %d  epoch: %d  loss: %.4f  %s  lr: %.6f  images/s: %.2f%s  eta: %s%s",
                        s.iter, s.epoch, sum(values.values()), parts, lr, ips, scale, eta, memory)


class CheckpointHook(HookBase):
    """Every ``period`` iterations (and at the end) rank 0 saves model, optimizer, LR schedule, gradient scaler,
    the iteration and every rank's random-number state (gathered), so ``--resume`` continues exactly; with
    ``evaluation`` (the :class:`~maskrcnn_benchmark.engine.mlperf_hooks.EvaluationHook`), also the scores of the
    epochs a resumed run could not evaluate again (``scores``: ``[epoch, box AP, mask AP]`` each; every epoch but
    the one ending at the checkpoint's iteration, included when already in), waited for when still being computed."""

    def __init__(self, checkpointer, period, save_final=True, seed=None, evaluation=None):
        self.checkpointer = checkpointer
        self.period = period
        self.save_final = save_final
        self.seed = seed
        self.evaluation = evaluation

    def _save(self, name, settle=True):
        self.trainer.check_finite()  # every rank: no checkpoint of weights a non-finite step corrupted
        extra = {}
        if self.evaluation is not None:
            # the final checkpoint (after run_stop) keeps the scores known: waiting for later epochs' would log
            # their eval_accuracy after run_stop, and a run over is not resumed (settle: every rank, it agrees)
            known = self.evaluation.settle() if settle else self.evaluation.scores
            extra["scores"] = [[e.epoch, e.bbox, e.segm] for e in known]
        states = comm.all_gather(get_rng_state())
        if settle and comm.is_main_process() and self.evaluation is not None and self.evaluation.failure is not None:
            # settle() could not wait for the epochs still being scored: a checkpoint without their scores would
            # resume a run that never scores them; the previous checkpoint stays the last one (the final one, of a
            # run over, waits for none)
            logger.warning("%s not written: rank 0's evaluation failed (above); the last checkpoint is the one "
                           "before it", name)
            return
        if comm.is_main_process():
            self.checkpointer.save(name, iteration=self.trainer.storage.iter, seed=self.seed, rng_states=states,
                                   **extra)

    def after_step(self):
        it = self.trainer.storage.iter
        if self.period > 0 and it % self.period == 0:
            self._save(f"model_{it:07d}")

    def after_train(self):
        if self.save_final and self.trainer.error is None:
            try:
                self._save("model_final", settle=False)
            except (WriteError, NonFiniteLossError) as e:  # after run_stop: the MLPerf log is complete, the run's
                # outcome stands (weights a step after the target's epoch made non-finite are not saved)
                logger.error("the final checkpoint was not written (the run's outcome stands): %s", e)


class ProfilerHook(HookBase):
    """``PROFILE=torch|memory`` (via MASKRCNN_PROFILE): a torch.profiler trace or a per-iteration memory CSV."""

    def __init__(self, rank=0):
        from ..utils import profiling

        self.profiler = profiling.from_env(rank=rank)

    def after_step(self):
        self.profiler.step(self.trainer.storage.iter)

    def after_train(self):
        try:  # a diagnostic: a trace that cannot be written is said, and fails nothing of the run
            self.profiler.close()
        except Stopped:  # a stop signal is the run's
            raise
        except Exception as e:  # noqa: BLE001
            logger.error("the profile was not written: %s: %s", type(e).__name__, e)
