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
