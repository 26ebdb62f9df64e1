"""COCO scoring beside training: :class:`BackgroundScorer`, an executor around the one scorer.

``BackgroundScorer(scorer)`` is called like the :class:`~maskrcnn_benchmark.evaluation.COCOScorer` it wraps,
``background(detections, epoch)``, and returns a :class:`ScoresFuture` at once: a scoring process runs the same
scorer object on the detections. A :class:`~maskrcnn_benchmark.evaluation.COCOEvaluator` built with it as its
scorer has the one ``evaluate(epoch)`` (gather, write, score) and returns that future. ``poll()`` costs one pipe
check, so the training loop asks every iteration: it collects finished scores and notices a scoring process that
died. ``asynchronous=False`` scores in-process (``--sync-eval``; what the asynchronous path is tested against): the
future is done when the call returns.

The scoring process gets one epoch at a time: the next epoch's detections are handed over when the previous
epoch's scores arrive (at a ``poll()``), not when they are given. A pipe holds a few hundred kilobytes, and COCO
val2017's detections are about 150 MB pickled: sent to a process still scoring, they would block the caller (rank
0's training loop, while every other rank waits for it) until that scoring ended.

A scoring process that dies costs nothing: the detections of every epoch stay here until their scores arrive,
so a process that dies while scoring is restarted and the same detections are scored again; only a second death
while scoring the same epoch is an error (:class:`ScoringError`, one line). Every failure is its epoch's: its
future's ``result()`` raises it, and nothing else does (``poll()`` and the call that hands an epoch over do not),
so the scores of an earlier epoch that arrived in the same ``poll()`` are read as they came. One that dies while
idle is noticed at the next ``poll()`` (the next iteration) and restarted then.

The scoring process never outlives the run: it is in a process group of its own (with its pool workers), which
``shutdown()`` kills, and it asks the kernel to kill it (``PR_SET_PDEATHSIG``) if the trainer dies first, even by
SIGKILL.

A scoring process that is alive but has not answered for ``hang_after_s`` (default 30 min: COCO val2017 scores in
about 3 s with faster-coco-eval on 16 workers, in minutes with pycocotools on one core) is taken for hung (a pool
worker deadlocked, a process stopped): killed, and then treated as one that died while scoring that epoch.
"""
import atexit
import logging
import multiprocessing
import os
import signal
import time

from ..utils.processes import die_with_parent
from ..utils.signals import Stopped
from .scoring import ScoringError

logger = logging.getLogger(__name__)

# deaths of the scoring process while it scores one epoch that are survived by a restart
RESTARTS_PER_EPOCH = 1
# seconds without an answer after which a scoring process that holds an epoch is taken for hung
HANG_AFTER_S = 1800.0


def _serve(conn, parent_pid, scorer, niceness=0):
    die_with_parent(parent=parent_pid)
    os.setpgid(0, 0)  # our own group: shutdown() kills it with the scoring pool's workers
    if niceness:
        try:  # the process group: every thread of it (os.nice would leave threads already started, BLAS's, behind);
            # its pool workers, forked later, inherit it
            os.setpriority(os.PRIO_PGRP, 0, min(19, os.getpriority(os.PRIO_PROCESS, 0) + niceness))
        except OSError as e:  # a sandbox that forbids it: score at the trainer's priority rather than not at all
            print(f"coco-scorer: priority unchanged ({e})", flush=True)
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        epoch, detections = msg
        try:
            conn.send((epoch, scorer(detections), None))
        except Exception as e:  # noqa: BLE001 - sent back as one line
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            conn.send((epoch, None, f"{type(e).__name__}: {first}"))


class ScoresFuture:
    """The scores of one epoch, to come. ``done()`` never waits; ``wait(timeout)`` waits at most that long;
    ``result()`` waits and returns the scores dict (raises :class:`ScoringError` when scoring failed)."""

    def __init__(self, owner, epoch):
        self.epoch = epoch
        self._owner = owner
        self._scores = None
        self._error = None

    def _set(self, scores=None, error=None):
        self._scores, self._error = scores, error

    def done(self):
        if self._scores is None and self._error is None:
            self._owner.poll()
        return self._scores is not None or self._error is not None

    def wait(self, timeout):
        """Wait at most ``timeout`` seconds for the scores; whether they are in (or the scoring failed)."""
        deadline = time.monotonic() + timeout
        while not self.done() and time.monotonic() < deadline:
            self._owner.poll(block=True, timeout=max(0.0, deadline - time.monotonic()))
        return self.done()

    def result(self):
        while not self.done():
            self._owner.poll(block=True)
        if self._error is not None:
            raise ScoringError(self._error)
        return self._scores


