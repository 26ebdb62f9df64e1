"""A minimal training loop with hooks (detectron2-style): the loop only loads a batch, runs forward and backward
and steps the optimizer; logging, evaluation, checkpoints and the MLPerf protocol are hooks. The loop and the hooks
share one :class:`~maskrcnn_benchmark.engine.events.EventStorage`."""
import logging
import math
import warnings

import torch

from ..utils import comm
from ..utils.amp import autocast_dtype, make_grad_scaler
from ..utils.errors import NonFiniteLossError
from .events import EventStorage

logger = logging.getLogger(__name__)

# A float16 step the scaler skipped still advances the schedule (the reference's loop does too): torch's note on
# the schedule's first step is not for this loop. Filtered once, here: a warnings.catch_warnings() around the step
# resets Python's record of the warnings shown, and every warning of the model or torch printed at every iteration.
warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step", category=UserWarning)

# fp16: the GradScaler skips a step whose gradients overflowed and halves its scale (as NVIDIA's FP16 optimizer
# does); a run whose scale falls below this has diverged (gradients overflow even unscaled) and is aborted.
MIN_LOSS_SCALE = 1.0


class HookBase:
    """A training hook: called before training, before and after every iteration, and after training (also when
    training failed; ``trainer.error`` then holds the exception). ``self.trainer.storage`` is the shared store.

    ``before_step`` runs before the next iteration's batch is fetched (``trainer.iter`` is still the last
    iteration done); a hook that calls ``trainer.request_stop`` there ends the loop before that batch."""

    trainer = None

    def before_train(self):
        pass

    def before_step(self):
        pass

    def after_step(self):
        pass

    def after_train(self):
        pass

    def settle_before_abort(self):
        """Every rank, when the loop found a non-finite step: finish the work already decided by earlier
        weights (the scores of epochs still being computed), before the outcome is decided."""

    def decide_before_abort(self):
        """Every rank, after :meth:`settle_before_abort`: a hook may request the stop, which then stands (the
        loop ends without the non-finite error)."""


