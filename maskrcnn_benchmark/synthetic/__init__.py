"""Deterministic synthetic COCO-format dataset: coloured shapes on textured backgrounds.

For users without COCO, for CI and for ``make demo``: a small Mask R-CNN trains on it on a CPU in a few hundred
iterations.  The output uses the COCO 2017 layout, so the same paths catalog serves real COCO and this::

    DIR/train2017/000000000001.jpg ...
    DIR/val2017/000001000001.jpg ...
    DIR/annotations/instances_train2017.json
    DIR/annotations/instances_val2017.json

Usage::

    python tools/make_synthetic_coco.py --out datasets/synthetic [--train 600] [--val 100] [--seed 0]
        [--size 128x128 | --sizes 128x128,160x128 | --min-size 96 --max-size 160] [--force] [--quiet]

    from maskrcnn_benchmark.synthetic import make_synthetic_coco
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

Parts: :mod:`.scenes` (what an image shows), :mod:`.contours` (outlines to polygons), :mod:`.writer` (the files);
the command line is :mod:`maskrcnn_benchmark.cli.make_synthetic_coco`.
"""
from .contours import loops, trace_contours
from .scenes import CATEGORIES, DEFAULT_SIZE, MAX_SIDE, MIN_SIDE, SPLITS, generate_image, sizes_between
from .writer import DEFAULT_TRAIN, DEFAULT_VAL, MARKER, MAX_IMAGES, make_synthetic_coco

__all__ = ["CATEGORIES", "DEFAULT_SIZE", "DEFAULT_TRAIN", "DEFAULT_VAL", "MAX_IMAGES", "MARKER", "MIN_SIDE",
           "MAX_SIDE", "SPLITS", "make_synthetic_coco", "generate_image", "sizes_between", "trace_contours",
           "loops"]
