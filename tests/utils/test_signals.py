"""A stop signal that races the run's own failure: Slurm's SIGTERM reaches every process of the step at once, and
bind_launch forwards a second copy to each rank, so a rank can see its loader worker die, fail on that, and take
the SIGTERM while it is already reporting the failure, or after. The program must still end in one line with the
stop's exit code, and no traceback on the terminal (a 4-node time-limit run printed one from a rank this way)."""
import os
import signal
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow  # each test starts a program

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(script, timeout=60):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)


def _assert_stopped_in_one_line(r, line="error: stopped by SIGTERM"):  # a program that logs no run_stop
    assert r.returncode == 128 + signal.SIGTERM, r.stdout + r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().splitlines() == [line], r.stderr


def test_a_stop_while_the_failure_is_reported_ends_as_the_stop():
    """The SIGTERM lands while run_program describes the error it caught (the loader worker's death, which the
    same SIGTERM caused): it escaped run_program as an uncaught Stopped, with its traceback on the terminal."""
    r = _run("""
        import os, signal, sys
        from maskrcnn_benchmark.cli import exit_codes
        from maskrcnn_benchmark.utils.signals import stop_on_signals

        stop_on_signals()
        describe = exit_codes.describe

        def describe_while_signalled(exc, note=""):
            os.kill(os.getpid(), signal.SIGTERM)
            return describe(exc, note)

        exit_codes.describe = describe_while_signalled

        def body():
            raise RuntimeError("DataLoader worker (pid(s) 1234) exited unexpectedly")

        sys.exit(exit_codes.run_program(body))
    """)
    _assert_stopped_in_one_line(r)


def test_a_stop_after_the_program_returned_changes_nothing():
    """A SIGTERM that comes once the program's work is done (its last line printed) is not raised again."""
    r = _run("""
        import os, signal, sys
        from maskrcnn_benchmark.cli import exit_codes
        from maskrcnn_benchmark.utils.signals import stop_on_signals

        stop_on_signals()
        code = exit_codes.run_program(lambda: 0)
        os.kill(os.getpid(), signal.SIGTERM)
        print("after", code)
        sys.exit(code)
    """)
    assert r.returncode == 0 and r.stdout == "after 0\n" and r.stderr == "", r.stdout + r.stderr


def test_a_deferred_stop_is_raised_once():
    """The first SIGTERM lands where an exception would be lost (the warnings machinery) and is deferred by 10 ms;
    the second copy (bind_launch forwards the SIGTERM Slurm also sent) raises Stopped at once. The deferred one
    must not raise a second Stopped in the middle of the cleanup."""
    r = _run("""
        import os, signal, sys, time, warnings
        from maskrcnn_benchmark.cli import exit_codes
        from maskrcnn_benchmark.utils.signals import stop_on_signals

        stop_on_signals()

        def show(*args, **kwargs):
            os.kill(os.getpid(), signal.SIGTERM)

        warnings.showwarning = show

        def body():
            warnings.warn("the first copy lands in here")
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
            finally:
                time.sleep(0.2)
                print("cleanup done", flush=True)

        sys.exit(exit_codes.run_program(body))
    """)
    assert r.stdout == "cleanup done\n", r.stdout + r.stderr
    _assert_stopped_in_one_line(r)


# a dataset whose items after the first take half a second: a loader worker is busy when it is signalled
_SLOW = """
        import time
        from torch.utils.data import Dataset

        class Slow(Dataset):
            def __len__(self):
                return 1000

            def __getitem__(self, i):
                time.sleep(0.5 if i else 0.0)
                return i
"""


def test_a_loader_worker_killed_by_sigterm_is_the_stop():
    """Slurm's SIGTERM kills a loader worker (torch's handler in the worker ends it) before the rank's own copy
    arrives: the rank fails on the dead worker. That is the stop, not an internal error."""
    r = _run("""
        import os, signal, subprocess, sys, time
        from torch.utils.data import DataLoader
        from maskrcnn_benchmark.cli import exit_codes
        from maskrcnn_benchmark.utils.signals import stop_on_signals
    """ + _SLOW + """
        stop_on_signals()

        def body():
            it = iter(DataLoader(Slow(), num_workers=1, batch_size=1))
            next(it)
            # from another process, as slurmstepd sends it (torch's handler ends a worker quietly, exit code 0,
            # when the signal comes from its parent)
            subprocess.run(["kill", "-TERM", str(it._workers[0].pid)], check=True)
            for _ in it:
                pass
            return 0

        sys.exit(exit_codes.run_program(body))
    """)
    _assert_stopped_in_one_line(r, "error: stopped by SIGTERM (it ended a data loader worker first)")


