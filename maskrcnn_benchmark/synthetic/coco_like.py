"""COCO-sized stand-ins for measuring and testing the input pipeline: JPEGs of COCO's sizes (640x480 and 480x640,
quality 90, smooth content that compresses like photographs) with 7 polygon instances each, in the COCO 2017
layout. Not meant to be learned from (that is :func:`maskrcnn_benchmark.synthetic.make_synthetic_coco`); cheap to
make (no supersampled rendering).

    write_coco_like("/tmp/coco_like", num_images=120)   # -> train2017/, annotations/instances_train2017.json
"""
import io
import json
import math
import os

import numpy as np
from PIL import Image

from ..utils.fileio import write_bytes, write_text

SIZES = ((640, 480), (480, 640))
INSTANCES = 7
CATEGORIES = [{"id": c, "name": f"thing{c}"} for c in (1, 2, 3, 5, 8)]


def _pixels(rng, width, height):
    """Smooth colour fields with some texture: JPEG sizes like a photograph's (about 100-150 KB at q90)."""
    coarse = rng.random((height // 16 + 2, width // 16 + 2, 3)) * 255
    img = Image.fromarray(coarse.astype(np.uint8)).resize((width, height), Image.BICUBIC)
    noise = rng.normal(0, 12, (height, width, 3))
    return np.clip(np.asarray(img, np.float32) + noise, 0, 255).astype(np.uint8)


def _polygon(rng, width, height):
    cx, cy = rng.uniform(0.15, 0.85) * width, rng.uniform(0.15, 0.85) * height
    r = rng.uniform(0.05, 0.2) * min(width, height)
    n = int(rng.integers(8, 24))
    angles = np.sort(rng.uniform(0, 2 * math.pi, n))
    radii = r * rng.uniform(0.6, 1.0, n)
    xs = np.clip(cx + radii * np.cos(angles), 0, width - 1)
    ys = np.clip(cy + radii * np.sin(angles), 0, height - 1)
    return [round(float(v), 2) for xy in zip(xs, ys) for v in xy]


def _area(poly, width, height):
    """What COCO's files give as a polygon instance's area: its pixels, as pycocotools rasterises it (COCOeval's
    small / medium / large ranges read it)."""
    from pycocotools import mask as mask_utils

    return float(mask_utils.area(mask_utils.frPyObjects([poly], height, width))[0])


def write_coco_like(out_dir, num_images=120, seed=0, split="train2017", quality=90):
    """Write the images and their annotation file; returns ``(image_dir, ann_file)``."""
    rng = np.random.default_rng(seed)
    image_dir = os.path.join(out_dir, split)
    os.makedirs(image_dir, exist_ok=True)
    images, annotations = [], []
    for i in range(1, num_images + 1):
        width, height = SIZES[i % 2]
        buf = io.BytesIO()
        Image.fromarray(_pixels(rng, width, height)).save(buf, format="JPEG", quality=quality)
        name = f"{i:012d}.jpg"
        write_bytes(os.path.join(image_dir, name), buf.getvalue(), what="image", fsync=False)
        images.append({"id": i, "file_name": name, "width": width, "height": height})
        for _ in range(INSTANCES):
            poly = _polygon(rng, width, height)
            xs, ys = poly[0::2], poly[1::2]
            x0, y0 = min(xs), min(ys)
            annotations.append({"id": len(annotations) + 1, "image_id": i,
                                "category_id": int(rng.choice([c["id"] for c in CATEGORIES])),
                                "segmentation": [poly], "area": _area(poly, width, height),
                                "bbox": [x0, y0, max(xs) - x0, max(ys) - y0], "iscrowd": 0})
    ann_file = os.path.join(out_dir, "annotations", f"instances_{split}.json")
    write_text(ann_file, json.dumps({"images": images, "annotations": annotations, "categories": CATEGORIES}),
               what="annotation file")
    return image_dir, ann_file
