"""Exit codes of the package's programs and the one line each failure prints: the one table.

Every program of :mod:`maskrcnn_benchmark.cli` that runs, checks or evaluates a model ends through
:func:`run_program` (download_coco and make_synthetic_coco print their own lines): on a failure it prints exactly one
``error: ...`` line to stderr and returns the code of this table. The traceback of an unexpected error goes to the
run's log file, never to the terminal, and the line says where it is. docs/cluster.md shows this table
(``python -m maskrcnn_benchmark.cli.exit_codes`` prints it; a test keeps the two equal).

The launch layer knows two of these codes without importing the package: bind_launch treats ``NOT_CONVERGED``
as an outcome, not a crash; run_and_time.sh turns it into ``NOT_CONVERGED_EXIT_CODE`` (the Slurm job asks for 0 and
reads the outcome from its log line) and passes every other code through.
"""
import errno
import logging
import os
import re
import signal
import sys
import tempfile
import traceback
from dataclasses import dataclass

from ..utils.errors import (BatchNotDivisible, DatasetMissing, EvaluationFailed, NoGPU, NonFiniteLossError, RankLost,
                            RecipeRefused, TooFewGPUs, UserError, WeightsMissing, exception_chain)
from ..utils.logger import TRACEBACK_LOGGER
from ..utils import signals
from ..utils.signals import Stopped



@dataclass(frozen=True)
class ExitCode:
    code: int
    name: str
    meaning: str
    action: str


SUCCESS = ExitCode(0, "success", "the run reached the quality target (other programs: done)", "-")
BAD_INPUT = ExitCode(1, "bad input", "a config key or value, a dataset, weights, the output folder or a write "
                     "(disk full, read-only) was wrong, or rank 0's evaluation (COCO scoring) failed and every rank "
                     "stopped; the line names the key, file, value or failure",
                     "fix what the line names and start again")
DIVERGED = ExitCode(2, "diverged", "a non-finite loss (float32/bfloat16) or a float16 loss scale below 1",
                    "lower SOLVER.BASE_LR or lengthen the warmup; check the data")
NOT_CONVERGED = ExitCode(3, "not converged", "SOLVER.MAX_ITER was reached without both targets: an outcome, "
                         "not a crash; the log is complete (run_stop aborted)",
                         "a review counts it as the one run that may fail; raise SOLVER.MAX_ITER if it repeats")
RANK_LOST = ExitCode(4, "rank lost", "another rank stopped answering within DISTRIBUTED_TIMEOUT; the line "
                     "names it when its heartbeat stopped", "look at that rank's node and log; rerun")
INTERNAL = ExitCode(5, "internal error", "an unexpected exception (a bug, or a broken installation; also a system "
                    "error about no file: too many open files, no memory, a full /dev/shm); the line names the "
                    "exception and the place", "the traceback is in the log file the line names: raise ulimit -n or "
                    "the shm size where it says so, else report it")
STOPPED = ExitCode(128, "stopped (128 + signal)", "SIGTERM (Slurm time limit, scancel, a sibling rank died), "
                   "SIGINT, SIGHUP, or SIGUSR1/SIGUSR2 (a Slurm `--signal` warning); the trainer's line says whether run_stop "
                   "was logged as aborted (not before run_start; after a run_stop success it says that outcome stands)",
                   "rerun; --resume from the last checkpoint")

# Found before the run starts (engine/preflight.py, tools/check_recipe.py), by tools/preflight.py on the batch host
# before any srun; the trainer checks the batch, the GPUs, the data and the weights again before init_start (not
# the recipe).
RECIPE_REFUSED = ExitCode(10, "recipe refused", "the hyperparameters break an MLPerf rule (compliance checker, RCP, "
                          "image sizes); one line per rule", "fix the recipe, or ALLOW_NON_RCP=1 for a research run")
DATASET_MISSING = ExitCode(11, "dataset missing", "an annotation file or image folder of DATASETS.TRAIN/TEST does "
                           "not exist (the line names it)", "check DATADIR and the binds; tools/download_coco.py "
                           "--verify-only --out DIR")
WEIGHTS_MISSING = ExitCode(12, "weights missing", "MODEL.WEIGHT (or, resuming, the --resume checkpoint) names a "
                           "file that does not exist",
                           "WEIGHTS_DIR / WEIGHTS; tools/download_coco.py --weights-dir DIR")
BATCH_NOT_DIVISIBLE = ExitCode(13, "batch not divisible", "SOLVER.IMS_PER_BATCH or TEST.IMS_PER_BATCH is not a "
                               "multiple of the number of processes", "another global batch or number of GPUs")
TOO_FEW_GPUS = ExitCode(14, "too few GPUs", "fewer GPUs on a node than processes per node (DGXNGPU): two ranks "
                        "would share a GPU", "DGXNGPU = the GPUs per node, or other nodes")
