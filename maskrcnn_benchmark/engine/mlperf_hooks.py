"""The two hooks of an MLPerf run: evaluation, and the MLPerf protocol (epoch marks, the stop decision).

Each keeps its own state; they talk through the loop's store only (:class:`~maskrcnn_benchmark.engine.events.
EventStorage` scalars, on rank 0): :class:`EvaluationHook` writes ``eval/pending`` (scores not yet arrived),
``eval/failed`` and, per scored epoch, ``eval/epoch``, ``eval/bbox_AP`` and ``eval/segm_AP`` (with history);
:class:`MLPerfStopHook` reads them. The run (:class:`~maskrcnn_benchmark.engine.run.MLPerfRun`) builds both and
reads its outcome from them.

Order of one epoch end: the last iteration's step; ``epoch_stop``/``block_stop`` (:class:`MLPerfStopHook`,
listed first); ``eval_start``, blocking inference, the gather of the detections, ``eval_stop`` (:class:`EvaluationHook`:
the interval is the evaluation's share of the step time, scoring runs in the background); then, before the next
iteration's batch is fetched, the decision and ``block_start``/``epoch_start`` of the next epoch
(:meth:`MLPerfStopHook.before_step`); ``eval_accuracy`` when the scores arrive from the background scorer. NVIDIA's
v0.7 logs differ in two places the compliance checker accepts: ``eval_stop`` follows ``eval_accuracy`` (their
interval includes the scoring), and the epoch cut short by a met target has no ``epoch_stop`` (here it is closed).

The stop decision: scores arrive on rank 0 only, but every rank must stop at the same iteration. Rank 0's state
(scores pending, target met, its own work failed) travels to all ranks in a non-blocking all-reduce that is read one
iteration later (:class:`StopDecision`), and only while a score is pending; epoch ends, which synchronize anyway
(the gather of the detections), agree at once. Where the scores must be in (MAX_ITER, a checkpoint, a non-finite
step), every rank waits together (:meth:`EvaluationHook._wait`): rank 0 for the scorer in slices, each followed by
an agreement, so no rank waits in one collective past DISTRIBUTED_TIMEOUT however long the scoring takes.
"""
import logging
import time

from ..utils import comm, signals
from ..utils.errors import EvaluationFailed
from ..utils.logger import TRACEBACK_LOGGER
from ..utils.signals import Stopped
from .events import EpochScores
from .trainer import HookBase

logger = logging.getLogger(__name__)

PENDING, FAILED, EPOCH, BBOX, SEGM = "eval/pending", "eval/failed", "eval/epoch", "eval/bbox_AP", "eval/segm_AP"
# the longest rank 0 waits for scores before every rank agrees whether it still waits (a quarter of the collectives'
# timeout when that is shorter)
WAIT_SLICE_S = 30.0


def meets_targets(targets, bbox, segm):
    """MLPerf's quality target: box AP >= ``targets[0]`` and mask AP >= ``targets[1]``."""
    return bbox >= targets[0] and segm >= targets[1]


