"""Deterministic synthetic COCO-format dataset: coloured shapes on textured backgrounds.

For users without COCO, for CI and for ``make demo``: a small Mask R-CNN trains on it on a CPU in a few hundred
iterations.  The output uses the COCO 2017 layout, so the same paths catalog serves real COCO and this::

    DIR/train2017/000000000001.jpg ...
    DIR/val2017/000001000001.jpg ...
    DIR/annotations/instances_train2017.json
    DIR/annotations/instances_val2017.json

Usage::

    python -m maskrcnn_benchmark.data.synthetic --out datasets/synthetic [--train 600] [--val 100] [--seed 0]
        [--size 128x128 | --sizes 128x128,160x128 | --min-size 96 --max-size 160] [--force] [--quiet]

    from maskrcnn_benchmark.data.synthetic import make_synthetic_coco
    make_synthetic_coco("datasets/synthetic", num_train=600, num_val=100, image_size=(128, 128), seed=0)

Content: three categories with deliberately non-contiguous ids (1 circle, 3 square, 7 triangle), 1-4 shapes per
image, each 22-60 % of the shorter image side, rotated, in random colours that contrast with the background and
with the shapes they overlap; backgrounds are a colour gradient + optional stripes + low-frequency blotches, the
whole image gets sensor noise and is saved as JPEG (quality 90).  Later shapes may occlude earlier ones; as in
COCO the annotation is the *visible* (modal) region: each shape's visible coverage after occlusion is traced into
a polygon (own marching squares, no extra dependency), ``bbox`` is the polygon's extent and ``area`` its area.
Placements that would leave a shape less than 45 % visible, split it in two or punch a hole into it are
rejected and re-drawn, so every drawn shape is annotated and every annotation is one simple polygon.

Polygon coordinates are COCO's (and the pycocotools rasterizer's): pixel ``(c, r)`` covers
``[c, c+1] x [r, r+1]``, so ``COCO.annToMask`` reproduces the rendered visible masks.

Determinism: image ``i`` of a split depends only on ``(seed, split, i, image sizes)`` — not on the number of
images asked for — and the JSON bytes are identical for identical arguments.
"""

import argparse
import io
import json
import math
import os
import sys
import time

import numpy as np
from PIL import Image, ImageDraw

__all__ = ["CATEGORIES", "DEFAULT_SIZE", "make_synthetic_coco", "generate_image", "trace_contours", "main"]

CATEGORIES = [
    {"id": 1, "name": "circle", "supercategory": "shape"},
    {"id": 3, "name": "square", "supercategory": "shape"},
    {"id": 7, "name": "triangle", "supercategory": "shape"},
]
_KINDS = [(c["id"], c["name"]) for c in CATEGORIES]

DEFAULT_SIZE = (128, 128)
DEFAULT_TRAIN = 600
DEFAULT_VAL = 100
MIN_SIDE, MAX_SIDE = 32, 4096
MAX_IMAGES = 999_999            # per split; keeps the id ranges of the two splits disjoint

# split -> (image dir / annotation suffix, numeric code mixed into the seed, first image id, first annotation id)
SPLITS = {
    "train": ("train2017", 0, 1, 1),
    "val": ("val2017", 1, 1_000_001, 10_000_001),
}

MARKER = "maskrcnn_benchmark synthetic shapes"   # in info.description, and the name of the directory marker
_MARKER_FILE = ".maskrcnn_benchmark_synthetic"

# generation parameters
SHAPES_PER_IMAGE = (1, 4)
SIZE_FRACTION = (0.22, 0.60)    # characteristic shape size as a fraction of the shorter image side
MIN_VISIBLE_FRACTION = 0.45     # of the shape's full area, after occlusion and truncation at the border
MIN_AREA_PX = 40.0              # absolute lower bound on the visible area (pixels)
MIN_COLOR_DISTANCE = 90.0       # RGB distance to the background under the shape and to overlapping shapes
PLACEMENT_TRIES = 25
SUPERSAMPLE = 4
JPEG_QUALITY = 90
SIMPLIFY_TOLERANCE = 0.2        # px, Douglas-Peucker on the traced outlines
_TINY_LOOP = 2.0                # px^2: traced loops smaller than this are anti-aliasing dust and ignored


# ----------------------------------------------------------------------------------------------------------------
# marching squares

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
    have positive signed area (see :func:`_signed_area`), holes negative.  Saddles are resolved with the cell
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


