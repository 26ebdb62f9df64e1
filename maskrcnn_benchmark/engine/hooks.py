"""Training hooks: metric logging, periodic checkpoints, and the MLPerf epoch/eval/early-stop protocol."""
import logging
import time

from ..utils import comm

logger = logging.getLogger(__name__)


class MetricsHook:
    """Every ``period`` iterations (rank 0): losses (averaged over ranks), LR, images/s. Plain log lines,
    never inside an MLPerf line and never a progress bar."""

    trainer = None

    def __init__(self, period=20):
        self.period = period
        self._t = None
        self._images = 0

    def before_train(self):
        self._t = time.perf_counter()
        self._images = self.trainer.images_seen

    def after_step(self):
        t = self.trainer
        if t.iter % self.period and t.iter != t.max_iter:
            return
        losses = comm.reduce_dict(t.loss_dict)
        now = time.perf_counter()
        ips = (t.images_seen - self._images) / max(now - self._t, 1e-9)
        self._t, self._images = now, t.images_seen
        if comm.is_main_process():
            total = sum(v.item() for v in losses.values())
            parts = "  ".join(f"{k}: {v.item():.4f}" for k, v in sorted(losses.items()))
            lr = t.optimizer.param_groups[0]["lr"]
            logger.info("iter: %d  epoch: %d  loss: %.4f  %s  lr: %.6f  images/s: %.2f",
                        t.iter, t.epoch, total, parts, lr, ips)

    def after_train(self):
        pass


class CheckpointHook:
    trainer = None

    def __init__(self, checkpointer, period, save_final=True):
        self.checkpointer = checkpointer
        self.period = period
        self.save_final = save_final

    def before_train(self):
        pass

    def after_step(self):
        it = self.trainer.iter
        if self.period > 0 and it % self.period == 0 and comm.is_main_process():
            self.checkpointer.save(f"model_{it:07d}", iteration=it)

    def after_train(self):
        if self.save_final and self.trainer.error is None and comm.is_main_process():
            self.checkpointer.save("model_final", iteration=self.trainer.iter)


class MLPerfHook:
    """Epoch boundaries, per-epoch evaluation and early stop, logged with the MLPerf keys.

    At each epoch end: ``epoch_stop``/``block_stop``, then ``eval_start``, distributed inference
    (``evaluate(epoch)``, blocking) and ``eval_stop``; scoring runs in the scorer (asynchronous by default).
    Every ``poll_period`` iterations rank 0 collects finished scores, logs ``eval_accuracy`` and decides
    whether both targets are met; the decision is broadcast so all ranks stop at the same iteration.
    ``run_stop`` closes the run with status success or aborted.
    """

    trainer = None

    def __init__(self, mllogger, evaluate, scorer, min_bbox_map, min_segm_map, poll_period=20,
                 per_epoch_eval=True):
        self.ml = mllogger
        self.evaluate = evaluate
        self.scorer = scorer
        self.targets = (min_bbox_map, min_segm_map)
        self.poll_period = poll_period
        self.per_epoch_eval = per_epoch_eval
        self.success = False
        self.converged_epoch = None
        self.eval_seconds = 0.0
        self.accuracies = []  # (epoch, bbox, segm)
        self._open_epoch = None
        self._failure = None  # an error in rank-0-only work (scoring, COCO conversion), shared at the next sync

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
            self.ml.event("eval_accuracy", {"BBOX": bbox, "SEGM": segm}, metadata={"epoch_num": epoch})
            logger.info("epoch %d: box AP %.4f, mask AP %.4f (targets %.3f / %.3f)", epoch, bbox, segm,
                        *self.targets)
            if not self.success and bbox >= self.targets[0] and segm >= self.targets[1]:
                self.success = True
                self.converged_epoch = epoch

    def before_train(self):
        self._start_epoch(self.trainer.start_iter // self.trainer.iters_per_epoch + 1)

    def _rank0(self, fn, *args):
        """Run rank-0-only work; an exception is kept and turned into a run abort on every rank at the next
        decision broadcast instead of leaving the other ranks blocked in it."""
        if self._failure is None:
            try:
                fn(*args)
            except Exception as e:  # noqa: BLE001
                self._failure = e

    def _decide(self, device):
        """0: go on, 1: targets met, 2: rank 0 failed. Same answer on every rank."""
        code = 2 if self._failure is not None else int(self.success)
        code = comm.broadcast_object(code) if comm.get_world_size() > 1 else code
        if code == 2:
            raise RuntimeError(f"evaluation failed on rank 0: {self._failure or 'see rank 0'}")
        return code == 1

    def _run_eval(self, epoch):
        t0 = time.perf_counter()
        self.ml.start("eval_start", metadata={"epoch_num": epoch})
        self.evaluate(epoch)
        if not self.scorer.asynchronous and comm.is_main_process():
            self._rank0(lambda: self._record(self.scorer.poll()))
        self.ml.end("eval_stop", metadata={"epoch_num": epoch})
        self.eval_seconds += time.perf_counter() - t0

    def after_step(self):
        t = self.trainer
        epoch_end = t.iter % t.iters_per_epoch == 0 or t.iter >= t.max_iter
        if epoch_end:
            epoch = t.epoch
            self._stop_epoch()
            if self.per_epoch_eval or t.iter >= t.max_iter:
                self._run_eval(epoch)
        if epoch_end or t.iter % self.poll_period == 0:
            if comm.is_main_process() and self.scorer.asynchronous:
                self._rank0(lambda: self._record(self.scorer.poll()))
            if self._decide(t.device):
                self.success = True  # rank 0 decided; every rank now agrees
                t.request_stop()
                return
        if epoch_end and t.iter < t.max_iter:
            self._start_epoch(t.epoch + 1)

    def after_train(self):
        t = self.trainer
        try:
            if t.error is None and not self.success:
                if comm.is_main_process():
                    self._rank0(lambda: self._record(self.scorer.wait_all()))
                self.success = self._decide(t.device)
        finally:
            self._stop_epoch()
            self.scorer.shutdown()
            status = "success" if (self.success and t.error is None and self._failure is None) else "aborted"
            self.ml.end("run_stop", metadata={"status": status})


class ProfilerHook:
    """``PROFILE=torch|memory`` (via MASKRCNN_PROFILE): a torch.profiler trace or a per-iteration memory CSV."""

    trainer = None

    def __init__(self, rank=0):
        from ..utils import profiling

        self.profiler = profiling.from_env(rank=rank)

    def before_train(self):
        pass

    def after_step(self):
        self.profiler.step(self.trainer.iter)

    def after_train(self):
        self.profiler.close()
