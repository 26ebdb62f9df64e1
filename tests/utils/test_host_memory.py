import subprocess
import sys
import textwrap

import pytest

from helpers import REPO
from maskrcnn_benchmark.utils.host_memory import glibc_version, keep_freed_blocks, other_allocator

# In a process of its own (the setting is process-wide): 64 MB tensors, each written and freed, and the minor
# page faults that five of them cost once the process is in its steady state (the kernel's count, getrusage).
_CHILD = textwrap.dedent("""
    import resource, sys
    import torch
    from maskrcnn_benchmark.utils.host_memory import keep_freed_blocks
    if sys.argv[1] == "keep":
        assert keep_freed_blocks()
    def block():
        t = torch.empty(16 * 2 ** 20, dtype=torch.float32).fill_(1.0)
        del t
    for _ in range(10):  # the heap grows over the first blocks (faulting their pages in) whatever the setting
        block()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(5):
        block()
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
""")


def _faults(mode):
    out = subprocess.run([sys.executable, "-c", _CHILD, mode], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.split()[-1])


@pytest.mark.slow
@pytest.mark.skipif(glibc_version() is None or other_allocator() is not None,
                    reason="glibc's malloc only (another C library or a preloaded allocator: nothing is set)")
def test_kept_blocks_are_reused_without_page_faults():
    # glibc's default: each 64 MB block is a fresh mmap, its 16,384 pages faulted in again at every use (fewer
    # faults with transparent huge pages, but five blocks' worth either way); kept: the heap's pages are reused.
    # Measured here: 81,925 against 0.
    default, kept = _faults("default"), _faults("keep")
    assert kept * 5 < default, (default, kept)


def test_a_preloaded_allocator_is_left_in_charge(monkeypatch):
    # jemalloc or tcmalloc preloaded: glibc's mallopt would set an allocator that serves nothing; nothing is set
    monkeypatch.setenv("LD_PRELOAD", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2")
    assert other_allocator() == "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
    assert keep_freed_blocks() is False
    monkeypatch.setenv("LD_PRELOAD", "/opt/lib/libfoo.so:/usr/lib/libtcmalloc_minimal.so.4")
    assert other_allocator() == "/usr/lib/libtcmalloc_minimal.so.4"
    monkeypatch.setenv("LD_PRELOAD", "/opt/lib/libfoo.so")
    assert other_allocator() is None
