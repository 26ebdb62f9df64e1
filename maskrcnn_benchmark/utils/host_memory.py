"""The host allocator of a CPU run: glibc's malloc keeps freed blocks for the next step.

glibc serves every block above its mmap threshold (which grows to at most 32 MB on 64-bit) with a fresh ``mmap``
and gives it back with ``munmap`` when it is freed, so each 4 KB page of such a block is faulted in and zeroed by
the kernel again at every use. A training step at COCO sizes allocates most of its activations that way (one res2
output of two 800x1344 images is 138 MB): measured with ``bench/model_step.py --device cpu --height 800 --width
1333 --batch 2 --iters 3 --warmup 1 --models eager`` (``--glibc-malloc`` for glibc's own) on the 2-core machine,
19.3 million minor page faults and 44 s of system time in 4 steps, against 1.3 million and 3.3 s with the blocks
kept (docs/benchmarks.md).

:func:`keep_freed_blocks` sets ``M_MMAP_MAX`` to 0 (every block of the main thread, where the training step
allocates, comes from the heap; glibc still maps the blocks over 64 MB of other threads) and ``M_TRIM_THRESHOLD``
to its largest value (freed memory stays in the process for reuse, as jemalloc and tcmalloc keep it between
steps): the process's resident memory no longer shrinks after its peak. Forked children (loader workers) inherit
it. It does nothing outside glibc, or when another allocator is preloaded (``LD_PRELOAD`` naming jemalloc,
tcmalloc or mimalloc: glibc's setting would not be the one in charge). CUDA tensors do not use this allocator.
"""
import ctypes
import os

_M_TRIM_THRESHOLD = -1  # glibc's malloc.h
_M_MMAP_MAX = -4
_INT_MAX = 2 ** 31 - 1


def glibc_version():
    """glibc's version string (``"2.36"``), or None under another C library."""
    try:
        name, _, version = os.confstr("CS_GNU_LIBC_VERSION").partition(" ")
    except (AttributeError, ValueError, OSError):
        return None
    return version if name == "glibc" else None


_OTHER_ALLOCATORS = ("jemalloc", "tcmalloc", "mimalloc")


def other_allocator():
    """The preloaded allocator library that replaces glibc's malloc (``LD_PRELOAD``), or None."""
    for lib in os.environ.get("LD_PRELOAD", "").replace(":", " ").split():
        if any(name in os.path.basename(lib) for name in _OTHER_ALLOCATORS):
            return lib
    return None


def keep_freed_blocks():
    """Make glibc's malloc serve large blocks from the heap and keep freed memory. Returns True when set (glibc,
    no other allocator preloaded), False otherwise. Process-wide and permanent: call it once, in a process that
    trains on the CPU."""
    if glibc_version() is None or other_allocator() is not None:
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(_M_MMAP_MAX, 0)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, _INT_MAX))
    except (OSError, AttributeError):
        return False
