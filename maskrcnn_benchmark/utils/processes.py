"""Helper processes that never outlive their parent, and stay quiet when it goes."""
import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def die_with_parent(sig=signal.SIGKILL, parent=None):
    """Linux: have the kernel send ``sig`` to this process when its parent exits (even by SIGKILL), so no
    helper (a COCO scorer, its pool workers, a loader worker) is left re-parented to PID 1. A no-op elsewhere.

    ``parent``: the pid of the process that started this one. A child runs this some time after it was forked or
    spawned; a parent that died in between is not there to die with, and the request would leave it running
    (a pool worker of a scorer killed with its trainer waited for ever on its task queue): it exits at once."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(sig))
    except (AttributeError, OSError):
        pass
    if parent is not None and os.getppid() != parent:
        os._exit(1)


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def keep_freed_memory(limit=1 << 30):
    """glibc: serve large allocations from the heap and keep what is freed (``mallopt`` mmap and trim thresholds
    at ``limit``), so the next image tensor of the same size reuses warm pages. By default every allocation over
    a few MB is a fresh ``mmap`` whose pages fault in one by one: that was 40 % of a loader worker's time on the
    reference input path (docs/benchmarks.md). A no-op where the C library has no ``mallopt``."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, int(limit)) and libc.mallopt(_M_TRIM_THRESHOLD, int(limit)))
    except (AttributeError, OSError):
        return False


def quiet_when_requests_are_left():
    """In a loader worker: multiprocessing's resource sharer (the worker's thread that hands its batches' shared
    memory to the main process) prints a traceback when the main process goes away in the middle of a request
    (``ConnectionResetError`` or ``EOFError`` in its handshake), which is what a run stopped by Slurm's SIGTERM
    does; the stop is the run's to report (one line), not the worker's. Any other exception reaches the previous
    ``sys.excepthook`` (which the sharer's thread calls)."""
    previous = sys.excepthook

    def hook(kind, value, tb):
        if issubclass(kind, (ConnectionError, EOFError)) and _raised_in_resource_sharer(tb):
            return
        previous(kind, value, tb)

    sys.excepthook = hook


def _raised_in_resource_sharer(tb):
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.endswith(os.path.join("multiprocessing", "resource_sharer.py")):
            return True
        tb = tb.tb_next
    return False
