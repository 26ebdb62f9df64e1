"""The batched polygon rasterizer against pycocotools (the reference's rasterizer), bit for bit."""
import numpy as np
import pytest
import torch
from pycocotools import mask as mask_utils

from maskrcnn_benchmark.layers import rasterize_polygons


def _random_part(gen, h, w):
    k = int(gen.integers(3, 10))
    kind = int(gen.integers(0, 6))
    size = max(h, w)
    if kind == 0:  # far outside and magnified (what a sub-pixel ROI does to a polygon)
        pts = gen.uniform(-3000, 3000, (k, 2))
    elif kind == 1:  # on the integer / half / fifth-pixel grid (ties of the rounding)
        pts = gen.integers(-3, size + 3, (k, 2)) / gen.choice([1, 2, 5, 10])
    elif kind == 2:  # collinear, with a duplicated vertex
        a, b = gen.uniform(-2, size + 2, (2, 2))
        pts = a + gen.uniform(0, 1, (k, 1)) * (b - a)
        pts[gen.integers(0, k)] = pts[0]
    elif kind == 3:  # tiny
        pts = gen.uniform(0, size, 2) + gen.normal(0, 0.3, (k, 2))
    elif kind == 4:  # COCO-like two-decimal coordinates
        pts = np.round(gen.uniform(0, 1, 2) * size + gen.normal(0, size / 4, (k, 2)), 2)
    else:
        pts = gen.uniform(-5, size + 5, (k, 2))
    return pts.astype(np.float32).reshape(-1)


@pytest.mark.parametrize("h,w,slots_per_pass", [(28, 28, None), (7, 13, None), (40, 17, None), (1, 1, None),
                                                 (28, 28, 1000)])
def test_identical_to_pycocotools_on_random_polygons(h, w, slots_per_pass, monkeypatch):
    """``slots_per_pass``: the rows in passes of at most that many row x vertex slots (the 1,500 masks of 16 vertex
    slots in 24 passes of 62 rows)."""
    from maskrcnn_benchmark.layers import rasterize

    if slots_per_pass:
        monkeypatch.setattr(rasterize, "ROW_VERTEX_SLOTS_PER_PASS", slots_per_pass)
    gen = np.random.default_rng(h * 100 + w)
    instances = [[_random_part(gen, h, w) for _ in range(int(gen.integers(1, 4)))] for _ in range(1500)]
    ref = []
    for parts in instances:
        rles = mask_utils.frPyObjects([p.astype(np.float64).tolist() for p in parts], h, w)
        ref.append(mask_utils.decode(mask_utils.merge(rles)))  # parts unioned (intersect=False)
    ref = torch.from_numpy(np.stack(ref)).bool()
    vertices = torch.from_numpy(np.concatenate([p.reshape(-1, 2) for parts in instances for p in parts]))
    lengths = torch.tensor([len(p) // 2 for parts in instances for p in parts])
    owner = torch.tensor([i for i, parts in enumerate(instances) for _ in parts])
    ours = rasterize_polygons(vertices, lengths, owner, len(instances), h, w)
    wrong = (ours != ref).flatten(1).any(1).nonzero().flatten().tolist()
    assert wrong == [], [instances[i] for i in wrong[:2]]


def test_overlapping_parts_are_unioned_and_empty_inputs():
    square = torch.tensor([[2.0, 2.0], [20.0, 2.0], [20.0, 20.0], [2.0, 20.0]])
    inner = square * 0.5 + 4
    out = rasterize_polygons(torch.cat((square, inner)), torch.tensor([4, 4]), torch.tensor([0, 0]), 2, 28, 28)
    alone = rasterize_polygons(square, torch.tensor([4]), torch.tensor([0]), 1, 28, 28)
    assert torch.equal(out[0], alone[0]) and not out[1].any()  # union, not even-odd; mask 1 has no part
    empty = rasterize_polygons(torch.zeros((0, 2)), torch.zeros(0, dtype=torch.int64),
                               torch.zeros(0, dtype=torch.int64), 3, 28, 28)
    assert empty.shape == (3, 28, 28) and not empty.any()


def test_passes_bound_the_largest_temporary(monkeypatch):
    """The largest tensor any op makes while rasterizing 64 masks of 64 vertex slots (a TorchDispatchMode sees every
    op, the custom ones' pieces included): about rows x V x width in one pass; with passes of 512 slots (8 rows), a
    pass's share (the output, 64 x 28 x 28, is then the largest), and the same masks."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from maskrcnn_benchmark.layers import rasterize

    class Largest(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.numel = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in (out if isinstance(out, (tuple, list)) else (out,)):
                if isinstance(t, torch.Tensor):
                    self.numel = max(self.numel, t.numel())
            return out

    gen = np.random.default_rng(0)
    parts = [_random_part(gen, 28, 28) for _ in range(63)]
    parts.insert(0, gen.uniform(0, 28, 80).astype(np.float32))  # one complex instance sets V = 64 for every row
    vertices = torch.from_numpy(np.concatenate([p.reshape(-1, 2) for p in parts]))
    lengths = torch.tensor([len(p) // 2 for p in parts])
    owner = torch.arange(64)
    with Largest() as one_pass:
        whole = rasterize_polygons(vertices, lengths, owner, 64, 28, 28)
    monkeypatch.setattr(rasterize, "ROW_VERTEX_SLOTS_PER_PASS", 512)
    with Largest() as passes:
        split = rasterize_polygons(vertices, lengths, owner, 64, 28, 28)
    assert torch.equal(whole, split)
    assert one_pass.numel >= 64 * 64 * 28
    assert passes.numel == 64 * 28 * 28, passes.numel