NO_GPU = ExitCode(15, "no GPU", "a CUDA config and torch sees no GPU (no GPU requested, or a driver older than "
                  "torch's CUDA, or a container without --nv)", "ask Slurm for GPUs; the line names the driver")
# Found by the launch scripts (slurm/run_experiments.sh) before any srun; they know these numbers without the
# package (a test keeps them equal).
RUNTIME_MISSING = ExitCode(20, "container runtime missing", "CONTAINER_RUNTIME (singularity, apptainer, pyxis) is "
                           "not installed on the batch host", "load its module, or CONTAINER=none")
IMAGE_UNREADABLE = ExitCode(21, "image unreadable", "the container image CONTAINER does not exist or cannot be "
                            "read", "build it (singularity/build.sh) or fix the path")
BIND_SOURCE_MISSING = ExitCode(22, "bind source missing", "a folder to bind into the container (DATADIR, "
                               "WEIGHTS_DIR, LOGDIR's parent, CONTAINER_MOUNTS) does not exist on the host",
                               "create it or fix the path")
CACHES_NOT_DROPPED = ExitCode(23, "caches not dropped", "CLEAR_CACHES=1 and DROP_CACHES_CMD failed on the nodes "
                              "(MLPerf requires the page cache flushed before every run)",
                              "run it as root, DROP_CACHES_CMD='sudo /sbin/sysctl vm.drop_caches=3', or "
                              "CLEAR_CACHES=0 for runs not to be submitted (their logs say cache_clear false)")

EXIT_CODES = (SUCCESS, BAD_INPUT, DIVERGED, NOT_CONVERGED, RANK_LOST, INTERNAL, RECIPE_REFUSED, DATASET_MISSING,
              WEIGHTS_MISSING, BATCH_NOT_DIVISIBLE, TOO_FEW_GPUS, NO_GPU, RUNTIME_MISSING, IMAGE_UNREADABLE,
              BIND_SOURCE_MISSING, CACHES_NOT_DROPPED, STOPPED)
PREFLIGHT = {RecipeRefused: RECIPE_REFUSED, DatasetMissing: DATASET_MISSING, WeightsMissing: WEIGHTS_MISSING,
             BatchNotDivisible: BATCH_NOT_DIVISIBLE, TooFewGPUs: TOO_FEW_GPUS, NoGPU: NO_GPU}

# the user's to fix, each with a message that names what was wrong (an OSError names its file)
USER_ERRORS = (UserError, EvaluationFailed)
# OSErrors that are the user's to fix: a file missing, unreadable or a folder, or a named file on a full or
# read-only disk; any other (too many open files, no memory, a full /dev/shm inside torch) is internal
PATH_ERRORS = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, FileExistsError)
DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)


def _is_users(exc):
    if isinstance(exc, USER_ERRORS) or isinstance(exc, PATH_ERRORS):
        return True
    return isinstance(exc, OSError) and exc.errno in DISK_ERRNOS and bool(exc.filename)


def markdown_table():
    lines = ["| code | name | when | what to do |", "|---:|---|---|---|"]
    lines += [f"| {e.code} | {e.name} | {e.meaning} | {e.action} |" for e in EXIT_CODES]
    return "\n".join(lines)


def _one_line(exc):
    """The message of ``exc`` on one line: KeyError's bare message, and the original message of an error
    re-raised from a DataLoader worker (whose text otherwise carries the worker's whole traceback)."""
    msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
    msg = str(msg)
    if "Original Traceback" in msg:
        last = [line for line in msg.splitlines() if line.strip()][-1]
        msg = last.split(": ", 1)[1] if ": " in last else last
    lines = [line for line in msg.strip().splitlines() if line.strip()]
    return lines[0].strip() if lines else type(exc).__name__