class BackgroundScorer:
    """``scorer`` (a :class:`~maskrcnn_benchmark.evaluation.COCOScorer`) run in a scoring process of its own:
    ``background(detections, epoch)`` returns a :class:`ScoresFuture`. Rank 0 only (the detections are gathered
    there).

    ``niceness``: the scoring process's (and its pool's) priority below the trainer's. A GPU run asks for it
    (engine/run.py): the scorer runs on rank 0's cores (its affinity; one pool worker per core by default), where
    the rank's host thread launches the GPU work, and a slower rank 0 holds every rank back at the next
    all-reduce; idle cores it still gets in full. On a CPU run the trainer uses every core, so a lower priority
    would only delay the scores, and with them the stop."""

    def __init__(self, scorer, asynchronous=True, niceness=0, hang_after_s=HANG_AFTER_S):
        self.scorer = scorer
        self.asynchronous = asynchronous
        self.niceness = niceness
        self.hang_after_s = hang_after_s
        self._sent_at = 0.0
        self._proc = None
        self._conn = None
        self._waiting = []    # futures not yet scored, in order, with their detections; the first one is in the
        #                       scoring process when _sent
        self._sent = False
        self._restarts = {}   # epoch -> restarts while scoring it
        self.restarts = 0     # restarts in all (idle deaths included)

    @property
    def pid(self):
        return self._proc.pid if self._proc is not None else None

    @property
    def pending(self):
        """Epochs handed over whose scores have not arrived."""
        return len(self._waiting)

    # -- the scorer's interface ------------------------------------------------------------------------------------
    def __call__(self, detections, epoch=None):
        future = ScoresFuture(self, epoch)
        if not self.asynchronous:
            try:
                future._set(scores=self.scorer(detections))
            except ScoringError as e:
                future._set(error=f"COCO scoring of epoch {epoch} failed: {e}")
            return future
        if self._proc is None:
            self._start()
        self._waiting.append((future, detections))
        self._send_next()
        return future

    # -- the scoring process --------------------------------------------------------------------------------------
    def _start(self):
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        # not daemonic (a daemon may not have the scoring pool as children): shut down at exit, before
        # multiprocessing's own exit handler would wait for it
        self._proc = ctx.Process(target=_serve, args=(child, os.getpid(), self.scorer, self.niceness),
                                 name="coco-scorer", daemon=False)
        # Ctrl-C reaches the whole foreground process group; the trainer decides what happens, the scorer (and
        # its pool) ignore it from the first instruction on: an ignored signal stays ignored across exec
        try:
            previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        except ValueError:  # not the main thread: leave the handlers alone
            previous = None
        try:
            self._proc.start()
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
        child.close()
        atexit.register(self.shutdown)

    def _send_next(self):
        """Hand the oldest waiting epoch to the scoring process, unless it holds one already (it reads at once
        then: it waits in its recv)."""
        if self._sent or not self._waiting:
            return
        future, detections = self._waiting[0]
        alive = self._proc.is_alive()  # dead already: it died while idle, before it was handed this epoch
        try:
            self._conn.send((future.epoch, detections))
            self._sent = True
            self._sent_at = time.monotonic()
        except (OSError, EOFError):  # the process is gone (broken pipe), or a write failed half-way and the stream cannot be
            # trusted: a fresh process, sent this epoch again (or fail, the second time it dies receiving it)
            self._died(held=alive)
        except Stopped:  # a stop signal in the second it takes to pickle and write an epoch: the run stops
            raise
        except Exception as e:  # noqa: BLE001 - pickling the detections (out of memory): nothing was written
            self._waiting.pop(0)
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            future._set(error=f"handing epoch {future.epoch}'s detections to the COCO scoring process failed: "
                              f"{type(e).__name__}{': ' + first if first else ''}")
            self._send_next()  # the epochs queued behind it (else their result() waits for nothing)

    def _silent_s(self):
        """Seconds the scoring process has held an epoch without answering (0 when it holds none)."""
        return time.monotonic() - self._sent_at if self._sent else 0.0

    def _hung(self):
        """Kill a scoring process that holds an epoch and has not answered for ``hang_after_s``; then as a death."""
        epoch = self._waiting[0][0].epoch
        logger.warning("the COCO scoring process has not answered for %.0f s while scoring epoch %s: taken for hung "
                       "and killed", self._silent_s(), epoch)
        try:
            os.killpg(self._proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            self._proc.kill()
        self._died(held=True, cause=f"hung (no answer for {self.hang_after_s:.0f} s)")

    def _died(self, held=None, cause=None):
        """The scoring process is gone: restart it and hand it the oldest epoch still waiting, unless it already
        died once while scoring that epoch. ``held``: it died holding that epoch (receiving or scoring it; default:
        it had been handed it); a death while idle, found when the next epoch is handed over, costs that epoch
        nothing."""
        held = self._sent if held is None else held
        code = self._proc.exitcode if self._proc is not None else None
        if self._proc is not None:
            self._proc.join(1)
            code = self._proc.exitcode
        self._stop_process()
        if self._waiting and held:
            epoch = self._waiting[0][0].epoch
            if self._restarts.get(epoch, 0) >= RESTARTS_PER_EPOCH:
                future, _ = self._waiting.pop(0)
                future._set(error=f"the COCO scoring process {cause} while scoring epoch {epoch}, after a restart for "
                                  "that epoch" if cause else
                            f"the COCO scoring process died again (exit code {code}) while scoring epoch {epoch}; it "
                            "is killed from outside (out of memory?)")
                if self._waiting:  # the epochs queued behind it get a fresh process (and their own restarts)
                    self._start()
                    self._send_next()
                return
            self._restarts[epoch] = self._restarts.get(epoch, 0) + 1
            logger.warning("the COCO scoring process %s while scoring epoch %s: restarted, scoring that epoch's "
                           "detections again", cause or f"died (exit code {code})", epoch)
        else:
            logger.warning("the COCO scoring process died (exit code %s) while idle: restarted", code)
        self.restarts += 1
        self._start()
        self._send_next()

    def poll(self, block=False, timeout=None):
        """Collect finished scores into their futures; notice and restart a dead scoring process. Rank 0 only
        (elsewhere nothing is ever pending). ``block``: wait for the next result (when one is pending), at most
        ``timeout`` seconds when given."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if not self.asynchronous or self._proc is None:  # (a second death while scoring an epoch: none now)
                return
            # an answer already in the pipe is read first: a poll late by more than hang_after_s (a suspended job)
            # does not take a scorer that has finished for hung
            if self._sent and self._silent_s() >= self.hang_after_s and not self._conn.poll(0):
                self._hung()
                continue
            wait = 0.0
            if block and self._waiting:  # until the answer, or until the process is taken for hung
                wait = max(0.0, self.hang_after_s - self._silent_s()) if self._sent else None
                if deadline is not None:
                    left = max(0.0, deadline - time.monotonic())
                    wait = left if wait is None else min(wait, left)
            if not self._conn.poll(wait):
                if block and self._waiting and (deadline is None or time.monotonic() < deadline):
                    continue  # the hang check above
                return
            try:
                epoch, scores, error = self._conn.recv()
            except (EOFError, OSError):
                self._died()
                if not block:
                    return
                continue
            future, _ = self._waiting.pop(0)
            self._sent = False
            future._set(scores=scores, error=None if error is None else
                        f"COCO scoring of epoch {epoch} failed: {error}")
            self._send_next()
            if block:
                return

    def _stop_process(self):
        proc, self._proc = self._proc, None
        self._sent = False
        if proc is None:
            return
        if proc.pid is not None:  # else never started (its start failed: that error is the one to see)
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                proc.kill()
            proc.join(2.0)
        self._conn.close()

    def shutdown(self):
        """Stop the scoring process and its pool at once (a run that ends does not wait for a scoring it no
        longer needs). The futures still waiting get an error (they would wait forever)."""
        self._stop_process()
        for future, _ in self._waiting:
            future._set(error=f"the COCO scoring process was shut down before epoch {future.epoch} was scored")
        self._waiting = []
