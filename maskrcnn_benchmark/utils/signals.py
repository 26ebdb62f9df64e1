"""Stopping a run on SIGTERM, SIGINT, SIGHUP, SIGUSR1 or SIGUSR2: unwind through the hooks instead of dying
mid-write.

Slurm (time limit, scancel, a ``--signal=USR1@<seconds>`` warning), bind_launch stopping the ranks of a failed job
or forwarding what it received, and a terminal's Ctrl-C all signal the training process; :func:`stop_on_signals`
turns the first such signal into :class:`Stopped`, raised in the main thread, so the run logs ``run_stop``
aborted, stops its scorer and loader workers and flushes its logs.

Not everywhere in the main thread: Python code that C calls and whose exceptions C discards ("Exception ignored
in ...") or prints and clears would lose it. Two such places are on a training rank's path: the at-fork hooks
(logging's lock release runs in the parent each time the loader forks a worker) and the warning machinery (torch
turns its C++ warnings into Python ones, and on the way out of a failing op prints an exception raised there and
clears it). A stop that lands in one of those is raised 10 ms later (SIGALRM), outside it.
"""
import os
import signal

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)

_RECEIVED = []  # the stop signal this process's handler took, if any
_HELD = {"pid": None, "installed": None}  # the process whose stop signals are only recorded from now on (:func:`hold`),
#                                          and the one stop_on_signals installed its handler in


def received():
    """The stop signal (a number) the main process's handler took, or None.

    :class:`Stopped` can be lost: when the signal lands while torch's C++ code turns its buffered warnings into
    Python ones on the way out of a failing op (a collective whose peers just stopped), torch prints the
    exception and clears it, and the op's own error goes on. The program still knows it was stopped."""
    return _RECEIVED[0] if _RECEIVED else None


class Stopped(Exception):
    """SIGTERM, SIGINT or SIGHUP arrived; ``signum`` says which."""

    def __init__(self, signum):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _ignore(signum, frame):
    pass


def hold():
    """From here on a stop signal is only recorded (:func:`received`), never raised, and a stop deferred by
    :func:`stop_on_signals` is not raised either. For the end of a program, once its body has returned or failed
    (:func:`maskrcnn_benchmark.cli.exit_codes.run_program`): Slurm signals every process of the job at once and
    bind_launch forwards a second copy, so the signal can come while the program reports a failure the same stop
    caused (a loader worker it killed), and a Stopped raised there would escape the report with its traceback.
    Child exits are no longer reacted to either: torch's SIGCHLD handler raises the loader error for a worker the
    same stop killed, from wherever the report is (a body that failed on its own first, before the stop came)."""
    if _HELD["installed"] != os.getpid():  # no handler of ours here (a test calling run_program): nothing to hold
        return
    _HELD["pid"] = os.getpid()
    signal.setitimer(signal.ITIMER_REAL, 0)  # a deferred stop (the handler's alarm)
    signal.signal(signal.SIGCHLD, _ignore)  # a callable: SIG_DFL would race with a SIGCHLD already pending


# at-fork hooks of the standard library that run in a training process's main thread (logging's, in the parent)
_AT_FORK = {("logging", "_releaseLock"), ("logging", "_acquireLock"),
            ("logging", "_after_at_fork_child_reinit_locks")}


def _exception_would_be_lost(frame):
    """Whether ``frame`` (where the signal landed) or a caller of it is code whose exceptions C discards, or a
    log handler (logging's: its error report, handleError, takes any exception a handler's write raises; and a
    line cut in its middle would be half a line in the MLPerf log): the stop is raised once that code is done."""
    while frame is not None:
        module = frame.f_globals.get("__name__") or ""
        if module in ("warnings", "logging") or module.startswith("logging.") or \
                (module, frame.f_code.co_name) in _AT_FORK or frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


def stop_on_signals():
    """The first stop signal (SIGTERM/SIGINT/SIGHUP/SIGUSR1/SIGUSR2) raises :class:`Stopped` in the main thread,
    once; later ones are ignored so nothing interrupts the cleanup (SIGKILL still ends it), and after :func:`hold`
    none is raised.

    Slurm and a terminal's Ctrl-C signal every process of the job, data loader workers included. Workers are
    forked and inherit this handler; in a loader worker the stop signals but SIGTERM are ignored: the main process stops its
    workers as it unwinds (a worker dies with its parent anyway), and a worker that exited at once would take along
    the shared memory of the batches it has sent (the main process fetches their file descriptors from the worker
    when it reads them, and may read one in the moment before its own Stopped is raised). SIGTERM stays torch's
    (its handler in the worker ends it, which the loader needs to terminate a stuck worker); what a dead worker
    breaks in that moment ends the program as the stop (:func:`maskrcnn_benchmark.cli.exit_codes.describe`).
    Other forked helpers (the COCO scorer's pool) end on the signal as they would
    without the handler: ``Pool.terminate()`` relies on it. Once stopping, the main process also stops reacting
    to SIGCHLD: torch's loader handler would otherwise turn a worker that exits while the run unwinds into a
    second error, in the middle of the cleanup."""
    main_pid = os.getpid()

    def handler(signum, frame):
        if os.getpid() != main_pid:
            from torch.utils.data import get_worker_info

            if get_worker_info() is not None:
                return  # a loader worker: its loader stops it (its batches in flight stay readable)
            # any other forked helper (the COCO scorer's pool): what the signal would have done, so that
            # Pool.terminate() and friends still end it
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        if not _RECEIVED:
            _RECEIVED.append(signum)
        if _HELD["pid"] == main_pid:  # raised once already, or the program is reporting how it ended
            return
        if _exception_would_be_lost(frame):
            signal.signal(signal.SIGALRM, lambda _alarm, f: handler(_RECEIVED[0], f))
            signal.setitimer(signal.ITIMER_REAL, 0.01)
            return
        for s in STOP_SIGNALS:
            signal.signal(s, signal.SIG_IGN)
        hold()  # SIGCHLD too; and a stop deferred by an earlier copy of the signal (the alarm above) is this one
        raise Stopped(_RECEIVED[0])

    _HELD.update(pid=None, installed=main_pid)
    for s in STOP_SIGNALS:
        if s == signal.SIGHUP and signal.getsignal(s) == signal.SIG_IGN:
            continue  # nohup: a hangup does not stop the run (SIGINT ignored by a shell's background job still
            #           does: run_and_time.sh forwards it to the launcher, which forwards it here)
        signal.signal(s, handler)
