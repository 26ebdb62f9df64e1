"""COCO annotation files with results around their objects, and pycocotools' own stats for them (the oracle)."""
import contextlib
import io
import json

import numpy as np
from pycocotools import mask as mask_utils
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval


def pycocotools_stats(ann_file, results, iou_type, image_ids=None):
    """The reference: pycocotools' loadRes + COCOeval + summarize, untouched (an empty result list is scored
    against an empty result COCO, as maskrcnn-benchmark's coco_eval does)."""
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(ann_file)
        if results:
            dt = gt.loadRes([dict(r) for r in results])
        else:
            dt = COCO()
            dt.dataset = {"images": gt.dataset["images"], "categories": gt.dataset["categories"], "annotations": []}
            dt.createIndex()
        ev = COCOeval(gt, dt, iou_type)
        if image_ids is not None:
            ev.params.imgIds = sorted(image_ids)
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return ev.stats, ev.eval["precision"]


def _rle(poly, h, w):
    r = mask_utils.merge(mask_utils.frPyObjects([poly], h, w))
    r["counts"] = r["counts"].decode("ascii")
    return r


def _uncompressed_rle(poly, h, w):
    """The form of COCO 2017's own crowd annotations: ``counts`` a list of run lengths (column-major, zeros
    first), not the compressed string pycocotools writes."""
    flat = mask_utils.decode(mask_utils.merge(mask_utils.frPyObjects([poly], h, w))).flatten(order="F")
    edges = np.flatnonzero(np.diff(np.concatenate(([0], flat, [1 - flat[-1]]))))  # where the value changes
    counts = np.diff(np.concatenate(([0], edges))).tolist()
    return {"size": [h, w], "counts": [int(c) for c in counts]}


def make_coco_set(tmp_path, seed=0, num_images=40, categories=(1, 3, 7, 9), crowd_rate=0.1, det_rate=3,
                  empty_image_rate=0.2, width=160, height=120, crowd_counts="compressed"):
    """A COCO annotation file plus box and mask results around its objects (crowd regions, images without
    objects, images without detections, wrong-class and duplicate detections). ``crowd_counts``: the crowd
    regions' RLE "compressed" (a string) or "uncompressed" (a list: what COCO 2017's files hold)."""
    rng = np.random.default_rng(seed)
    images, anns, bbox, segm = [], [], [], []
    for i in range(1, num_images + 1):
        images.append({"id": i, "width": width, "height": height, "file_name": f"{i}.jpg"})
        if rng.random() < empty_image_rate:
            continue
        for _ in range(int(rng.integers(1, 6))):
            x, y = rng.uniform(0, width - 20), rng.uniform(0, height - 20)
            w, h = min(rng.uniform(3, 70), width - x), min(rng.uniform(3, 70), height - y)
            poly = [x, y, x + w, y, x + w * 0.7, y + h, x, y + h * 0.8]
            crowd = int(rng.random() < crowd_rate)
            cat = int(rng.choice(categories))
            anns.append({"id": len(anns) + 1, "image_id": i, "category_id": cat, "bbox": [x, y, w, h],
                         "area": float(mask_utils.area(_rle(poly, height, width))), "iscrowd": crowd,
                         "segmentation": ((_uncompressed_rle if crowd_counts == "uncompressed" else _rle)(
                             poly, height, width) if crowd else [poly])})
            if rng.random() < 0.15:  # this image gets no detection of this object
                continue
            for _ in range(int(rng.integers(0, det_rate + 1))):
                j = rng.normal(0, 3, 4)
                b = [x + j[0], y + j[1], max(w + j[2], 1.0), max(h + j[3], 1.0)]
                score = float(np.float32(rng.random()))
                c = cat if rng.random() < 0.8 else int(rng.choice(categories))
                bbox.append({"image_id": i, "category_id": c, "bbox": b, "score": score})
                p = [b[0], b[1], b[0] + b[2], b[1], b[0] + b[2] * 0.7, b[1] + b[3], b[0], b[1] + b[3] * 0.8]
                segm.append({"image_id": i, "category_id": c, "segmentation": _rle(p, height, width), "score": score})
    path = tmp_path / f"instances_{seed}.json"
    path.write_text(json.dumps({"images": images, "annotations": anns,
                                "categories": [{"id": c, "name": f"class{c}"} for c in categories]}))
    return str(path), bbox, segm
