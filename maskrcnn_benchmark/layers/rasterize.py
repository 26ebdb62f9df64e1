"""Polygon rasterization that reproduces pycocotools bit for bit, for many small masks at once, on any device.

The MLPerf reference turns each ROI's ground-truth polygons into its ``M x M`` mask target with pycocotools
(``frPyObjects`` -> ``merge`` -> ``decode``), one ROI at a time on the CPU. pycocotools' ``rleFrPoly`` works as
follows (cocoapi ``common/maskApi.c``):

1. vertices are scaled by 5 and truncated toward zero: ``X = (int)(5 x + .5)``;
2. each edge is walked one upsampled unit at a time along its longer axis, the other coordinate rounded as
   ``(int)(start + slope * t + .5)`` (the walk always starts from the endpoint with the smaller major coordinate,
   so the result does not depend on the edge's direction);
3. wherever two consecutive walk points differ in x, a y-boundary point is emitted if the smaller x maps to a
   pixel column ``n`` (``x = 5 n + 2``), at row ``ceil(clamp((min(y) + .5) / 5 - .5, 0, h))``;
4. the boundary points, as column-major indices ``n * h + row``, toggle the mask on and off (the RLE runs).

Here steps 2-3 are done per (edge, pixel column) instead of per walk point, for every pair at once on a fixed
grid (no data-dependent shape, no host sync: what a compiled step needs): along the major axis the pair of walk
points around column ``n`` is known in closed form; along the minor axis the walk step where x crosses
``5 n + 2 -> 5 n + 3`` is found from the line's equation and confirmed with the C code's own rounding on the
steps around it (the walk is monotone). Every number is computed with the same IEEE double operations in the same
order as the C code, so the result is identical, while the work is bounded by ``edges x columns`` whatever the
magnification (a 0.1 px wide ROI scales its polygon by 280 and the C walk by as many points). Step 4 is a
scatter-add of toggles and a cumulative sum; parts of one instance are then unioned, as
``merge(..., intersect=False)`` does.

Polygons come padded per mask (:func:`pad_polygons`): ``vertices (K, V, 2)``, for each vertex the index of the next
one along its part (the edge it starts) and its part (``-1``: no edge: padding, or a part of fewer than 3
vertices), and a part count ``P`` as a shape. The sizes ``V`` and ``P`` are known where the polygons are read (the
data loader), never read back from the device.
"""
import torch

_UPSAMPLE = 5  # pycocotools' ``scale``
_SEARCH = 2    # steps checked on each side of the line's crossing (the C code's rounding moves it by one at most)
# Rows x vertex slots rasterized in one pass. Each (row, vertex) slot holds about 3.7 KB of (K, V, width) float64
# temporaries at width 28 (measured on the CPU), and V is the batch's most complex instance: at the H100 recipe's
# 12 images x 128 mask rows and V = 1024 one pass would need about 5.7 GB at once. Passes of at most 2^17 slots
# (about 0.5 GB) give the same masks (each row is independent); the count of passes follows from the shapes.
ROW_VERTEX_SLOTS_PER_PASS = 1 << 17


def _walk_round(start, slope, t):
    """``(int)(start + slope * t + .5)`` of the C code: double arithmetic, truncation toward zero."""
    return torch.trunc(start + slope * t + 0.5)


