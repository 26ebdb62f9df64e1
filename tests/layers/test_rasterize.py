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


@pytest.mark.parametrize("h,w", [(28, 28), (7, 13), (40, 17), (1, 1)])
def test_identical_to_pycocotools_on_random_polygons(h, w):
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