def test_a_loader_worker_killed_while_the_failure_is_reported_ends_as_the_stop():
    """A rank fails first on its own (a collective whose peer was killed), then bind_launch's SIGTERM reaches the
    rank and its loader worker while the failure is reported: the worker's death raised torch's loader error from
    its SIGCHLD handler outside run_program, a traceback on the terminal and no error line (CI, a dead sibling)."""
    r = _run("""
        import os, signal, subprocess, sys, time
        from torch.utils.data import DataLoader
        from maskrcnn_benchmark.cli import exit_codes
        from maskrcnn_benchmark.utils.signals import stop_on_signals
    """ + _SLOW + """
        stop_on_signals()
        loader = {}

        def body():
            loader["it"] = iter(DataLoader(Slow(), num_workers=1, batch_size=1))
            next(loader["it"])
            raise RuntimeError("Connection closed by peer")

        describe = exit_codes.describe

        def describe_while_stopped(exc, note=""):
            # the launcher's SIGTERM, from another process (the worker's own parent would end it quietly)
            subprocess.run(["kill", "-TERM", str(loader["it"]._workers[0].pid)])
            time.sleep(0.5)  # the worker is gone: SIGCHLD
            os.kill(os.getpid(), signal.SIGTERM)
            return describe(exc, note)

        exit_codes.describe = describe_while_stopped
        sys.exit(exit_codes.run_program(body))
    """)
    _assert_stopped_in_one_line(r)


def test_a_hangup_ignored_at_start_stays_ignored():
    """``nohup python tools/train_mlperf.py ... &``: the hangup nohup ignores must not stop the run."""
    r = _run("""
        import os, signal, sys, time
        from maskrcnn_benchmark.cli import exit_codes
        from maskrcnn_benchmark.utils.signals import stop_on_signals

        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # nohup
        stop_on_signals()

        def body():
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(0.2)
            print("ran on", flush=True)
            return 0

        sys.exit(exit_codes.run_program(body))
    """)
    assert r.returncode == 0 and r.stdout == "ran on\n" and r.stderr == "", r.stdout + r.stderr


@pytest.mark.parametrize("name", ["SIGUSR1", "SIGUSR2"])
def test_slurms_warning_signals_stop_the_run_as_sigterm_does(name):
    """bind_launch forwards SIGUSR1/SIGUSR2 to the ranks (a Slurm ``--signal=USR1@120`` warning, ``scancel -s
    USR1``), and the trainer had no handler for them: each rank died at once, without run_stop or its cleanup."""
    r = _run(f"""
        import os, signal, sys, time
        from maskrcnn_benchmark.cli import exit_codes
        from maskrcnn_benchmark.utils.signals import stop_on_signals

        stop_on_signals()

        def body():
            try:
                os.kill(os.getpid(), signal.{name})
                time.sleep(5)
            finally:
                print("cleanup done", flush=True)

        sys.exit(exit_codes.run_program(body))
    """)
    assert r.stdout == "cleanup done\n", r.stdout + r.stderr
    assert r.returncode == 128 + getattr(signal, name), r.stdout + r.stderr
    assert r.stderr.strip().splitlines() == [f"error: stopped by {name}"], r.stderr


@pytest.mark.parametrize("handler", ["terminal", "mlperf"])
def test_a_stop_while_a_line_is_logged_still_stops_the_run(handler):
    """The signal landing inside a log handler's write (a slow stdout pipe under srun or | tee: every metrics
    line, every MLPerf line): the handler's own error report (logging's handleError) swallowed the Stopped, after
    the signal handler had already set every later stop signal to be ignored, and the run could no longer be
    stopped. The stop is raised as the line is done."""
    r = _run(f"""
        import io, os, signal, sys, time
        from maskrcnn_benchmark.utils.signals import Stopped, stop_on_signals

        class Slow(io.StringIO):
            def write(self, text):
                if "first" in text:
                    os.kill(os.getpid(), signal.SIGTERM)
                return super().write(text)

        stop_on_signals()
        stream = Slow()
        if "{handler}" == "terminal":
            import logging
            from maskrcnn_benchmark.utils.logger import _TerminalHandler
            log = logging.getLogger("t")
            log.addHandler(_TerminalHandler(stream))
            log.propagate = False
            say = lambda text: log.warning(text)
        else:
            from maskrcnn_benchmark.utils.mlperf_logger import MLPerfLogger
            ml = MLPerfLogger(stream=stream)
            say = lambda text: ml.event("first" if "first" in text else "second_key", 1)
        try:
            say("first line")
            time.sleep(1.0)
            say("second line")
            print("not stopped")
        except Stopped as e:
            print("stopped by", e)
        print("lines:", stream.getvalue().count("first"))
        """)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Logging error" not in r.stderr and "stopped by SIGTERM" in r.stdout and "lines: 1" in r.stdout, \
        r.stdout + r.stderr