def pad_polygons(part_lengths, part_mask, num_masks, min_vertices=16, min_parts=4):
    """The padded layout of flat polygons: parts of ``part_lengths`` (vertices, part after part) belonging to
    masks ``part_mask``. Returns ``(vertex_slot (V_total,) the slot of each flat vertex as mask * V + position,
    next (num_masks, V), part (num_masks, V), num_parts P)``, ``V`` and ``P`` ``min_vertices``/``min_parts``, or the
    largest counts of a mask rounded up to powers of two where those do not fit. Host side (it reads the counts)."""
    lengths = [int(v) for v in part_lengths.tolist()]
    owners = [int(v) for v in part_mask.tolist()]
    per_mask_vertices = [0] * num_masks
    per_mask_parts = [0] * num_masks
    for n, owner in zip(lengths, owners):
        per_mask_vertices[owner] += n
        per_mask_parts[owner] += 1
    v = _bucket(max(per_mask_vertices, default=0), min_vertices)
    p = _bucket(max(per_mask_parts, default=0), min_parts)
    nxt = torch.zeros((num_masks, v), dtype=torch.int64)
    part = torch.full((num_masks, v), -1, dtype=torch.int64)
    slots = []
    used = [0] * num_masks
    parts_used = [0] * num_masks
    for n, owner in zip(lengths, owners):
        start = used[owner]
        positions = torch.arange(start, start + n)
        slots.append(owner * v + positions)
        if n >= 3:
            nxt[owner, start:start + n] = torch.roll(positions, -1)
            part[owner, start:start + n] = parts_used[owner]
        used[owner] += n
        parts_used[owner] += 1
    slot = torch.cat(slots) if slots else torch.zeros((0,), dtype=torch.int64)
    return slot, nxt, part, p


def _bucket(n, minimum):
    """``minimum`` when ``n`` fits in it, else ``n`` rounded up to a power of two."""
    return int(minimum) if int(n) <= int(minimum) else 1 << (int(n) - 1).bit_length()


def rasterize_polygons(vertices, part_lengths, part_to_mask, num_masks, height, width):
    """Rasterize flat polygon parts exactly as pycocotools does and union the parts of each mask.

    Args:
        vertices: ``(V, 2)`` float tensor, the ``(x, y)`` vertices of all parts, part after part, in the
            coordinates of the ``height x width`` output grid (pixel ``(c, r)`` covers ``[c, c + 1)``).
        part_lengths: ``(P,)`` int tensor, vertices per part (parts with fewer than 3 vertices give empty
            masks, as pycocotools' polygons of fewer than 3 points would be dropped by the reference first).
        part_to_mask: ``(P,)`` int tensor, the output mask each part belongs to.
        num_masks: number of output masks.

    Returns ``(num_masks, height, width)`` bool. Pads the polygons on the host (:func:`pad_polygons`), then
    :func:`rasterize_padded`.
    """
    device = vertices.device
    slot, nxt, part, p = pad_polygons(part_lengths.cpu(), part_to_mask.cpu(), num_masks)
    v = nxt.shape[1]
    padded = torch.zeros((num_masks * v, 2), dtype=vertices.dtype, device=device)
    padded[slot.to(device)] = vertices
    return rasterize_padded(padded.view(num_masks, v, 2), nxt.to(device), part.to(device), p, height, width)


