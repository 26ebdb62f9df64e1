"""The content of one synthetic image: a textured background and 1-4 coloured shapes (circle, square, triangle)
that may occlude each other, rendered anti-aliased; each shape's visible region traced into one polygon.

``generate_image(seed, split, index, sizes)`` depends only on its arguments, so image ``i`` of a split is the same
whatever the number of images asked for.
"""
import math

import numpy as np
from PIL import Image, ImageDraw

from .contours import loops, signed_area, simplify

CATEGORIES = [
    {"id": 1, "name": "circle", "supercategory": "shape"},
    {"id": 3, "name": "square", "supercategory": "shape"},
    {"id": 7, "name": "triangle", "supercategory": "shape"},
]
_KINDS = [(c["id"], c["name"]) for c in CATEGORIES]

DEFAULT_SIZE = (128, 128)
MIN_SIDE, MAX_SIDE = 32, 4096

# split -> (image dir / annotation suffix, numeric code mixed into the seed, first image id, first annotation id)
SPLITS = {
    "train": ("train2017", 0, 1, 1),
    "val": ("val2017", 1, 1_000_001, 10_000_001),
}

# generation parameters
SHAPES_PER_IMAGE = (1, 4)
SIZE_FRACTION = (0.22, 0.60)    # characteristic shape size as a fraction of the shorter image side
MIN_VISIBLE_FRACTION = 0.45     # of the shape's full area, after occlusion and truncation at the border
MIN_AREA_PX = 40.0              # absolute lower bound on the visible area (pixels)
MIN_COLOR_DISTANCE = 90.0       # RGB distance to the background under the shape and to overlapping shapes
PLACEMENT_TRIES = 25
SUPERSAMPLE = 4
SIMPLIFY_TOLERANCE = 0.2        # px, Douglas-Peucker on the traced outlines


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
    outer, holes = loops(vis)
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
            p = simplify(pts, SIMPLIFY_TOLERANCE) + np.array([x0 + 0.5, y0 + 0.5], np.float64)
            polys.append(np.round(p, 2))
        flat = np.concatenate(polys)
        bx0, by0 = flat.min(0)
        bx1, by1 = flat.max(0)
        area = sum(abs(signed_area(p)) for p in polys)
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


def sizes_between(min_size, max_size, step=16):
    """All ``(W, H)`` with both sides in ``min_size, min_size+step, ..., max_size`` (max always included)."""
    sides = list(range(min_size, max_size + 1, step))
    if sides[-1] != max_size:
        sides.append(max_size)
    return [(w, h) for w in sides for h in sides]
