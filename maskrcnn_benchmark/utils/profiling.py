"""Per-iteration profiling switched by the environment (``PROFILE=torch|memory`` in run_and_time.sh).

The training loop does::

    from maskrcnn_benchmark.utils import profiling
    prof = profiling.from_env(rank=rank)        # a no-op unless MASKRCNN_PROFILE (or PROFILE) says otherwise
    for iteration, batch in ...:
        ...
        prof.step(iteration)
    prof.close()

* ``memory``: ``<dir>/memory_rank<R>.csv`` with one row per iteration: GPU memory from ``torch.cuda`` when CUDA
  is in use (allocated / peak / reserved), and the process's resident set size (host RSS) always.
* ``torch``: a ``torch.profiler`` Chrome trace ``<dir>/torch_trace_rank<R>.json`` of a few iterations, scheduled
  by ``MASKRCNN_PROFILE_STEPS="wait,warmup,active"`` (default ``5,2,5``).
* ``nsys``/``ncu`` are wrappers around the whole run (run_and_time.sh); in Python they are a no-op.

``<dir>`` is ``MASKRCNN_PROFILE_DIR`` (run_and_time.sh sets it to the run's OUTPUT_DIR), default ``.``.
Importing this module does not import torch.
"""

from __future__ import annotations

import csv
import os
import resource
import sys
import time
from typing import Mapping, Optional

MODES = ("", "none", "nsys", "ncu", "torch", "memory")


def host_rss_bytes() -> int:
    """Resident set size of this process (bytes)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        ru = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return ru * (1 if sys.platform == "darwin" else 1024)


def _torch():
    try:
        import torch  # noqa: F401

        return torch
    except ImportError:  # pragma: no cover - torch is a dependency, but keep the module importable
        return None


class NullProfiler:
    mode = "none"

    def step(self, iteration: int) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class MemoryProfiler(NullProfiler):
    mode = "memory"
    FIELDS = ["iteration", "time_s", "rank", "device", "allocated_bytes", "max_allocated_bytes", "reserved_bytes",
              "host_rss_bytes"]

    def __init__(self, out_dir: str, rank: int = 0):
        os.makedirs(out_dir, exist_ok=True)
        self.path = os.path.join(out_dir, f"memory_rank{rank}.csv")
        self.rank = rank
        self.t0 = time.monotonic()
        torch = _torch()
        self.cuda = torch if torch is not None and torch.cuda.is_available() else None
        self._f = open(self.path, "w", newline="")
        self._w = csv.writer(self._f)
        self._w.writerow(self.FIELDS)

    def step(self, iteration: int) -> None:
        if self._f.closed:
            return
        if self.cuda is not None:
            c = self.cuda.cuda
            dev = f"cuda:{c.current_device()}"
            alloc, peak, reserved = c.memory_allocated(), c.max_memory_allocated(), c.memory_reserved()
        else:
            dev, alloc, peak, reserved = "cpu", "", "", ""
        try:
            self._w.writerow([iteration, f"{time.monotonic() - self.t0:.3f}", self.rank, dev, alloc, peak, reserved,
                              host_rss_bytes()])
            self._f.flush()
        except OSError as e:  # a full disk: named (the file), so it reads as the user's to fix, not a bug
            if e.filename:
                raise
            raise OSError(e.errno, e.strerror, self.path) from None

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()


class TorchProfiler(NullProfiler):
    mode = "torch"

    def __init__(self, out_dir: str, rank: int = 0, steps: str = "5,2,5"):
        try:
            wait, warmup, active = (int(x) for x in steps.split(","))
        except ValueError:
            from .errors import ConfigError  # here: the module loads without its package (tests, no torch)

            raise ConfigError(f"MASKRCNN_PROFILE_STEPS={steps!r}: expected wait,warmup,active (three integers, e.g. "
                              "5,2,5)") from None
        torch = _torch()
        if torch is None:
            raise RuntimeError("PROFILE=torch needs torch")
        from torch import profiler as tp

        os.makedirs(out_dir, exist_ok=True)
        self.path = os.path.join(out_dir, f"torch_trace_rank{rank}.json")
        activities = [tp.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(tp.ProfilerActivity.CUDA)
        self.exported = False

        def on_ready(p):
            p.export_chrome_trace(self.path)
            self.exported = True

        self._prof = tp.profile(activities=activities,
                                schedule=tp.schedule(wait=wait, warmup=warmup, active=active, repeat=1),
                                on_trace_ready=on_ready, record_shapes=False, profile_memory=True)
        self._prof.start()
        self._open = True

    def step(self, iteration: int) -> None:
        if self._open:
            self._prof.step()

    def close(self) -> None:
        if self._open:
            self._open = False
            self._prof.stop()


def from_env(rank: int = 0, env: Optional[Mapping[str, str]] = None):
    """The profiler selected by MASKRCNN_PROFILE (or PROFILE); only rank 0 traces in ``torch`` mode unless
    MASKRCNN_PROFILE_ALL_RANKS=1."""
    env = os.environ if env is None else env
    mode = (env.get("MASKRCNN_PROFILE") or env.get("PROFILE") or "").strip().lower()
    if mode not in MODES:
        print(f"profiling: unknown mode {mode!r}; expected one of nsys, ncu, torch, memory", file=sys.stderr)
        return NullProfiler()
    out_dir = env.get("MASKRCNN_PROFILE_DIR") or "."
    if mode == "memory":
        return MemoryProfiler(out_dir, rank)
    if mode == "torch":
        if rank != 0 and env.get("MASKRCNN_PROFILE_ALL_RANKS") != "1":
            return NullProfiler()
        return TorchProfiler(out_dir, rank, env.get("MASKRCNN_PROFILE_STEPS") or "5,2,5")
    return NullProfiler()