def _signed_area(pts):
    x, y = pts[:, 0], pts[:, 1]
    return 0.5 * float(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1)))


# orientation of outer loops produced by trace_contours (derived once, so the sign convention cannot drift)
_OUTER_SIGN = 1.0 if _signed_area(trace_contours(np.pad(np.ones((3, 3)), 1))[0]) > 0 else -1.0


def _loops(field, level=0.5):
    """``(outer, holes)`` lists of ``(points, area)`` with loops below ``_TINY_LOOP`` px^2 dropped."""
    outer, holes = [], []
    for pts in trace_contours(field, level):
        area = _OUTER_SIGN * _signed_area(pts)
        if abs(area) < _TINY_LOOP:
            continue
        (outer if area > 0 else holes).append((pts, abs(area)))
    return outer, holes


def _simplify(pts, tol):
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


# ----------------------------------------------------------------------------------------------------------------
# rendering

def _shape_vertices(kind, cx, cy, size, aspect, angle, rng_jitter):
    """Polygon vertices (pixel-edge coordinates) of one shape."""
    ca, sa = math.cos(angle), math.sin(angle)
    if kind == "circle":
        rx, ry = size / 2.0, size / 2.0 * aspect
        th = np.linspace(0.0, 2.0 * math.pi, 96, endpoint=False)
        lx, ly = rx * np.cos(th), ry * np.sin(th)
    elif kind == "square":
        hx, hy = size / 2.0, size / 2.0 * aspect
        lx, ly = np.array([-hx, hx, hx, -hx]), np.array([-hy, -hy, hy, hy])
    else:  # triangle: roughly equilateral, circumradius ~0.6 * size
        r = 0.6 * size
        th = np.array([0.0, 2.0 * math.pi / 3.0, 4.0 * math.pi / 3.0]) + rng_jitter
        lx, ly = r * np.cos(th), r * np.sin(th)
    x = cx + lx * ca - ly * sa
    y = cy + lx * sa + ly * ca
    return np.stack([x, y], axis=1)


def _rasterize(verts, width, height):
    """Anti-aliased coverage (H, W) float32 of a polygon, by SUPERSAMPLE x SUPERSAMPLE box filtering.

    Pixel ``(c, r)`` covers ``[c, c+1] x [r, r+1]`` in the vertex coordinates.  Only the polygon's bounding box
    is rendered.  Returns ``(coverage, (x0, y0, x1, y1))`` with the coverage cropped to that box.
    """
    s = SUPERSAMPLE
    x0 = max(0, int(math.floor(verts[:, 0].min())))
    y0 = max(0, int(math.floor(verts[:, 1].min())))
    x1 = min(width, int(math.ceil(verts[:, 0].max())))
    y1 = min(height, int(math.ceil(verts[:, 1].max())))
    if x1 <= x0 or y1 <= y0:
        return np.zeros((0, 0), np.float32), (0, 0, 0, 0)
    canvas = Image.new("L", ((x1 - x0) * s, (y1 - y0) * s), 0)
    pts = [((x - x0) * s - 0.5, (y - y0) * s - 0.5) for x, y in verts.tolist()]
    ImageDraw.Draw(canvas).polygon(pts, fill=255)
    a = np.asarray(canvas, np.float32).reshape(y1 - y0, s, x1 - x0, s).mean(axis=(1, 3)) / 255.0
    return a, (x0, y0, x1, y1)


def _lowfreq(rng, width, height, cells, channels):
    """Smooth random field (H, W, C) in about [-1, 1]: a coarse normal grid upsampled bilinearly."""
    out = np.empty((height, width, channels), np.float32)
    for c in range(channels):
        grid = rng.standard_normal((cells, cells)).astype(np.float32)
        out[:, :, c] = np.asarray(Image.fromarray(grid, "F").resize((width, height), Image.BILINEAR))
    return out