class Trainer:
    """Runs iterations ``start_iter + 1 .. max_iter`` (1-based, as the reference counts).

    ``dtype`` float16 uses autocast with a GradScaler, bfloat16 autocast alone (:mod:`maskrcnn_benchmark.utils.amp`).
    The LR scheduler steps after the optimizer (the reference's order: iteration k trains with the LR of schedule
    step k - 1).

    Non-finite losses: in float32/bfloat16 a non-finite loss aborts the run (NonFiniteLossError, on every rank
    together). In float16 the GradScaler skips a step whose gradients overflowed and halves the loss scale, as
    NVIDIA's FP16 optimizer does: that is not an abort; the run aborts only when the scale falls below
    MIN_LOSS_SCALE. The scaler reads the gradients, not the loss: a NaN loss as a rule has NaN gradients
    (skipped), an infinite one need not (binary cross-entropy at a float16 logit that overflowed is infinite with
    a gradient of +-1), and that step is taken, as the reference's apex scaler takes it (a logged iteration's
    metrics line shows the inf). Both rules are checked every ``nan_check_period`` iterations, at epoch ends and
    after the last iteration, from device-side state: one host read per check, none in the other steps
    (bench/host_syncs.py lists it apart from the step). A non-finite step found by the loop's check does not undo
    a target met before it: the scores still pending decide first (:meth:`_stop_stands_after_abort`); one found
    by a periodic checkpoint's own check (SOLVER.CHECKPOINT_PERIOD off the check's period) ends the run.

    ``forward(images, targets) -> loss dict`` runs the step's forward: the model itself, or the compiled step
    (:class:`~maskrcnn_benchmark.engine.compile.CompiledForward`); the loop is the same for both, and ``model``
    stays the module whose weights are saved.
    """

    def __init__(self, model, optimizer, scheduler, data_loader, device, max_iter, iters_per_epoch,
                 dtype="float32", start_iter=0, hooks=(), clip_grad_norm=0.0, nan_check_period=None, scaler=None,
                 forward=None):
        self.model = model
        self.forward = forward or model  # a compiled forward (engine.compile.CompiledForward) or the model
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.data_loader = data_loader
        self.device = device
        self.max_iter = max_iter
        self.start_iter = start_iter
        self.iter = start_iter
        self.clip_grad_norm = clip_grad_norm
        self.nan_check_period = nan_check_period or (20 if device.type == "cuda" else 1)
        self.amp_dtype = autocast_dtype(device, dtype)
        self.scaler = scaler if scaler is not None else make_grad_scaler(device, dtype)
        self.storage = EventStorage(start_iter, iters_per_epoch, max_iter)
        self.hooks = []
        for h in hooks:
            h.trainer = self
            self.hooks.append(h)
        self._nonfinite = torch.zeros((), dtype=torch.bool, device=device)
        self.error = None
        self.stop_requested = False
        self.stop_reason = None

    @property
    def epoch(self):
        return self.storage.epoch

    def check_finite(self):
        """Raise on every rank together: with DDP a non-finite loss on one rank poisons all of them, and a rank
        that stopped alone would leave the others waiting in the next collective."""
        if self.scaler.is_enabled():
            # DDP averages the gradients, so every rank sees the same overflow and holds the same scale.
            scale = self.scaler.get_scale()
            if scale < MIN_LOSS_SCALE:
                raise NonFiniteLossError(f"float16 loss scale fell to {scale:g} at iteration {self.iter}: the "
                                         "gradients overflow even unscaled, training diverged")
            return
        flag = self._nonfinite.to(torch.int32)
        if comm.get_world_size() > 1:
            torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
        if flag.item():
            values = ", ".join(f"{k}={float(v):.4g}" for k, v in self.storage.latest("loss").items())
            raise NonFiniteLossError(f"non-finite loss at iteration {self.iter}: {values}")

    def run_step(self, images, targets):
        """One step on a batch the data loader has put on the device (``ImageList``, ``TargetBatch``).

        A compiled step records a CUDA graph on the clock for a batch shape its warm-up did not see; should the
        backward's capture fail there, the compiled forward takes it as its compile failure (one warning; in a
        single process only: :meth:`~maskrcnn_benchmark.engine.compile.CompiledForward.fail_backward`) and this
        step runs again, eagerly (its samples drawn anew), as every later one."""
        try:
            loss_dict, losses = self._forward_backward(images, targets)
        except Exception as e:  # noqa: BLE001 - only a compiled step's capture error is taken: the rest re-raised
            fail_backward = getattr(self.forward, "fail_backward", None)
            if fail_backward is None or not fail_backward(e):
                raise
            loss_dict = None  # the rerun comes after this block: the error's frames hold the failed step's graph
        if loss_dict is None:
            loss_dict, losses = self._forward_backward(images, targets)
        if not self.scaler.is_enabled():
            self._nonfinite |= ~torch.isfinite(losses.detach())
        if self.clip_grad_norm > 0:
            self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip_grad_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.scheduler.step()
        # copies: a CUDA-graphed step overwrites its outputs at the next replay
        self.storage.put_scalars(**{k: v.detach().clone() for k, v in loss_dict.items()})
        self.storage.images_seen += len(images.image_sizes) * comm.get_world_size()

    def _forward_backward(self, images, targets):
        with torch.autocast(self.device.type, dtype=self.amp_dtype or torch.float32,
                            enabled=self.amp_dtype is not None):
            loss_dict = self.forward(images, targets)
        losses = sum(loss_dict.values())
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(losses).backward()
        return loss_dict, losses

    def _stop_stands_after_abort(self):
        """A non-finite step (found on every rank together). The scores still pending are of epochs whose
        weights were checked finite at their ends: they are waited for, and a target they meet stands, as a
        stop decided before the step does; the final checkpoint of the later weights is then not written
        (CheckpointHook). Whether a converged run succeeds does not depend on whether its scorer beat the
        check."""
        for h in self.hooks:
            h.settle_before_abort()
        for h in self.hooks:
            h.decide_before_abort()
        return self.stop_requested

    def request_stop(self, reason):
        """End the loop before the next iteration (a hook's decision: the target is met)."""
        self.stop_requested = True
        self.stop_reason = reason

    def train(self):
        try:
            for h in self.hooks:
                h.before_train()
            batches = iter(self.data_loader)
            while self.iter < self.max_iter:
                for h in self.hooks:
                    h.before_step()
                if self.stop_requested:
                    break
                try:
                    images, targets, _ = next(batches)
                except StopIteration:
                    break
                self.iter += 1
                self.storage.iter = self.iter
                self.run_step(images, targets)
                # every nan_check_period iterations (a read of the device), and at epoch ends: no evaluation of
                # weights a non-finite step corrupted (checkpoints check before they write: CheckpointHook)
                if self.iter % self.nan_check_period == 0 or self.storage.is_epoch_end() or \
                        self.iter >= self.max_iter:
                    try:
                        self.check_finite()
                    except NonFiniteLossError:
                        if not self._stop_stands_after_abort():
                            raise
                        break
                for h in self.hooks:
                    h.after_step()
            if not self.stop_requested:  # a stop at the target stands: its scores are of an epoch whose weights
                self.check_finite()     # were checked at its end (the steps since decide nothing)
        except BaseException as e:
            self.error = e
            raise
        finally:
            failure = None
            for h in self.hooks:  # every hook closes, even if an earlier one fails (run_stop must be logged)
                try:
                    h.after_train()
                except Exception as e:  # noqa: BLE001
                    failure = failure or e
                    self.error = self.error or e  # the hooks after it see the run failed (no final checkpoint)
            if failure is not None and self.error is failure:
                raise failure


def iterations_per_epoch(num_images, global_batch):
    """The iterations of one epoch (MLPerf's epoch marks, the evaluations): ``ceil(images / global batch)``.
    Derivatives of NVIDIA's code count ``images // batch + 1``, one more where the batch divides the dataset
    exactly, which no recipe batch does on COCO 2017's 117,266 training images (docs/numerics.md)."""
    return max(1, math.ceil(num_images / global_batch))
