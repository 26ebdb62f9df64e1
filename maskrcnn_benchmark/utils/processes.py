"""Helper processes that never outlive their parent."""
import ctypes
import signal

_PR_SET_PDEATHSIG = 1


def die_with_parent(sig=signal.SIGKILL):
    """Linux: have the kernel send ``sig`` to this process when its parent exits (even by SIGKILL), so no
    helper (a COCO scorer, its pool workers) is left re-parented to PID 1. A no-op elsewhere."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(sig))
    except (AttributeError, OSError):
        pass


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