def _background(rng, width, height):
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    side = float(max(width, height))
    c0 = rng.uniform(0.0, 255.0, 3).astype(np.float32)
    c1 = np.clip(c0 + rng.uniform(-90.0, 90.0, 3), 0.0, 255.0).astype(np.float32)
    ang = rng.uniform(0.0, 2.0 * math.pi)
    proj = (xx * math.cos(ang) + yy * math.sin(ang)) / side
    proj = (proj - proj.min()) / max(float(proj.max() - proj.min()), 1e-6)
    bg = c0 + (c1 - c0) * proj[:, :, None]
    if rng.random() < 0.6:  # stripes
        period = rng.uniform(5.0, 24.0)
        ang = rng.uniform(0.0, math.pi)
        amp = rng.uniform(8.0, 30.0)
        direction = rng.uniform(-1.0, 1.0, 3).astype(np.float32) if rng.random() < 0.5 else np.ones(3, np.float32)
        direction /= max(float(np.abs(direction).max()), 1e-6)
        wave = np.sin(2.0 * math.pi * (xx * math.cos(ang) + yy * math.sin(ang)) / period + rng.uniform(0, 6.3))
        bg = bg + amp * wave[:, :, None] * direction
    bg = bg + rng.uniform(5.0, 20.0) * _lowfreq(rng, width, height, int(rng.integers(3, 8)), 3)
    return bg


def _normalize_sizes(image_size):
    """``(W, H)`` or a sequence of ``(W, H)`` -> tuple of ``(W, H)`` int pairs (validated)."""
    if image_size is None:
        image_size = DEFAULT_SIZE
    if (isinstance(image_size, (tuple, list)) and len(image_size) == 2
            and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in image_size)):
        sizes = [tuple(image_size)]
    else:
        try:
            sizes = [tuple(s) for s in image_size]
        except TypeError:
            raise ValueError(f"image_size must be (W, H) or a list of (W, H), got {image_size!r}") from None
    if not sizes:
        raise ValueError("image_size: no sizes given")
    out = []
    for s in sizes:
        if (len(s) != 2 or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in s)
                or not all(MIN_SIDE <= v <= MAX_SIDE for v in s)):
            raise ValueError(f"image size {s!r} invalid: need two integers W, H in [{MIN_SIDE}, {MAX_SIDE}]")
        out.append((int(s[0]), int(s[1])))
    return tuple(out)


def _image_rng(seed, split, index):
    return np.random.default_rng([int(seed) & 0xFFFFFFFFFFFFFFFF, SPLITS[split][1], int(index)])


class _Shape:
    __slots__ = ("kind", "category_id", "verts", "cov", "box", "full_area", "vis", "outer", "holes", "color")


def _crop_product(shape, other):
    """Factor ``(1 - other.cov)`` on ``shape``'s box (ones where ``other`` does not reach)."""
    x0, y0, x1, y1 = shape.box
    ox0, oy0, ox1, oy1 = other.box
    fac = np.ones((y1 - y0, x1 - x0), np.float32)
    ix0, iy0, ix1, iy1 = max(x0, ox0), max(y0, oy0), min(x1, ox1), min(y1, oy1)
    if ix1 > ix0 and iy1 > iy0:
        fac[iy0 - y0:iy1 - y0, ix0 - x0:ix1 - x0] -= other.cov[iy0 - oy0:iy1 - oy0, ix0 - ox0:ix1 - ox0]
    return fac


def _boxes_overlap(a, b):
    return min(a[2], b[2]) > max(a[0], b[0]) and min(a[3], b[3]) > max(a[1], b[1])


def _acceptable(vis, full_area):
    """``(ok, outer, holes)``: one polygon, no hole, enough visible area."""
    outer, holes = _loops(vis)
    ok = (len(outer) == 1 and not holes
          and outer[0][1] >= max(MIN_AREA_PX, MIN_VISIBLE_FRACTION * full_area))
    return ok, outer, holes