class EvaluationHook(HookBase):
    """At the end of every whole epoch (``per_epoch``; else once, after the last iteration): ``eval_start``, ``infer()`` (the model
    over this rank's shard of the test set, into the evaluator), ``evaluator.gather_parts()`` (the collective: every
    rank's detections on rank 0, None elsewhere), on rank 0 ``evaluator.score(evaluator.merge(parts), epoch)`` (a
    future of the scores), ``eval_stop``. On rank 0, every iteration: the scores that arrived, oldest
    first, as ``eval_accuracy`` and in the store.

    ``evaluator``: a :class:`~maskrcnn_benchmark.evaluation.COCOEvaluator` whose scorer is a
    :class:`~maskrcnn_benchmark.evaluation.BackgroundScorer` (``evaluate(epoch)`` returns a future on rank 0);
    ``poll``: the background scorer's one pipe check (every iteration, rank 0). ``targets`` (box AP, mask AP):
    the scores of epochs after the first one that met them are not logged (mlperf-logging's RCP checker counts a
    run's epochs by its last ``eval_accuracy``, and the compliance checker judges the target on it; with scoring
    slower than an epoch, the next epoch's scores can arrive with the converged one's).
    Rank-0-only work that fails is kept (:attr:`failure`) and reported as ``eval/failed``, so that every rank stops
    at the same iteration instead of the others waiting for rank 0 in a collective."""

    def __init__(self, evaluator, infer, mllogger, per_epoch=True, poll=None, targets=None):
        self.evaluator = evaluator
        self.targets = tuple(targets) if targets is not None else None
        self.converged_epoch = None  # rank 0: the first recorded epoch that met the targets
        self.poll = poll
        self.infer = infer
        self.ml = mllogger
        self.per_epoch = per_epoch
        self.pending = []        # futures, oldest first (rank 0)
        self.scores = []         # EpochScores, in the order they arrived (rank 0)
        self.eval_seconds = []   # blocking, eval_start to eval_stop, per evaluation
        self.failure = None      # the exception of rank-0-only work

    def _fail(self, e):
        if isinstance(e, Stopped):  # a stop signal is the run's, not the evaluation's
            raise e
        if self.failure is None:
            self.failure = e
            self.trainer.storage.put_scalars(**{FAILED: 1.0})
            # said here: a run that converged before it goes on to success and never reports it otherwise
            logger.error("rank 0's evaluation failed: %s: %s", type(e).__name__,
                         str(e).strip().splitlines()[0] if str(e).strip() else "")
            logging.getLogger(TRACEBACK_LOGGER).error("rank 0's evaluation failed", exc_info=e)

    def _guarded(self, fn, *args):
        if self.failure is None:
            try:
                fn(*args)
            except Exception as e:  # noqa: BLE001
                self._fail(e)

    def _record(self, epoch, result):
        entry = EpochScores(int(epoch), float(result["bbox"]["stats"]["AP"]), float(result["segm"]["stats"]["AP"]),
                            result.get("backend", "?"), float(result.get("seconds", 0.0)))
        if self.converged_epoch is not None:
            logger.info("epoch %d: box AP %.4f, mask AP %.4f, scored after epoch %d met the targets: not logged "
                        "(the run's last eval_accuracy is the converged epoch's)", entry.epoch, entry.bbox,
                        entry.segm, self.converged_epoch)
            return
        if self.targets is not None and meets_targets(self.targets, entry.bbox, entry.segm):
            self.converged_epoch = entry.epoch
        self.scores.append(entry)
        self.ml.eval_accuracy(entry.epoch, entry.bbox, entry.segm)
        logger.info("epoch %d: box AP %.4f, mask AP %.4f (scored by %s in %.1f s)", entry.epoch, entry.bbox,
                    entry.segm, entry.backend, entry.seconds)
        self.trainer.storage.put_scalars(**{EPOCH: entry.epoch, BBOX: entry.bbox, SEGM: entry.segm})

    def _collect(self):
        """Rank 0: record the scores that arrived. One pipe check, which also notices (and restarts) a scoring
        process that died."""
        if self.poll is not None:
            self.poll()
        while self.pending and self.pending[0].done():
            future = self.pending.pop(0)
            self._record(future.epoch, future.result())
        self.trainer.storage.put_scalars(**{PENDING: float(len(self.pending))})

    def _evaluate(self, epoch):
        t0 = time.perf_counter()
        self.ml.eval_start(epoch)
        self.infer()
        parts = self.evaluator.gather_parts()  # the collective, every rank: its failure is the run's (rank lost)
        if parts is not None:  # rank 0
            # rank-0-only work (merging, writing, the scorer's start or hand-over): a failure is kept and decided on
            # by every rank together, not raised here while the others go on into the next collective
            try:
                future = self.evaluator.score(self.evaluator.merge(parts), epoch)
            except Exception as e:  # noqa: BLE001
                self._fail(e)
                future = None
            if future is not None:
                self.pending.append(future)
                self.trainer.storage.put_scalars(**{PENDING: float(len(self.pending))})
        self.ml.eval_stop(epoch)
        self.eval_seconds.append(time.perf_counter() - t0)

    def before_train(self):
        s = self.trainer.storage
        self._flag = comm.AsyncFlag()  # every rank: the agreement of the waits for scores (_wait)
        # resumed from an epoch end's checkpoint: written after that epoch's evaluation started, before its scores
        # could arrive; the weights are that epoch's, so it is evaluated again here
        if self.per_epoch and s.resumed_at_epoch_end:
            self._evaluate(s.epoch_of(s.start_iter))

    def after_step(self):
        s = self.trainer.storage
        last = s.iter >= s.max_iter
        # per epoch: whole epochs only (a MAX_ITER inside an epoch ends the run unscored there, as the reference's
        # per-epoch test does); else once, at the end (the reference's test after training)
        if s.is_epoch_end() if self.per_epoch else last:
            self._evaluate(s.epoch)
        if comm.is_main_process():
            self._guarded(self._collect)
        if last:  # MAX_ITER: the scores still pending decide the run; wait for them
            self._wait()

    def settle_before_abort(self):
        self._wait()

    def _wait(self, keep=None):
        """Every rank: the scores of every pending epoch but ``keep`` recorded, rank 0 waiting for them in slices
        (:data:`WAIT_SLICE_S`), after each of which every rank agrees whether it still waits. The other ranks wait
        for rank 0 in those agreements, never in one collective longer than a slice: a scorer slower than the
        collectives' timeout (pycocotools on COCO val: minutes an epoch) does not end the run as a lost rank."""
        timeout = comm.collective_timeout() or 300
        slice_s = min(WAIT_SLICE_S, timeout / 4)
        while True:
            waiting = 0
            if comm.is_main_process():
                self._guarded(self._wait_for_a_while, keep, slice_s)
                waiting = int(self.failure is None and any(f.epoch != keep for f in self.pending))
            if not self._flag.agree(waiting):
                return

    def _wait_for_a_while(self, keep, seconds):
        """Rank 0: record the pending epochs' scores (but ``keep``'s), oldest first, as they arrive within
        ``seconds``."""
        deadline = time.monotonic() + seconds
        for future in [f for f in self.pending if f.epoch != keep]:
            wait = getattr(future, "wait", None)  # a future without it (tests' stand-ins): result() waits
            if wait is not None and not wait(max(0.0, deadline - time.monotonic())):
                break
            result = future.result()
            self.pending.remove(future)
            self._record(future.epoch, result)
        self.trainer.storage.put_scalars(**{PENDING: float(len(self.pending))})

    def settle(self):
        """Every rank, before a checkpoint is written: waits (:meth:`_wait`) for the scores of the epochs before
        the one that ends at this iteration (if one does), and returns every score known (rank 0; elsewhere none):
        those a run resumed from the checkpoint cannot compute again (an earlier epoch's weights are gone, so its
        scores must be known, and kept in the checkpoint, before it is written), and the current epoch's if they
        are in already (a resumed run evaluates that epoch again from its weights, but one that met the targets
        means the run converged: nothing to resume)."""
        s = self.trainer.storage
        self._wait(s.epoch if s.is_epoch_end() else None)
        return list(self.scores)


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


