"""COCO scoring beside training: each epoch's detections are scored in a separate process.

``AsyncScorer(asynchronous=True)`` keeps one scoring process for the whole run (it loads the ground truth once
and forks its own pool of scoring workers per epoch); ``poll()`` costs one pipe check, so the trainer can ask
every iteration. ``asynchronous=False`` scores in-process (what the asynchronous path is tested against, and
``--sync-eval``).

The scoring process never outlives the run: it is in a process group of its own (with its pool workers), which
``shutdown()`` kills, and it asks the kernel to kill it (``PR_SET_PDEATHSIG``) if the trainer dies first, even by
SIGKILL. A scoring failure comes back as one :class:`ScoringError` line.
"""
import atexit
import multiprocessing
import os
import signal
import time

from ..utils.processes import die_with_parent
from .scoring import ScoringError, score_coco


def _timed_score(*args, **kwargs):
    t0 = time.perf_counter()
    out = score_coco(*args, **kwargs)
    out["seconds"] = time.perf_counter() - t0
    return out


def _serve(conn, parent_pid):
    die_with_parent()
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)
    os.setpgid(0, 0)  # our own group: shutdown() kills it with the scoring pool's workers
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        epoch, args = msg
        try:
            conn.send((epoch, _timed_score(*args), None))
        except Exception as e:  # noqa: BLE001 - sent back as one line
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            conn.send((epoch, None, f"{type(e).__name__}: {first}"))


class AsyncScorer:
    def __init__(self, ann_file, image_ids=None, iou_types=("bbox", "segm"), backend="auto", workers=0,
                 asynchronous=True):
        self.ann_file = ann_file
        self.image_ids = list(image_ids) if image_ids is not None else None
        self.iou_types = tuple(iou_types)
        self.backend = backend
        self.workers = workers
        self.asynchronous = asynchronous
        self._proc = None
        self._conn = None
        self._waiting = []  # epochs submitted to the process, in order
        self._done = []     # (epoch, scores) finished (synchronous mode, or received)

    @property
    def pid(self):
        return self._proc.pid if self._proc is not None else None

    def _start(self):
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        # not daemonic (a daemon may not have the scoring pool as children): shut down at exit, before
        # multiprocessing's own exit handler would wait for it
        self._proc = ctx.Process(target=_serve, args=(child, os.getpid()), name="coco-scorer", daemon=False)
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

    def submit(self, epoch, detections):
        args = (self.ann_file, detections, self.iou_types, self.image_ids, self.backend, self.workers)
        if not self.asynchronous:
            self._done.append((epoch, _timed_score(*args)))
            return
        if self._proc is None:
            self._start()
        self._conn.send((epoch, args))
        self._waiting.append(epoch)

    def _receive(self, block):
        while self._waiting and (block or self._conn.poll()):
            try:
                epoch, scores, error = self._conn.recv()
            except (EOFError, OSError):
                code = self._proc.exitcode if self._proc is not None else None
                raise ScoringError(f"the COCO scoring process died (exit code {code}) while scoring epoch "
                                   f"{self._waiting[0]}") from None
            self._waiting.pop(0)
            if error is not None:
                raise ScoringError(f"COCO scoring of epoch {epoch} failed: {error}")
            self._done.append((epoch, scores))

    def poll(self):
        """Finished ``(epoch, scores)`` in submission order; never waits."""
        if self.asynchronous:
            self._receive(block=False)
        out, self._done = self._done, []
        return out

    def wait_all(self):
        if self.asynchronous:
            self._receive(block=True)
        out, self._done = self._done, []
        return out

    @property
    def pending(self):
        return len(self._waiting) + len(self._done)

    def shutdown(self, timeout=2.0):
        """Stop the scoring process and its pool at once (a run that ends does not wait for a scoring it no
        longer needs)."""
        if self._proc is None:
            return
        proc, self._proc = self._proc, None
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            proc.kill()
        proc.join(timeout)
        self._conn.close()
        self._waiting = []