def _place_shapes(rng, width, height):
    side = min(width, height)
    n_target = int(rng.integers(SHAPES_PER_IMAGE[0], SHAPES_PER_IMAGE[1] + 1))
    shapes = []
    for _ in range(n_target):
        for _try in range(PLACEMENT_TRIES):
            cat_id, kind = _KINDS[int(rng.integers(len(_KINDS)))]
            size = rng.uniform(*SIZE_FRACTION) * side
            aspect = rng.uniform(0.8, 1.0) if kind == "circle" else rng.uniform(0.7, 1.0)
            angle = rng.uniform(0.0, 2.0 * math.pi)
            jitter = rng.uniform(-0.25, 0.25, 3) * np.array([0.0, 1.0, 1.0])
            local = _shape_vertices(kind, 0.0, 0.0, size, aspect, angle, jitter)
            lo, hi = local.min(0), local.max(0)
            # centre range: allow at most ~10 % of the extent to stick out of the image
            slack = 0.1 * (hi - lo)
            xmin, xmax = -lo[0] - slack[0], width - hi[0] + slack[0]
            ymin, ymax = -lo[1] - slack[1], height - hi[1] + slack[1]
            if xmax <= xmin or ymax <= ymin:
                continue
            if shapes and rng.random() < 0.5:   # near an existing shape, to make occlusion common
                other = shapes[int(rng.integers(len(shapes)))]
                ocx, ocy = other.verts.mean(0)
                reach = 0.5 * (float(np.ptp(other.verts[:, 0])) + float(hi[0] - lo[0]))
                d = rng.uniform(0.45, 1.0) * reach
                th = rng.uniform(0.0, 2.0 * math.pi)
                cx = float(np.clip(ocx + d * math.cos(th), xmin, xmax))
                cy = float(np.clip(ocy + d * math.sin(th), ymin, ymax))
            else:
                cx, cy = rng.uniform(xmin, xmax), rng.uniform(ymin, ymax)
            verts = local + np.array([cx, cy])
            cov, box = _rasterize(verts, width, height)
            if cov.size == 0:
                continue
            x = verts[:, 0]
            y = verts[:, 1]
            full_area = abs(0.5 * float(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1))))
            new = _Shape()
            new.kind, new.category_id, new.verts, new.cov, new.box = kind, cat_id, verts, cov, box
            new.full_area, new.vis = full_area, cov
            ok, new.outer, new.holes = _acceptable(cov, full_area)
            if not ok:
                continue
            updates = []
            for old in shapes:
                if not _boxes_overlap(old.box, box):
                    continue
                vis = old.vis * _crop_product(old, new)
                ok, outer, holes = _acceptable(vis, old.full_area)
                if not ok:
                    break
                updates.append((old, vis, outer, holes))
            else:
                for old, vis, outer, holes in updates:
                    old.vis, old.outer, old.holes = vis, outer, holes
                shapes.append(new)
                break
    return shapes


def _pick_color(rng, shape, bg, shapes_below):
    x0, y0, x1, y1 = shape.box
    w = shape.cov[:, :, None]
    under = (bg[y0:y1, x0:x1] * w).sum((0, 1)) / max(float(w.sum()), 1e-6)
    refs = [under] + [s.color for s in shapes_below if _boxes_overlap(s.box, shape.box)]
    best, best_d = None, -1.0
    for _ in range(40):
        c = rng.uniform(0.0, 255.0, 3).astype(np.float32)
        d = min(float(np.linalg.norm(c - r)) for r in refs)
        if d >= MIN_COLOR_DISTANCE:
            return c
        if d > best_d:
            best, best_d = c, d
    return best


