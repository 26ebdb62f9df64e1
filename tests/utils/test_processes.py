"""Helper processes that never outlive their parent (utils/processes.py)."""
import os
import subprocess
import sys
import textwrap
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A parent forks a child and dies before the child asks to die with it: what a COCO scorer killed with the trainer
# (SIGKILL) does to a pool worker it has just forked, whose initializer has not run yet. The kernel's request then
# names no parent to die with, and the worker, orphaned, waited for ever on its task queue (make test: two pool
# workers outlived a trainer killed mid-scoring).
_ORPHAN = textwrap.dedent("""
    import os, sys, time
    from maskrcnn_benchmark.utils.processes import die_with_parent

    out = sys.argv[1]
    parent = os.getpid()
    child = os.fork()
    if child == 0:
        while os.getppid() == parent:  # the parent is gone before the request
            time.sleep(0.01)
        try:
            die_with_parent(parent=parent)
            open(out, "w").write("survived")
        except Exception as e:
            open(out, "w").write(f"error: {e}")
        os._exit(0)
    os._exit(0)
""")


@pytest.mark.slow  # a process of its own
def test_a_helper_whose_parent_died_before_it_asked_to_die_with_it_exits(tmp_path):
    out = tmp_path / "survived"
    env = dict(os.environ, PYTHONPATH=ROOT)
    subprocess.run([sys.executable, "-c", _ORPHAN, str(out)], env=env, check=True, timeout=60)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not out.exists() and _running(str(out)):
        time.sleep(0.1)
    assert not out.exists(), out.read_text()
    assert not _running(str(out))


def _running(marker):
    """Whether a process whose command line holds ``marker`` is alive (the orphaned child)."""
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    return True
        except OSError:
            pass
    return False


_FORKSERVER_LOADER = textwrap.dedent("""
    import functools, multiprocessing
    import torch
    from maskrcnn_benchmark.data.build import _worker_init, _worker_parent

    multiprocessing.set_start_method(METHOD)  # forkserver: Python 3.14's default on Linux
    loader = torch.utils.data.DataLoader(list(range(8)), batch_size=2, num_workers=2,
                                         worker_init_fn=functools.partial(_worker_init, parent=_worker_parent()))
    print(sum(int(b.sum()) for b in loader))
""")


@pytest.mark.slow  # processes of its own
@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_loader_workers_start_under_every_start_method(method):
    """The loader workers' parent check took this process for their parent: under forkserver (the default from
    Python 3.14 on, which the package supports) the fork server is, and every worker exited before its first
    batch."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-c", _FORKSERVER_LOADER.replace("METHOD", repr(method))], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "28", r.stderr[-2000:]
