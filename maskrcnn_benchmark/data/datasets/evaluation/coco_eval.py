"""COCO conversion and scoring, in one place.

``predictions_to_coco`` turns our per-image BoxLists (in original image coordinates, masks already RLE-encoded)
into COCO result lists; ``score_coco`` runs pycocotools' COCOeval for bbox and segm and returns the AP
summary plus a per-class AP table. ``score_coco`` only needs the annotation file path and plain lists, so it
runs unchanged in a separate scoring process.
"""
import contextlib
import io

import numpy as np

STAT_NAMES = ["AP", "AP50", "AP75", "APs", "APm", "APl", "AR1", "AR10", "AR100", "ARs", "ARm", "ARl"]


def encode_masks(masks):
    """``(D, 1, H, W)`` bool tensor -> list of COCO RLEs (one pycocotools call for all detections)."""
    from pycocotools import mask as mask_utils

    if masks.shape[0] == 0:
        return []
    arr = np.asfortranarray(masks[:, 0].permute(1, 2, 0).cpu().numpy().astype(np.uint8))
    rles = mask_utils.encode(arr)
    for r in rles:
        r["counts"] = r["counts"].decode("ascii")
    return rles


def predictions_to_coco(predictions, dataset):
    """``{dataset index: BoxList}`` -> (bbox results, segm results) as COCO json lists.

    Boxes are written as ``[x, y, w, h]`` with the "+1" width of the reference.
    """
    bbox, segm = [], []
    for idx, pred in predictions.items():
        image_id = dataset.id_to_img_map[idx]
        if len(pred) == 0:
            continue
        boxes = pred.convert("xywh").bbox.tolist()
        scores = pred.get_field("scores").tolist()
        labels = [dataset.contiguous_category_id_to_json_id[int(lb)] for lb in pred.get_field("labels").tolist()]
        rles = pred.get_field("rles") if pred.has_field("rles") else None
        for k, (box, score, cat) in enumerate(zip(boxes, scores, labels)):
            bbox.append({"image_id": image_id, "category_id": cat, "bbox": box, "score": score})
            if rles is not None:
                segm.append({"image_id": image_id, "category_id": cat, "segmentation": rles[k], "score": score})
    return bbox, segm


def _per_class_ap(coco_eval, coco_gt):
    """AP@[.5:.95] per category from COCOeval's precision array (area all, maxDets 100)."""
    precision = coco_eval.eval["precision"]  # (T, R, K, A, M)
    out = {}
    for k, cat_id in enumerate(coco_eval.params.catIds):
        p = precision[:, :, k, 0, -1]
        p = p[p > -1]
        out[coco_gt.cats[cat_id]["name"]] = float(p.mean()) if p.size else float("nan")
    return out


def score_coco(ann_file, bbox_results, segm_results, iou_types=("bbox", "segm"), image_ids=None):
    """COCOeval on the given results. Returns ``{iou_type: {"stats": {...}, "per_class": {...}}}``."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt = COCO(ann_file)
    out = {}
    for iou_type, results in (("bbox", bbox_results), ("segm", segm_results)):
        if iou_type not in iou_types:
            continue
        if not results:
            out[iou_type] = {"stats": {n: 0.0 for n in STAT_NAMES}, "per_class": {}}
            continue
        with contextlib.redirect_stdout(io.StringIO()):
            coco_dt = coco_gt.loadRes([dict(r) for r in results])  # loadRes adds keys: keep ours untouched
            ev = COCOeval(coco_gt, coco_dt, iou_type)
            if image_ids is not None:
                ev.params.imgIds = sorted(image_ids)
            ev.evaluate()
            ev.accumulate()
            ev.summarize()
        out[iou_type] = {"stats": dict(zip(STAT_NAMES, (float(v) for v in ev.stats))),
                         "per_class": _per_class_ap(ev, coco_gt)}
    return out


def format_per_class_table(scores):
    """Markdown table of per-class AP for bbox and segm."""
    classes = sorted(set(scores.get("bbox", {}).get("per_class", {})) | set(scores.get("segm", {}).get("per_class", {})))
    lines = ["| class | box AP | mask AP |", "|---|---:|---:|"]
    for c in classes:
        b = scores.get("bbox", {}).get("per_class", {}).get(c, float("nan"))
        s = scores.get("segm", {}).get("per_class", {}).get(c, float("nan"))
        lines.append(f"| {c} | {b:.3f} | {s:.3f} |")
    return "\n".join(lines)