def generate_image(seed, split, index, image_size=DEFAULT_SIZE):
    """Render image ``index`` of ``split`` ("train"/"val") for ``seed``; what :func:`make_synthetic_coco` writes.

    Returns a dict: ``image`` (PIL RGB image, before JPEG), ``width``, ``height``, ``objects`` — one dict per
    annotated shape in drawing order with ``category_id``, ``name``, ``segmentation`` (list of polygons),
    ``bbox``, ``area``, ``visible_mask`` (H x W bool, the rendered visible region: coverage >= 0.5 after
    occlusion) and ``full_mask`` (H x W bool, the shape without occlusion).
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {sorted(SPLITS)}, got {split!r}")
    sizes = _normalize_sizes(image_size)
    rng = _image_rng(seed, split, index)
    width, height = sizes[int(rng.integers(len(sizes)))] if len(sizes) > 1 else sizes[0]
    bg = _background(rng, width, height)
    shapes = _place_shapes(rng, width, height)

    img = bg
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    for k, s in enumerate(shapes):
        s.color = _pick_color(rng, s, bg, shapes[:k])
        x0, y0, x1, y1 = s.box
        # a gentle shading gradient across the shape
        g = rng.uniform(-1.0, 1.0, 2)
        scale = max(float(np.ptp(s.verts[:, 0])), 1.0)
        shade = 1.0 + 0.12 * ((xx[y0:y1, x0:x1] - x0) * g[0] + (yy[y0:y1, x0:x1] - y0) * g[1]) / scale
        fill = s.color[None, None, :] * shade[:, :, None]
        a = s.cov[:, :, None]
        img[y0:y1, x0:x1] = img[y0:y1, x0:x1] * (1.0 - a) + fill * a
    img = img + rng.normal(0.0, rng.uniform(2.0, 7.0), img.shape).astype(np.float32)
    image = Image.fromarray(np.clip(np.rint(img), 0, 255).astype(np.uint8), "RGB")

    objects = []
    for s in shapes:
        x0, y0, x1, y1 = s.box
        polys = []
        for pts, _area in s.outer:
            # trace coordinates are pixel-centre indices inside the crop; COCO's are pixel-edge coordinates
            p = _simplify(pts, SIMPLIFY_TOLERANCE) + np.array([x0 + 0.5, y0 + 0.5], np.float64)
            polys.append(np.round(p, 2))
        flat = np.concatenate(polys)
        bx0, by0 = flat.min(0)
        bx1, by1 = flat.max(0)
        area = sum(abs(_signed_area(p)) for p in polys)
        visible = np.zeros((height, width), bool)
        visible[y0:y1, x0:x1] = s.vis >= 0.5
        full = np.zeros((height, width), bool)
        full[y0:y1, x0:x1] = s.cov >= 0.5
        objects.append({
            "category_id": s.category_id,
            "name": s.kind,
            "segmentation": [[round(float(v), 2) for v in p.reshape(-1)] for p in polys],
            "bbox": [round(float(bx0), 2), round(float(by0), 2), round(float(bx1 - bx0), 2),
                     round(float(by1 - by0), 2)],
            "area": round(float(area), 2),
            "visible_mask": visible,
            "full_mask": full,
        })
    return {"image": image, "width": width, "height": height, "objects": objects}


# ----------------------------------------------------------------------------------------------------------------
# writing

class _Progress:
    """One-line progress bar on stderr, only when stderr is a terminal (or a callable ``fn(split, done, total)``)."""

    def __init__(self, progress):
        self.fn = progress if callable(progress) else None
        self.bar = self.fn is None and progress is not False and _isatty(sys.stderr)
        self.last = 0.0

    def update(self, split, done, total):
        if self.fn is not None:
            self.fn(split, done, total)
            return
        if not self.bar:
            return
        now = time.monotonic()
        if done < total and now - self.last < 0.1:
            return
        self.last = now
        width = 30
        fill = int(width * done / max(total, 1))
        sys.stderr.write(f"\r{split:5s} [{'#' * fill}{'.' * (width - fill)}] {done}/{total}")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def _isatty(stream):
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _write_atomic(path, data):
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _is_ours(json_path):
    try:
        with open(json_path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return MARKER.encode() in head


def _check_out_dir(out_dir, force):
    """Create ``out_dir`` (and the three sub-folders); refuse to write over a dataset this module did not make."""
    if not isinstance(out_dir, (str, os.PathLike)) or not str(out_dir):
        raise ValueError(f"output directory must be a path, got {out_dir!r}")
    out_dir = os.fspath(out_dir)
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise ValueError(f"output path '{out_dir}' exists and is not a directory")
    ours = os.path.exists(os.path.join(out_dir, _MARKER_FILE))
    if not force and not ours:
        foreign = []
        for split, (name, *_rest) in SPLITS.items():
            ann = os.path.join(out_dir, "annotations", f"instances_{name}.json")
            if os.path.exists(ann) and not _is_ours(ann):
                foreign.append(ann)
            img_dir = os.path.join(out_dir, name)
            if os.path.isdir(img_dir):
                with os.scandir(img_dir) as it:
                    if any(e.name.lower().endswith(".jpg") for e in it):
                        foreign.append(img_dir)
        if foreign:
            raise ValueError(f"'{out_dir}' already holds a dataset not made by this generator ({foreign[0]}); "
                             "refusing to write over it (use force=True / --force)")
    try:
        for sub in ["annotations"] + [v[0] for v in SPLITS.values()]:
            os.makedirs(os.path.join(out_dir, sub), exist_ok=True)
        probe = os.path.join(out_dir, f".write_test{os.getpid()}")
        with open(probe, "wb"):
            pass
        os.unlink(probe)
    except OSError as e:
        raise OSError(e.errno, f"cannot write to output directory '{out_dir}': {e.strerror or e}") from None
    return out_dir


def _split_json(split, seed, sizes, records):
    name, _code, _first_img, first_ann = SPLITS[split]
    images, annotations = [], []
    ann_id = first_ann
    for image_id, file_name, width, height, objects in records:
        images.append({"id": image_id, "file_name": file_name, "width": width, "height": height, "license": 1})
        for o in objects:
            annotations.append({"id": ann_id, "image_id": image_id, "category_id": o["category_id"],
                                "segmentation": o["segmentation"], "area": o["area"], "bbox": o["bbox"],
                                "iscrowd": 0})
            ann_id += 1
    doc = {
        "info": {"description": f"{MARKER} ({name})", "version": "1.0", "year": 2024,
                 "contributor": "maskrcnn_benchmark.data.synthetic", "date_created": "",
                 "seed": int(seed), "split": split, "image_sizes": [list(s) for s in sizes]},
        "licenses": [{"id": 1, "name": "CC0 1.0", "url": "https://creativecommons.org/publicdomain/zero/1.0/"}],
        "images": images,
        "annotations": annotations,
        "categories": [dict(c) for c in CATEGORIES],
    }
    return json.dumps(doc, separators=(",", ":")).encode() + b"\n"


def _validate_count(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if not 0 <= value <= MAX_IMAGES:
        raise ValueError(f"{name} must be between 0 and {MAX_IMAGES}, got {value}")
    return int(value)


def make_synthetic_coco(out_dir, num_train=DEFAULT_TRAIN, num_val=DEFAULT_VAL, image_size=DEFAULT_SIZE, seed=0,
                        progress=None, force=False):
    """Write the synthetic dataset under ``out_dir`` (COCO 2017 layout) and return a summary dict.

    ``image_size``: ``(W, H)`` or a list of ``(W, H)`` (each image picks one at random).  ``progress``: ``None``
    or ``True`` — a one-line bar on stderr only when stderr is a terminal; ``False`` — nothing; a callable —
    called as ``progress(split, done, total)``.  ``force``: write even into a directory that holds a dataset
    this generator did not make (its colliding files are overwritten).

    Each split's images are written first (each file atomically) and its annotation file last, via a temporary
    file and ``os.replace``; an existing annotation file of the split is removed before its images are
    rewritten, so an interrupted run never leaves an annotation file that does not match the images.  Stale
    ``.jpg`` files of an earlier, larger run of this generator are removed.

    Returns ``{"out_dir", "seconds", "train": {...}, "val": {...}}`` with per split ``images``, ``annotations``,
    ``image_dir``, ``ann_file``, ``objects_per_image`` (histogram list), ``occluded`` (annotated shapes whose
    visible area is more than 2 % smaller than their full area: occluded or cut by the image border).
    """
    num_train = _validate_count("num_train", num_train)
    num_val = _validate_count("num_val", num_val)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    sizes = _normalize_sizes(image_size)
    out_dir = _check_out_dir(out_dir, force)
    with open(os.path.join(out_dir, _MARKER_FILE), "w") as f:
        f.write(f"{MARKER}: written by maskrcnn_benchmark.data.synthetic\n")

    bar = _Progress(progress)
    t0 = time.monotonic()
    summary = {"out_dir": out_dir}
    for split, total in (("train", num_train), ("val", num_val)):
        name, _code, first_img, _first_ann = SPLITS[split]
        img_dir = os.path.join(out_dir, name)
        ann_file = os.path.join(out_dir, "annotations", f"instances_{name}.json")
        if os.path.exists(ann_file):
            os.unlink(ann_file)
        records, hist, occluded, n_ann = [], [0] * (SHAPES_PER_IMAGE[1] + 1), 0, 0
        bar.update(split, 0, total)
        for i in range(total):
            sample = generate_image(seed, split, i, sizes)
            image_id = first_img + i
            file_name = f"{image_id:012d}.jpg"
            buf = io.BytesIO()
            sample["image"].save(buf, format="JPEG", quality=JPEG_QUALITY)
            _write_atomic(os.path.join(img_dir, file_name), buf.getvalue())
            objs = sample["objects"]
            records.append((image_id, file_name, sample["width"], sample["height"], objs))
            hist[len(objs)] += 1
            n_ann += len(objs)
            occluded += sum(int(o["visible_mask"].sum()) < 0.98 * int(o["full_mask"].sum()) for o in objs)
            for o in objs:      # keep memory flat: masks are not needed any more
                del o["visible_mask"], o["full_mask"]
            bar.update(split, i + 1, total)
        keep = {r[1] for r in records}
        with os.scandir(img_dir) as it:
            stale = [e.path for e in it if e.name.endswith(".jpg") and e.name not in keep
                     and len(e.name) == 16 and e.name[:12].isdigit()]
        for path in stale:
            os.unlink(path)
        _write_atomic(ann_file, _split_json(split, seed, sizes, records))
        summary[split] = {"images": total, "annotations": n_ann, "image_dir": img_dir, "ann_file": ann_file,
                          "objects_per_image": hist, "occluded": occluded}
    summary["seconds"] = time.monotonic() - t0
    return summary


# ----------------------------------------------------------------------------------------------------------------
# command line

class _Parser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _count(text):
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid count '{text}' (need a non-negative integer)") from None
    if not 0 <= v <= MAX_IMAGES:
        raise argparse.ArgumentTypeError(f"count {v} out of range (0..{MAX_IMAGES})")
    return v


def _side(text):
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid image side '{text}' (need an integer)") from None
    if not MIN_SIDE <= v <= MAX_SIDE:
        raise argparse.ArgumentTypeError(f"image side {v} out of range ({MIN_SIDE}..{MAX_SIDE})")
    return v


def _seed(text):
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid seed '{text}' (need a non-negative integer)") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"invalid seed {v} (need a non-negative integer)")
    return v


def _sizes(text):
    out = []
    for part in text.split(","):
        part = part.strip().lower()
        try:
            w, h = (int(v) for v in part.split("x"))
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid size '{part}' (need WxH, e.g. 128x128)") from None
        if not (MIN_SIDE <= w <= MAX_SIDE and MIN_SIDE <= h <= MAX_SIDE):
            raise argparse.ArgumentTypeError(f"size '{part}' out of range (sides {MIN_SIDE}..{MAX_SIDE})")
        out.append((w, h))
    return out


def sizes_between(min_size, max_size, step=16):
    """All ``(W, H)`` with both sides in ``min_size, min_size+step, ..., max_size`` (max always included)."""
    sides = list(range(min_size, max_size + 1, step))
    if sides[-1] != max_size:
        sides.append(max_size)
    return [(w, h) for w in sides for h in sides]


def main(argv=None, prog=None):
    p = _Parser(prog=prog, description="Write a deterministic synthetic COCO-format dataset (shapes on textured "
                                       "backgrounds) in the COCO 2017 layout.")
    p.add_argument("--out", required=True, help="output directory (train2017/, val2017/, annotations/)")
    p.add_argument("--train", type=_count, default=DEFAULT_TRAIN, help=f"training images (default {DEFAULT_TRAIN})")
    p.add_argument("--val", type=_count, default=DEFAULT_VAL, help=f"validation images (default {DEFAULT_VAL})")
    p.add_argument("--seed", type=_seed, default=0, help="random seed (default 0)")
    p.add_argument("--size", "--sizes", dest="sizes", type=_sizes, action="append",
                   help="image size WxH; a comma list or repeated for several (default 128x128)")
    p.add_argument("--min-size", type=_side, help="random sizes: smallest side (with --max-size, steps of 16)")
    p.add_argument("--max-size", type=_side, help="random sizes: largest side")
    p.add_argument("--force", action="store_true", help="write into a directory holding a dataset not made here")
    p.add_argument("--quiet", action="store_true", help="no summary line")
    args = p.parse_args(argv)

    if (args.min_size is None) != (args.max_size is None):
        p.error("--min-size and --max-size go together")
    if args.min_size is not None:
        if args.sizes:
            p.error("--size cannot be combined with --min-size/--max-size")
        if args.min_size > args.max_size:
            p.error(f"--min-size {args.min_size} is larger than --max-size {args.max_size}")
        sizes = sizes_between(args.min_size, args.max_size)
    elif args.sizes:
        sizes = [s for group in args.sizes for s in group]
    else:
        sizes = [DEFAULT_SIZE]
    try:
        summary = make_synthetic_coco(args.out, num_train=args.train, num_val=args.val, image_size=sizes,
                                      seed=args.seed, force=args.force)
    except (ValueError, OSError) as e:
        if isinstance(e, OSError) and e.strerror:
            msg = f"{e.strerror}: '{e.filename}'" if e.filename else e.strerror
        else:
            msg = str(e)
        print(f"{p.prog}: error: {msg}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{p.prog}: interrupted", file=sys.stderr)
        return 130
    if not args.quiet:
        tr, va = summary["train"], summary["val"]
        print(f"wrote {tr['images']} train / {va['images']} val images ({tr['annotations']} / {va['annotations']} "
              f"objects) to {summary['out_dir']} in {summary['seconds']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(prog="python -m maskrcnn_benchmark.data.synthetic"))
