"""A program watched while it runs (its output collected as it comes), and the processes it started."""
import json
import os
import signal
import subprocess
import threading
import time


class Run:
    """A process in its own session (its pid is the session id), stdout and stderr collected line by line.
    ``threads``: the OpenMP threads it gets (1 by default: beside another busy process a 2-thread program waits
    for its preempted thread); None leaves the environment's."""

    def __init__(self, cmd, cwd, env=None, threads=1):
        e = dict(os.environ, PYTHONUNBUFFERED="1")
        if threads is not None:
            e["OMP_NUM_THREADS"] = str(threads)
        e.update(env or {})
        self.proc = subprocess.Popen(cmd, cwd=cwd, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        self.out, self.err = [], []
        self._threads = [threading.Thread(target=self._pump, args=(s, b), daemon=True)
                         for s, b in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))]
        for t in self._threads:
            t.start()

    @staticmethod
    def _pump(stream, buf):
        for line in stream:
            buf.append(line)

    def wait_for(self, needle, timeout=240):
        end = time.time() + timeout
        while time.time() < end:
            if any(needle in line for line in self.out + self.err):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"'{needle}' not seen; stdout tail: {''.join(self.out[-20:])} "
                             f"stderr tail: {''.join(self.err[-20:])}")

    def finish(self, timeout=60):
        self.proc.wait(timeout)
        for t in self._threads:
            t.join(5)
        return self.proc.returncode, "".join(self.out), "".join(self.err)

    def session_processes(self):
        """Processes still alive in the run's session."""
        alive = []
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    if os.getsid(int(pid)) == self.proc.pid:
                        alive.append(int(pid))
                except OSError:
                    pass
        return alive


def mllog_events(text):
    return [json.loads(line.split(":::MLLOG", 1)[1]) for line in text.splitlines() if ":::MLLOG" in line]


def children(ppid):
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == ppid:
                        out.append(int(pid))
            except (OSError, IndexError, ValueError):
                pass
    return out


def scorer_pid(root_pid):
    """The COCO scoring process under ``root_pid`` (the trainer, or a launcher above it): the shallowest spawned
    descendant that is not multiprocessing's resource tracker (its pool workers are below it)."""
    level = [root_pid]
    while level:
        below = []
        for pid in level:
            for child in children(pid):
                try:
                    with open(f"/proc/{child}/cmdline", "rb") as f:
                        cmd = f.read()
                except OSError:
                    continue
                if b"spawn_main" in cmd and b"resource_tracker" not in cmd:
                    return child
                below.append(child)
        level = below
    return None


def kill_scorer(run, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        pid = scorer_pid(run.proc.pid)
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            return pid
        time.sleep(0.05)
    raise AssertionError("no scoring process found")


def wait_for_event(run, key, epoch, timeout=600):
    """Until the run's MLPerf log has ``key`` for ``epoch`` (its ``epoch_num``)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if any(e["key"] == key and e.get("metadata", {}).get("epoch_num") == epoch
               for e in mllog_events("".join(run.out))):
            return
        if run.proc.poll() is not None:
            break
        time.sleep(0.05)
    raise AssertionError(f"no {key} for epoch {epoch}; stdout tail: {''.join(run.out[-20:])}")


def wait_until_idle(run, timeout=120):
    """Until every evaluated epoch has its scores (the scorer has nothing in hand)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        events = mllog_events("".join(run.out))
        evaluated = [e["metadata"]["epoch_num"] for e in events if e["key"] == "eval_stop"]
        scored = [e["metadata"]["epoch_num"] for e in events if e["key"] == "eval_accuracy"]
        if evaluated and scored and evaluated[-1] == scored[-1]:
            return
        time.sleep(0.02)
    raise AssertionError("the scorer never caught up")


