"""Closed outlines of a coverage field, as COCO polygons: marching squares with oriented segments, loop areas,
and Douglas-Peucker simplification. Standard library and numpy only (no extra dependency for the generator)."""
import math

import numpy as np

_TINY_LOOP = 2.0                # px^2: traced loops smaller than this are anti-aliasing dust and ignored


def _build_tables():
    """Oriented segment tables for the 16 marching-squares cases (+ the two saddle variants).

    Cell corners: bit 0 top-left, 1 top-right, 2 bottom-right, 3 bottom-left.  Local edges: 0 top, 1 right,
    2 bottom, 3 left.  Segments are oriented so that the inside (value > level) always lies on the same side,
    which makes every crossing point the start of exactly one segment and the end of exactly one.
    """
    corner_xy = [(0.0, 0.0), (1.0, 0.0), (1.0, 1.0), (0.0, 1.0)]
    edge_xy = [(0.5, 0.0), (1.0, 0.5), (0.5, 1.0), (0.0, 0.5)]
    edge_corners = [(0, 1), (1, 2), (3, 2), (0, 3)]
    corner_edges = {0: (0, 3), 1: (0, 1), 2: (1, 2), 3: (2, 3)}

    def orient(a, b, inside):
        shared = set(edge_corners[a]) & set(edge_corners[b])
        c = shared.pop() if shared else 0
        (ax, ay), (bx, by), (cx, cy) = edge_xy[a], edge_xy[b], corner_xy[c]
        cross = (bx - ax) * (cy - ay) - (by - ay) * (cx - ax)
        return (a, b) if (cross > 0) == bool(inside[c]) else (b, a)

    tables = {}
    for case in range(16):
        inside = [(case >> k) & 1 for k in range(4)]
        crossing = [e for e in range(4) if inside[edge_corners[e][0]] != inside[edge_corners[e][1]]]
        if len(crossing) == 2:
            tables[case] = [orient(crossing[0], crossing[1], inside)]
        elif len(crossing) == 4:
            for center_inside in (0, 1):
                # cut off the corners whose status differs from the centre's
                cut = [k for k in range(4) if inside[k] != center_inside]
                tables[(case, center_inside)] = [orient(*corner_edges[k], inside) for k in cut]
    return tables


_TABLES = _build_tables()
_SEG_FROM = np.full(16, -1, np.int64)
_SEG_TO = np.full(16, -1, np.int64)
for _case, _segs in _TABLES.items():
    if isinstance(_case, int):
        _SEG_FROM[_case], _SEG_TO[_case] = _segs[0]


def trace_contours(field, level=0.5):
    """Closed iso-lines of a 2-D array at ``level`` (marching squares, linear interpolation).

    The array is treated as zero outside its bounds, so every line is closed.  Returns a list of ``(N, 2)``
    float arrays of ``(x, y) = (column, row)`` index coordinates (first point not repeated).  Outer boundaries
    have positive signed area (see :func:`signed_area`), holes negative.  Saddles are resolved with the cell
    centre value.
    """
    f = np.zeros((field.shape[0] + 2, field.shape[1] + 2), np.float64)
    f[1:-1, 1:-1] = field
    hp, wp = f.shape
    ins = f > level
    case = (ins[:-1, :-1] * 1 + ins[:-1, 1:] * 2 + ins[1:, 1:] * 4 + ins[1:, :-1] * 8).astype(np.int64)
    ci, cj = np.nonzero((case != 0) & (case != 15))
    if ci.size == 0:
        return []
    cases = case[ci, cj]
    # global ids of the four local edges of each cell: horizontal edge (i, j) -> i*wp+j, vertical -> hp*wp+i*wp+j
    local_ids = np.stack([ci * wp + cj, hp * wp + ci * wp + cj + 1, (ci + 1) * wp + cj, hp * wp + ci * wp + cj],
                         axis=1)
    regular = _SEG_FROM[cases] >= 0
    rows = np.nonzero(regular)[0]
    starts = [local_ids[rows, _SEG_FROM[cases[rows]]]]
    ends = [local_ids[rows, _SEG_TO[cases[rows]]]]
    for r in np.nonzero(~regular)[0]:
        i, j = ci[r], cj[r]
        center = (f[i, j] + f[i, j + 1] + f[i + 1, j] + f[i + 1, j + 1]) / 4.0 > level
        for a, b in _TABLES[(int(cases[r]), int(center))]:
            starts.append(local_ids[r:r + 1, a])
            ends.append(local_ids[r:r + 1, b])
    starts = np.concatenate(starts)
    ends = np.concatenate(ends)

    # crossing positions of the start edges (every crossing edge is the start of exactly one segment)
    horiz = starts < hp * wp
    e = np.where(horiz, starts, starts - hp * wp)
    ei, ej = e // wp, e % wp
    ei2 = np.where(horiz, ei, ei + 1)
    ej2 = np.where(horiz, ej + 1, ej)
    a, b = f[ei, ej], f[ei2, ej2]
    t = np.clip((level - a) / (b - a), 0.0, 1.0)
    xs = np.where(horiz, ej + t, ej).astype(np.float64)
    ys = np.where(horiz, ei, ei + t).astype(np.float64)

    index = {int(s): k for k, s in enumerate(starts.tolist())}
    nxt = [index[int(x)] for x in ends.tolist()]
    seen = np.zeros(len(starts), bool)
    loops = []
    for k0 in range(len(starts)):
        if seen[k0]:
            continue
        order = []
        k = k0
        while not seen[k]:
            seen[k] = True
            order.append(k)
            k = nxt[k]
        pts = np.stack([xs[order], ys[order]], axis=1) - 1.0   # undo the padding
        loops.append(pts)
    return loops


def signed_area(pts):
    x, y = pts[:, 0], pts[:, 1]
    return 0.5 * float(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1)))


# orientation of outer loops produced by trace_contours (derived once, so the sign convention cannot drift)
_OUTER_SIGN = 1.0 if signed_area(trace_contours(np.pad(np.ones((3, 3)), 1))[0]) > 0 else -1.0


def loops(field, level=0.5):
    """``(outer, holes)`` lists of ``(points, area)`` with loops below ``_TINY_LOOP`` px^2 dropped."""
    outer, holes = [], []
    for pts in trace_contours(field, level):
        area = _OUTER_SIGN * signed_area(pts)
        if abs(area) < _TINY_LOOP:
            continue
        (outer if area > 0 else holes).append((pts, abs(area)))
    return outer, holes


def simplify(pts, tol):
    """Douglas-Peucker for a closed polygon (split at the point farthest from the first one)."""
    n = len(pts)
    if n <= 4:
        return pts
    far = int(np.argmax(((pts - pts[0]) ** 2).sum(1)))
    keep = np.zeros(n, bool)
    keep[0] = keep[far] = True
    stack = [(0, far), (far, n)]
    while stack:
        s, e = stack.pop()
        if e - s < 2:
            continue
        p0, p1 = pts[s], pts[e % n]
        seg = pts[s + 1:e]
        d = p1 - p0
        norm = math.hypot(d[0], d[1])
        if norm < 1e-9:
            dist = np.sqrt(((seg - p0) ** 2).sum(1))
        else:
            dist = np.abs(d[0] * (seg[:, 1] - p0[1]) - d[1] * (seg[:, 0] - p0[0])) / norm
        k = int(np.argmax(dist))
        if dist[k] > tol:
            m = s + 1 + k
            keep[m] = True
            stack.append((s, m))
            stack.append((m, e))
    out = pts[keep]
    return out if len(out) >= 3 else pts
