"""Detections in COCO terms, stored by column (cheap to gather across ranks and to send to a scorer process)."""
import numpy as np


def _rle_dicts(counts, heights, widths):
    return [{"size": [h, w], "counts": c} for c, h, w in zip(counts, np.asarray(heights).tolist(),
                                                              np.asarray(widths).tolist())]


class Detections:
    """COCO results of many images: for boxes ``image_id, category_id, bbox (xywh), score``; for masks the same
    with a compressed RLE (``counts`` strings and the image ``height, width``)."""

    mask_areas = None  # pixels per mask when the producer knows them (else computed from the RLE when needed)

    def __init__(self, box_image_ids, box_category_ids, boxes_xywh, box_scores, mask_image_ids=None,
                 mask_category_ids=None, mask_counts=None, mask_heights=None, mask_widths=None, mask_scores=None,
                 mask_areas=None):
        self.box_image_ids = np.asarray(box_image_ids, dtype=np.int64)
        self.box_category_ids = np.asarray(box_category_ids, dtype=np.int64)
        # float64 holds float32 model outputs and user-given json floats exactly
        self.boxes_xywh = np.asarray(boxes_xywh, dtype=np.float64).reshape(-1, 4)
        self.box_scores = np.asarray(box_scores, dtype=np.float64)
        none = mask_counts is None
        self.mask_image_ids = np.asarray([] if none else mask_image_ids, dtype=np.int64)
        self.mask_category_ids = np.asarray([] if none else mask_category_ids, dtype=np.int64)
        self.mask_counts = [] if none else list(mask_counts)
        self.mask_heights = np.asarray([] if none else mask_heights, dtype=np.int64)
        self.mask_widths = np.asarray([] if none else mask_widths, dtype=np.int64)
        self.mask_scores = np.asarray([] if none else mask_scores, dtype=np.float64)
        # pixels of each mask (what pycocotools' area() returns), when the producer knows it
        self.mask_areas = None if mask_areas is None else np.asarray(mask_areas, dtype=np.int64)

    def __len__(self):
        return len(self.box_scores)

    @classmethod
    def empty(cls):
        return cls([], [], np.zeros((0, 4)), [], [], [], [], [], [], [])

    @classmethod
    def concat(cls, parts):
        parts = [p for p in parts if p is not None]
        if not parts:
            return cls.empty()
        cat = np.concatenate
        areas = None
        if all(p.mask_areas is not None for p in parts):
            areas = cat([p.mask_areas for p in parts])
        return cls(cat([p.box_image_ids for p in parts]), cat([p.box_category_ids for p in parts]),
                   cat([p.boxes_xywh for p in parts]), cat([p.box_scores for p in parts]),
                   cat([p.mask_image_ids for p in parts]), cat([p.mask_category_ids for p in parts]),
                   [c for p in parts for c in p.mask_counts], cat([p.mask_heights for p in parts]),
                   cat([p.mask_widths for p in parts]), cat([p.mask_scores for p in parts]), areas)

    def take(self, box_rows, mask_rows):
        """The detections at ``box_rows`` and ``mask_rows`` (integer arrays), in that order."""
        box_rows, mask_rows = np.asarray(box_rows, dtype=np.int64), np.asarray(mask_rows, dtype=np.int64)
        return Detections(self.box_image_ids[box_rows], self.box_category_ids[box_rows], self.boxes_xywh[box_rows],
                          self.box_scores[box_rows], self.mask_image_ids[mask_rows],
                          self.mask_category_ids[mask_rows], [self.mask_counts[r] for r in mask_rows.tolist()],
                          self.mask_heights[mask_rows], self.mask_widths[mask_rows], self.mask_scores[mask_rows],
                          None if self.mask_areas is None else self.mask_areas[mask_rows])

    @classmethod
    def from_coco_lists(cls, bbox_results, segm_results=()):
        """From COCO result lists (``[{"image_id", "category_id", "bbox", "score"}, ...]`` and the same with a
        ``segmentation`` RLE)."""
        bbox_results, segm_results = list(bbox_results or []), list(segm_results or [])
        counts = [r["segmentation"]["counts"] for r in segm_results]
        return cls([r["image_id"] for r in bbox_results], [r["category_id"] for r in bbox_results],
                   [r["bbox"] for r in bbox_results], [r["score"] for r in bbox_results],
                   [r["image_id"] for r in segm_results], [r["category_id"] for r in segm_results],
                   [c.decode("ascii") if isinstance(c, bytes) else c for c in counts],
                   [r["segmentation"]["size"][0] for r in segm_results],
                   [r["segmentation"]["size"][1] for r in segm_results], [r["score"] for r in segm_results])

    def count_per_category(self):
        ids, n = np.unique(np.concatenate((self.box_category_ids, self.mask_category_ids)), return_counts=True)
        return dict(zip(ids.tolist(), n.tolist()))

    def to_coco_lists(self):
        """``(bbox_results, segm_results)``: the COCO result json lists (values as Python floats)."""
        bbox = [{"image_id": i, "category_id": c, "bbox": b, "score": s} for i, c, b, s in zip(
            self.box_image_ids.tolist(), self.box_category_ids.tolist(), self.boxes_xywh.tolist(),
            self.box_scores.tolist())]
        segm = [{"image_id": i, "category_id": c, "segmentation": r, "score": s} for i, c, r, s in zip(
            self.mask_image_ids.tolist(), self.mask_category_ids.tolist(),
            _rle_dicts(self.mask_counts, self.mask_heights, self.mask_widths), self.mask_scores.tolist())]
        return bbox, segm

    def annotations(self, iou_type, category_ids=None):
        """The result annotations COCOeval reads, as ``COCO.loadRes`` makes them (of ``category_ids`` only, if
        given), built in bulk: ``id`` (1-based position among all results, as loadRes numbers them), ``iscrowd``
        0, ``area`` (``w * h`` for boxes, the mask's pixel count for masks). The fields loadRes adds that COCOeval
        never reads are left out: the box of a mask result and the rectangle polygon of a box result."""
        if iou_type not in ("bbox", "segm"):
            raise ValueError(f"unsupported IoU type {iou_type!r}")
        cats = self.box_category_ids if iou_type == "bbox" else self.mask_category_ids
        rows = np.arange(len(cats)) if category_ids is None else np.flatnonzero(np.isin(cats, list(category_ids)))
        ids = (self.box_image_ids if iou_type == "bbox" else self.mask_image_ids)[rows].tolist()
        cats, positions = cats[rows].tolist(), (rows + 1).tolist()
        if iou_type == "bbox":
            boxes = self.boxes_xywh[rows]
            areas = (boxes[:, 2] * boxes[:, 3]).tolist()  # float64 w * h: loadRes's value, bit for bit
            return [{"image_id": i, "category_id": c, "bbox": b, "score": s, "area": a, "id": k, "iscrowd": 0}
                    for k, i, c, b, s, a in zip(positions, ids, cats, boxes.tolist(), self.box_scores[rows].tolist(),
                                                areas)]
        rles = _rle_dicts([self.mask_counts[r] for r in rows.tolist()], self.mask_heights[rows],
                          self.mask_widths[rows])
        if not rles:
            return []
        if self.mask_areas is not None:
            areas = self.mask_areas[rows].tolist()
        else:
            from pycocotools import mask as mask_utils

            # pycocotools' area() builds a uint8 array of the count first: more than 255 RLEs overflow on numpy 2
            areas = np.concatenate([mask_utils.area(rles[i:i + 255]) for i in range(0, len(rles), 255)]).tolist()
        return [{"image_id": i, "category_id": c, "segmentation": r, "score": s, "area": a, "id": k, "iscrowd": 0}
                for k, i, c, r, s, a in zip(positions, ids, cats, rles, self.mask_scores[rows].tolist(), areas)]