class MLPerfStopHook(HookBase):
    """The MLPerf protocol of the loop: ``block_start``/``epoch_start`` and ``epoch_stop``/``block_stop`` of every
    epoch, the decision to stop (both targets met: box AP >= ``targets[0]`` and mask AP >= ``targets[1]``; or
    rank 0's evaluation failed), and ``run_stop`` with its status.

    The decision is taken before each iteration's batch is fetched (:meth:`before_step`), on rank 0's state after
    the previous iteration; a stop ends the loop there, so the run's last iteration is the one after which the
    scores were known (single process) or the one after that (several ranks, one iteration of exchange)."""

    def __init__(self, targets, mllogger):
        self.targets = tuple(targets)
        self.ml = mllogger
        self.target_met = False        # every rank, once agreed
        self.converged_epoch = None    # rank 0: the first epoch whose scores met both targets
        self._seen = 0                 # rank 0: scored epochs read from the store
        self._open_epoch = None
        self._epoch_ended = False
        self._decision = None
        self.stopped_at = None         # time.time() when run_stop was logged

    def _state(self):
        """Rank 0's state for the decision (0 on the other ranks)."""
        if not comm.is_main_process():
            return 0
        s = self.trainer.storage
        history = s.history(EPOCH)
        for (_, epoch), (_, bbox), (_, segm) in zip(history[self._seen:], s.history(BBOX)[self._seen:],
                                                    s.history(SEGM)[self._seen:]):
            if self.converged_epoch is None and meets_targets(self.targets, bbox, segm):
                self.converged_epoch = int(epoch)
                logger.info("epoch %d reached the targets (box AP >= %.3f, mask AP >= %.3f)", int(epoch),
                            *self.targets)
        self._seen = len(history)
        latest = s.latest()
        if self.converged_epoch is not None:  # a later epoch's failed scoring does not undo it
            if latest.get(FAILED):
                logger.warning("an evaluation after epoch %d failed (above); the run converged at epoch %d",
                               self.converged_epoch, self.converged_epoch)
            return StopDecision.TARGET_MET
        if latest.get(FAILED):
            return StopDecision.FAILED
        return StopDecision.PENDING if latest.get(PENDING) else 0

    def _act(self, code):
        if code & StopDecision.FAILED:
            raise EvaluationFailed("evaluation failed on rank 0 (its log says why)")
        if code & StopDecision.TARGET_MET:
            self.target_met = True
            self.trainer.request_stop("target reached")
            return True
        return False

    def _start_epoch(self, epoch):
        self.ml.epoch_start(epoch)
        self._open_epoch = epoch

    def _stop_epoch(self):
        if self._open_epoch is not None:
            self.ml.epoch_stop(self._open_epoch)
            self._open_epoch = None

    def before_train(self):
        self._decision = StopDecision()
        self._start_epoch(self.trainer.storage.epoch_of(self.trainer.start_iter + 1))

    def after_step(self):
        s = self.trainer.storage
        if s.is_epoch_end():
            self._stop_epoch()
            self._epoch_ended = True

    def before_step(self):
        if self.trainer.iter == self.trainer.start_iter:
            if self.trainer.storage.resumed_at_epoch_end:  # its epoch evaluated again (EvaluationHook.before_train)
                self._act(self._decision.agree(self._state()))
            return  # nothing else happened yet
        state = self._state()
        code = self._decision.agree(state) if self._epoch_ended else self._decision.exchange(state)
        if self._act(code):
            return
        if self._epoch_ended:
            self._epoch_ended = False
            self._start_epoch(self.trainer.storage.epoch + 1)

    def decide_before_abort(self):
        code = self._decision.agree(self._state())
        if code & StopDecision.TARGET_MET:  # else the non-finite step ends the run (a failed evaluation too)
            self._act(code)

    def after_train(self):
        t = self.trainer
        try:
            if t.error is None and not self.target_met:
                self._act(self._decision.agree(self._state()))
            elif t.error is None and self._decision is not None:
                self._decision.close()  # target met: wait for the exchange in flight (after an error, wait for
                #                         nothing: another rank may be gone)
        finally:
            self._stop_epoch()
            success = self.target_met and t.error is None
            # the outcome is decided: a stop signal from here on (a time limit while run_stop is written, or the
            # final checkpoint) is only recorded; the log says the outcome, and so will the exit code
            signals.hold()
            self.ml.run_stop(success)
            self.stopped_at = time.time()  # the end of the timed region (the final checkpoint comes after it)
