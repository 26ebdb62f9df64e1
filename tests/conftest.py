import _posixsubprocess
import multiprocessing.process
import os
import random
import subprocess

import pytest

# Under pytest-xdist (make test-fast: -n 2) the workers share the cores: 2 threads each on 2 cores would make
# every parallel region wait for a preempted thread (set in pytest_configure, where torch is imported).
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    # and the programs they start get one OpenMP thread: a 2-thread program beside another busy process spins
    # waiting for its preempted thread (measured on 2 cores: the demo's 2-thread iteration 3.3x slower beside one
    # busy process; a 1-thread program has no sibling thread to wait for).
    os.environ.setdefault("OMP_NUM_THREADS", "1")


# Every process that compiles with inductor first probes which vector ISAs the compiler can build (cpu_vec_isa:
# for each ISA the CPU's flags list, a small library built once into the cache and loaded by a new Python that
# imports torch), about 12 CPU-seconds per process, before its first kernel; the suite's processes skip the probe
# and take the ISAs the CPU's flags list (on this machine the same pick either way: avx512 avx512_vnni; a compiler
# without one of them would fail the compiled tests, not pass them with another ISA).
os.environ.setdefault("TORCHINDUCTOR_VEC_ISA_OK", "1")


def _xdist_controller(config):
    """The pytest-xdist process that hands the tests out to the workers and runs none: it imports neither torch
    nor the package (about 4 CPU-seconds and 3 s before the workers start, on 2 cores)."""
    return bool(getattr(config.option, "numprocesses", None)) and "PYTEST_XDIST_WORKER" not in os.environ


def pytest_sessionstart(session):
    if _xdist_controller(session.config):
        return
    # matplotlib builds its font cache (running fc-list in a subprocess) the first time it is imported on a
    # machine: do it here, once, so that the first test that draws a plot is not refused for starting a process.
    try:
        import matplotlib.font_manager  # noqa: F401
    except ImportError:
        pass


@pytest.fixture(autouse=True)
def _seed():
    import numpy as np
    import torch

    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)


_RUNNING = {"fast": False}  # True while a test not marked slow runs, its fixtures' setup and teardown included


def _refusing(original):
    def guarded(*args, **kwargs):
        if _RUNNING["fast"]:
            raise AssertionError("this test (or a fixture it uses) starts a process: mark it @pytest.mark.slow "
                                 "(make test-fast skips those)")
        return original(*args, **kwargs)
    return guarded


def pytest_configure(config):
    """`make test-fast` runs the tests not marked slow, in a minute: a test that starts a process (a program, a
    spawned rank, a loader worker, a scoring process), even from a module- or session-scoped fixture it uses, must
    be marked ``@pytest.mark.slow``; the guards installed here fail it if not."""
    if _xdist_controller(config):
        return
    import torch

    from helpers import guard_processes

    torch.set_num_threads(max(1, min(2, (os.cpu_count() or 1) // _WORKERS)))
    if not guard_processes(os.environ):
        return
    subprocess.Popen.__init__ = _refusing(subprocess.Popen.__init__)
    multiprocessing.process.BaseProcess.start = _refusing(multiprocessing.process.BaseProcess.start)
    # and what starts a process without them: pty forks, multiprocessing's helpers (resource tracker,
    # forkserver) through _posixsubprocess. (os.system and os.posix_spawn stay as they are: pickle must find them
    # under their own names; nothing here uses them.)
    _posixsubprocess.fork_exec = _refusing(_posixsubprocess.fork_exec)
    for name in ("fork", "forkpty"):
        if hasattr(os, name):
            setattr(os, name, _refusing(getattr(os, name)))


# The slow tests run in pytest-xdist workers with ``--dist loadfile --no-loadscope-reorder`` (make test): each test
# module is one work unit (its module fixtures are built once: the Slurm tests share one sandbox cluster), handed
# out in this order, the longest modules first, so that the workers end together (xdist's default reorders the
# units by their number of tests: the one-test demo module then started last and ran alone for minutes). Measured
# in make test (--durations) with inductor's cache cold, as on a fresh CI machine (2026-11-28: 518, 300, 281, 243,
# 237 s for the first five; the modules that compile with inductor take 2-4x their warm time), longest first:
LONGEST_FIRST = ("tests/test_demo.py", "tests/cluster/test_slurm_cluster.py",
                 "tests/engine/test_compiled_equals_eager.py", "tests/engine/test_robustness.py",
                 "tests/test_gpu_check.py", "tests/engine/test_train_mlperf.py", "tests/test_bench_smoke.py",
                 "tests/parity/test_golden_heads.py", "tests/parity/test_golden_losses.py",
                 "tests/launch/test_run_experiments.py", "tests/parity/test_golden_layers.py",
                 "tests/evaluation/test_evaluator.py", "tests/engine/test_compile_cache.py", "tests/launch/test_submit.py",
                 "tests/engine/test_failures.py", "tests/launch/test_scripts.py", "tests/review/test_submission.py",
                 "tests/review/test_review_differential.py", "tests/engine/test_compiled_run.py",
                 "tests/engine/test_tools.py", "tests/modeling/test_model.py",
                 "tests/engine/test_distributed_and_eval.py", "tests/review/test_recipe.py")


def pytest_collection_modifyitems(config, items):
    def rank(item):
        module = item.nodeid.split("::")[0]
        return LONGEST_FIRST.index(module) if module in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: the rest keep their order


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _RUNNING["fast"] = item.get_closest_marker("slow") is None
    try:
        yield
    finally:
        _RUNNING["fast"] = False
