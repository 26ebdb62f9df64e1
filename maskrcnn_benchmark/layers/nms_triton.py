"""The scan of :func:`maskrcnn_benchmark.layers.nms.nms_keep_padded` as a Triton kernel: one program per group
walks its boxes in order, keeping a box unless a kept box before it suppresses it, the suppressed set in registers
(64 boxes per word, the layout of the bitmask). Imported only where Triton is used (CUDA; or the CPU under
``TRITON_INTERPRET=1``, set before the import, as the tests do)."""
import triton
import triton.language as tl


@triton.jit
def scan_kernel(mask_ptr, valid_ptr, keep_ptr, K, W, BLOCK_W: tl.constexpr):
    g = tl.program_id(0)
    offs = tl.arange(0, BLOCK_W)
    removed = tl.zeros([BLOCK_W], dtype=tl.int64)
    for i in range(0, K):
        word = i // 64
        bit = tl.cast(i % 64, tl.int64)
        current = tl.sum(tl.where(offs == word, removed, 0), axis=0)
        free = ((current >> bit) & 1) == 0
        valid = tl.load(valid_ptr + g * K + i) != 0
        kept = free & valid
        tl.store(keep_ptr + g * K + i, kept.to(tl.int8))
        row = tl.load(mask_ptr + (g * K + i) * W + offs, mask=offs < W, other=0)
        removed = tl.where(kept, removed | row, removed)