def _where(exc):
    """``file:line (function)`` of the innermost frame of ``exc`` in this package (else the innermost)."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "?"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    # the checkout's files, not the libraries of a venv made inside it (make's .venv)
    ours = [f for f in frames if os.path.abspath(f.filename).startswith(root + os.sep)
            and not {"site-packages", "dist-packages"} & set(os.path.abspath(f.filename).split(os.sep))]
    f = (ours or frames)[-1]
    name = os.path.relpath(f.filename, root) if ours else f.filename
    return f"{name}:{f.lineno} ({f.name})"


def _raised_while_handling(exc, kind):
    """Whether ``exc`` was raised while (or from) an exception of ``kind`` being handled (its chain)."""
    return any(isinstance(e, kind) for e in list(exception_chain(exc))[1:])


# torch's error when its SIGCHLD handler finds a loader worker ended by a signal (strsignal's name of the signal)
_WORKER_KILLED = re.compile(r"DataLoader worker \(pid \d+\) is killed by signal: (.+?)\.")


def _stop_signal_that_ended_a_loader_worker(exc):
    """The stop signal (SIGTERM, SIGINT, SIGHUP) that killed a data loader worker, as torch reports it in the
    chain of ``exc`` (the loader raises "exited unexpectedly" from it), or None."""
    names = {signal.strsignal(s): s for s in signals.STOP_SIGNALS}
    for e in exception_chain(exc):
        match = _WORKER_KILLED.search(str(e))
        if match and match.group(1) in names:
            return names[match.group(1)]
    return None


def _log_traceback(exc, message):
    """Write ``message`` and the traceback of ``exc`` to the run's log (the traceback logger's file); returns that
    file's path, or None when there is no run log yet or it cannot be written."""
    tb_logger = logging.getLogger(TRACEBACK_LOGGER)
    paths = [p for p in (getattr(h, "baseFilename", None) for h in tb_logger.handlers) if p]
    if not paths:  # no run log yet (a handler-less logger would reach logging's last resort: the terminal)
        return None
    try:
        tb_logger.error(message, exc_info=(type(exc), exc, exc.__traceback__))
        for h in tb_logger.handlers:
            h.flush()
        return paths[0]
    except OSError:
        return None


def _traceback_file(exc):
    """Write the traceback to the traceback logger's file (the run's log); returns that file's path, or a
    temporary file's when no run log is set up yet or it cannot be written."""
    logged = _log_traceback(exc, "the program failed")
    if logged:
        return logged
    try:
        fd, path = tempfile.mkstemp(prefix="maskrcnn-traceback-", suffix=".txt")
        with os.fdopen(fd, "w") as f:
            traceback.print_exception(type(exc), exc, exc.__traceback__, file=f)
        return path
    except OSError as e:
        return f"nowhere: {e.strerror}"


def describe(exc, stopped_note=""):
    """``(exit code, the error line without 'error: ')`` for an exception that ended a program. ``stopped_note``
    ends a stop's line: what the program made of the stop (the trainer: whether its MLPerf log has run_stop)."""
    note = f"; {stopped_note}" if stopped_note else ""
    if isinstance(exc, Stopped):
        return STOPPED.code + exc.signum, f"stopped by {exc}{note}"
    signum = signals.received()
    if signum is not None:
        name = signal.Signals(signum).name
        if _raised_while_handling(exc, Stopped):  # the cleanup itself failed: the user should know what
            return STOPPED.code + signum, (f"stopped by {name} ({type(exc).__name__} while stopping: "
                                           f"{_one_line(exc)}){note}")
        # The stop's own consequence overtook its Stopped: the signal reached the whole job, and a collective whose
        # peers stopped first, or a loader worker's batch, failed before Stopped was raised (or after torch printed
        # and cleared it: signals.received). The line is the stop's; the run's log keeps what failed.
        _log_traceback(exc, f"stopped by {name}; this error came before the stop was raised")
        return STOPPED.code + signum, f"stopped by {name}{note}"
    signum = _stop_signal_that_ended_a_loader_worker(exc)
    if signum is not None:  # the job's stop reached the worker first, and this process has not had it yet
        name = signal.Signals(signum).name
        _log_traceback(exc, f"stopped by {name}: it ended a data loader worker first")
        return STOPPED.code + signum, f"stopped by {name} (it ended a data loader worker first){note}"
    if isinstance(exc, KeyboardInterrupt):
        return STOPPED.code + 2, f"stopped by SIGINT{note}"
    if isinstance(exc, NonFiniteLossError):
        return DIVERGED.code, f"{exc}; aborting the run"
    if isinstance(exc, RankLost):
        return RANK_LOST.code, str(exc)
    for kind, code in PREFLIGHT.items():
        if isinstance(exc, kind):
            return code.code, _one_line(exc)
    if _is_users(exc):
        return BAD_INPUT.code, _one_line(exc)
    where = _where(exc)
    log = _traceback_file(exc)
    return INTERNAL.code, f"{type(exc).__name__} at {where}: {_one_line(exc)} (traceback in {log})"


def run_program(body, stopped_note=None):
    """Run ``body()`` (which returns an exit code) and turn any failure into one ``error:`` line and its code.

    Once ``body`` has returned or failed, a stop signal is only recorded (:func:`signals.hold`): one that comes
    while the failure is described makes the line the stop's, and none escapes as a second exception."""
    try:
        try:
            return body()
        finally:
            signals.hold()  # a Stopped raised before this line replaces body's error, and is caught below
    except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001 - one line for the user; the log keeps the rest
        received = signals.received()
        note = stopped_note() if stopped_note is not None else ""
        code, line = describe(e, note)
        if signals.received() != received:  # the stop came while describing
            code, line = describe(e, note)
        print(f"error: {line}", file=sys.stderr, flush=True)
        return code


if __name__ == "__main__":
    print(markdown_table())
