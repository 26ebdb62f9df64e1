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
