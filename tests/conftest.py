import multiprocessing.process
import os
import random
import subprocess

import numpy as np
import pytest
import torch

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


def pytest_sessionstart(session):
    # matplotlib builds its font cache (running fc-list in a subprocess) the first time it is imported on a
    # machine: do it here, once, so that the first test that draws a plot is not refused for starting a process.
    try:
        import matplotlib.font_manager  # noqa: F401
    except ImportError:
        pass


@pytest.fixture(autouse=True)
def _seed():
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _processes_only_in_slow_tests(request, monkeypatch):
    """`make test-fast` runs the tests not marked slow, in minutes: a test that starts a process (a program, a
    spawned rank, a loader worker, a scoring process) must be marked ``@pytest.mark.slow``; this fails it if not."""
    if request.node.get_closest_marker("slow") is not None:
        return

    def refuse(*args, **kwargs):
        raise AssertionError("this test starts a process: mark it @pytest.mark.slow (make test-fast skips those)")

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", refuse)
    monkeypatch.setattr(os, "fork", refuse)