def rasterize_padded(vertices, next_index, part, num_parts, height, width):
    """Rasterize padded polygons exactly as pycocotools does, one mask per row, the parts of a row unioned.

    ``vertices (K, V, 2)`` in output-grid coordinates; ``next_index (K, V)`` the vertex each vertex's edge goes to
    (within the row); ``part (K, V)`` the part of that edge (``-1``: no edge); ``num_parts`` bounds ``part``.
    Returns ``(K, height, width)`` bool. Fixed shapes throughout, no host sync (counted within the mask-target op,
    tests/layers/test_custom_ops_sync_free.py: 0). Rows go in passes of at most :data:`ROW_VERTEX_SLOTS_PER_PASS` row x
    vertex slots (bounded memory, the same masks).
    """
    device = vertices.device
    h, w = int(height), int(width)
    k, v = next_index.shape
    num_parts = max(int(num_parts), 1)
    if k == 0 or v == 0:
        return torch.zeros((k, h, w), dtype=torch.bool, device=device)
    rows = max(1, ROW_VERTEX_SLOTS_PER_PASS // v)
    if k > rows:
        return torch.cat([_rasterize_rows(vertices[i:i + rows], next_index[i:i + rows], part[i:i + rows],
                                          num_parts, h, w) for i in range(0, k, rows)])
    return _rasterize_rows(vertices, next_index, part, num_parts, h, w)


def _rasterize_rows(vertices, next_index, part, num_parts, h, w):
    device = vertices.device
    k, v = next_index.shape

    # Step 1: upsampled integer vertices. (C casts the float32 coordinate to double first.)
    xy = torch.trunc(vertices.to(torch.float64) * _UPSAMPLE + 0.5)
    a = xy
    b = xy.gather(1, next_index[..., None].expand(-1, -1, 2))
    edge = part >= 0
    xa, ya, xb, yb = a[..., 0], a[..., 1], b[..., 0], b[..., 1]
    dx, dy = (xb - xa).abs(), (yb - ya).abs()
    major_x = dx >= dy

    # Walk start = endpoint with the smaller major coordinate (the C code's ``flip``).
    flip = torch.where(major_x, xa > xb, ya > yb)
    xs, xe = torch.where(flip, xb, xa), torch.where(flip, xa, xb)
    ys, ye = torch.where(flip, yb, ya), torch.where(flip, ya, yb)
    one = torch.ones_like(dx)
    slope = torch.where(major_x, (ye - ys) / torch.where(dx > 0, dx, one), (xe - xs) / torch.where(dy > 0, dy, one))

    # Walk x at both ends: exact for the major axis, rounded like the walk for the minor one.
    zero = torch.zeros_like(dx)
    u0 = torch.where(major_x, xs, _walk_round(xs, slope, zero))
    u1 = torch.where(major_x, xe, _walk_round(xs, slope, dy))
    rising = u1 > u0
    lo_u, hi_u = torch.minimum(u0, u1), torch.maximum(u0, u1)
    # Every (edge, column n) pair: the walk passes x = 5 n + 2 and 5 n + 3 (pixel column n) for the candidates,
    # the only consecutive x pair that emits a boundary point for column n. (K, V, W)
    c = torch.arange(w, device=device, dtype=torch.float64) * _UPSAMPLE + 2
    candidate = (lo_u[..., None] <= c) & (c + 1 <= hi_u[..., None]) & edge[..., None]
    xs, ys, slope, dy = xs[..., None], ys[..., None], slope[..., None], dy[..., None]
    rising, major_x = rising[..., None], major_x[..., None]

    # Major axis x: the walk visits every x in [xs, xe]; y is the smaller of the two walk points.
    y_major = torch.minimum(_walk_round(ys, slope, c - xs), _walk_round(ys, slope, c + 1 - xs))
    # Major axis y: x(t) = round(xs + slope t) is monotone in t = 0..dy; the first t whose x is past the column
    # (c + 1 when rising, c when falling) is near the line's crossing t* = (c + .5 - xs) / slope; the C code's
    # rounding is checked on the steps around it. The pair is (t - 1, t), its smaller y ys + t - 1.
    safe = torch.where(slope != 0, slope, torch.ones_like(slope))
    guess = torch.ceil(((c + 0.5 - xs) / safe).clamp(min=-1.0, max=2.0 ** 52))
    first = torch.full_like(guess, float("inf"))
    for offset in range(_SEARCH, -_SEARCH - 1, -1):  # from the far side: the smallest past t wins
        t = (guess + offset).clamp(min=0).minimum(dy)
        u = _walk_round(xs, slope, t)
        past = torch.where(rising, u >= c + 1, u <= c)
        first = torch.where(past, torch.minimum(first, t), first)
    y_minor = ys + first - 1
    y_raw = torch.where(major_x, y_major, y_minor)
    row = torch.ceil(((y_raw + 0.5) / _UPSAMPLE - 0.5).clamp(0, h))
    row = torch.where(candidate, row, torch.zeros_like(row))
    column = torch.arange(w, device=device)
    # column-major position; h * w (past the end: no effect) for the non-candidates and for row == h
    linear = torch.where(candidate, column * h + row.long(), h * w)
    slot = (torch.arange(k, device=device)[:, None, None] * num_parts + part.clamp(min=0)[..., None]) * (h * w + 1)
    toggles = torch.zeros((k * num_parts * (h * w + 1),), dtype=torch.int32, device=device)
    toggles.index_put_(((slot + linear).reshape(-1),), torch.ones(linear.numel(), dtype=torch.int32, device=device),
                       accumulate=True)
    toggles = toggles.view(k, num_parts, h * w + 1)
    parts = (torch.cumsum(toggles, dim=2)[..., : h * w] % 2).view(k, num_parts, w, h).transpose(2, 3)
    return parts.any(dim=1)
