"""COCO scoring: pycocotools (the reference) or faster-coco-eval, serial or by a pool of worker processes.

Both backends give the per-category precision/recall arrays of COCOeval's ``accumulate``; the 12 summary numbers
are always computed from them by pycocotools' own ``summarize``, so a backend can only change how fast they come,
not what they are. Categories are independent in ``accumulate`` (every entry of ``precision[:, :, k]`` depends on
category k alone), so the parallel scorer gives each worker a disjoint set of categories of one IoU type, over all
images, and writes its arrays into the full ones: the merged arrays, and hence the stats, are those of one serial
run.

Workers are forked after the ground truth and the detections are loaded (they share them copy-on-write) and
inherit this process's CPU affinity: under bind_launch they use the cores of the rank that started them, never
another rank's.
"""
import contextlib
import gc
import io
import logging
import multiprocessing
import os
import signal
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import numpy as np

from ..utils.errors import UserError
from ..utils.processes import die_with_parent
from .detections import Detections

logger = logging.getLogger(__name__)

STAT_NAMES = ["AP", "AP50", "AP75", "APs", "APm", "APl", "AR1", "AR10", "AR100", "ARs", "ARm", "ARl"]
BACKENDS = ("faster_coco_eval", "pycocotools")
_announced = set()


class ScoringError(UserError, RuntimeError):
    """Scoring could not run (missing backend, unreadable annotation file); the message says which."""


def resolve_backend(name="auto"):
    """``auto``: faster-coco-eval when it imports, else pycocotools (the reference). Logged once per choice."""
    if name not in ("auto",) + BACKENDS:
        raise ScoringError(f"unknown COCO scoring backend '{name}' (auto, {', '.join(BACKENDS)})")
    chosen = name
    if name in ("auto", "faster_coco_eval"):
        try:
            import faster_coco_eval  # noqa: F401
            chosen = "faster_coco_eval"
        except ImportError:
            if name == "faster_coco_eval":
                raise ScoringError("COCO backend faster_coco_eval requested but not installed "
                                   "(pip install faster-coco-eval)") from None
            chosen = "pycocotools"
    if chosen not in _announced:
        _announced.add(chosen)
        logger.info("COCO scoring backend: %s", chosen)
    return chosen


def _api(backend):
    if backend == "faster_coco_eval":
        from faster_coco_eval import COCO, COCOeval_faster

        return COCO, COCOeval_faster
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    return COCO, COCOeval


def default_workers():
    """The cores this process may run on (its affinity mask: bind_launch's binding of the rank)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


_GT_CACHE = {}


def load_ground_truth(ann_file, backend):
    """The ground-truth COCO object, cached per (file, backend) so a long-lived scorer loads it once."""
    key = (os.path.abspath(ann_file), backend)
    if key not in _GT_CACHE:
        coco_cls, _ = _api(backend)
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                _GT_CACHE[key] = coco_cls(ann_file)
        except (OSError, ValueError) as e:
            raise ScoringError(f"cannot read annotation file '{ann_file}': {e}") from None
    return _GT_CACHE[key]


def results_coco(gt, detections, iou_type, backend, category_ids=None):
    """The result COCO object of ``loadRes`` for our detections (of ``category_ids`` only), built in bulk (one C
    call for all RLE areas and boxes instead of one per detection); every field has loadRes's value."""
    coco_cls, _ = _api(backend)
    anns = detections.annotations(iou_type, category_ids)
    res = coco_cls()
    res.dataset = {"images": list(gt.dataset["images"]), "categories": list(gt.dataset.get("categories", [])),
                   "annotations": anns}
    with contextlib.redirect_stdout(io.StringIO()):
        res.createIndex()
    return res


# -- evaluation of one (IoU type, category set) --------------------------------------------------------------
_STATE = {}


@contextlib.contextmanager
def _no_cyclic_gc():
    """Scoring builds about a million small dicts (one per result and IoU type) and the backends add as many
    objects again; each batch of new objects triggers Python's cyclic garbage collector, which then walks all
    of them. None of them form cycles, so collection is paused while scoring runs (5x faster dict building)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _evaluate(iou_type, cat_ids):
    """One worker's share: the results of ``cat_ids`` (built here, in parallel) against the ground truth."""
    with _no_cyclic_gc():
        return _evaluate_categories(iou_type, cat_ids)


def _evaluate_categories(iou_type, cat_ids):
    gt, dets, img_ids, backend = _STATE["gt"], _STATE["detections"], _STATE["img_ids"], _STATE["backend"]
    _, cocoeval_cls = _api(backend)
    kwargs = {"print_function": lambda *a, **k: None, "rle_iou_max_workers": 1} \
        if backend == "faster_coco_eval" else {}
    dt = results_coco(gt, dets, iou_type, backend, cat_ids)
    with contextlib.redirect_stdout(io.StringIO()):
        ev = cocoeval_cls(gt, dt, iou_type, **kwargs)
        ev.params.imgIds = list(img_ids)
        ev.params.catIds = list(cat_ids)
        ev.evaluate()
        ev.accumulate()
    return iou_type, list(cat_ids), np.asarray(ev.eval["precision"]), np.asarray(ev.eval["recall"])


def _chunks(cat_ids, counts, n):
    """Split categories into ``n`` sets of similar work (detections + ground truth), heaviest first."""
    bins = [[] for _ in range(n)]
    load = [0] * n
    for c in sorted(cat_ids, key=lambda c: -counts.get(c, 0)):
        i = load.index(min(load))
        bins[i].append(c)
        load[i] += counts.get(c, 0) + 1
    return [(sorted(b), w) for b, w in zip(bins, load) if b]


def _summarize(iou_type, cat_ids, precision, recall):
    """pycocotools' own ``summarize`` on the (merged) arrays: the 12 numbers of the reference."""
    from pycocotools.cocoeval import COCOeval

    ev = COCOeval(iouType=iou_type)
    ev.params.catIds = list(cat_ids)
    ev.eval = {"precision": precision, "recall": recall}
    with contextlib.redirect_stdout(io.StringIO()):
        ev.summarize()
    return [float(v) for v in ev.stats]


def score_coco(ann_file, detections, iou_types=("bbox", "segm"), image_ids=None, backend="auto", workers=1):
    """COCO AP of ``detections`` (:class:`Detections`, or a ``(bbox_results, segm_results)`` pair of COCO result
    lists) against ``ann_file``.

    Returns ``{iou_type: {"stats": {AP, AP50, ...}, "per_class": {name: AP}}, "backend": name}``. ``workers`` > 1
    scores disjoint category sets in that many forked processes (0: one per core of this process's affinity).
    """
    with _no_cyclic_gc():
        return _score_coco(ann_file, detections, iou_types, image_ids, backend, workers)


def _score_coco(ann_file, detections, iou_types, image_ids, backend, workers):
    backend = resolve_backend(backend)
    if not isinstance(detections, Detections):
        detections = Detections.from_coco_lists(*detections)
    gt = load_ground_truth(ann_file, backend)
    img_ids = sorted(image_ids) if image_ids is not None else sorted(gt.getImgIds())
    cat_ids = sorted(gt.getCatIds())
    workers = default_workers() if not workers or workers < 0 else int(workers)
    counts = detections.count_per_category()
    for a in gt.dataset.get("annotations", []):
        counts[a["category_id"]] = counts.get(a["category_id"], 0) + 1
    tasks = []
    for t in iou_types:
        # more chunks than workers (mask IoU costs more than box IoU): the pool balances them
        per_type = 1 if workers == 1 else 2 * workers
        tasks += [(t, chunk, load * (3 if t == "segm" else 1)) for chunk, load in _chunks(cat_ids, counts, per_type)]
    tasks.sort(key=lambda x: -x[2])
    _STATE.update(gt=gt, detections=detections, img_ids=img_ids, backend=backend)
    try:
        if workers > 1 and len(tasks) > 1:
            # not multiprocessing.Pool: it waits forever for the task of a worker that died
            with ProcessPoolExecutor(min(workers, len(tasks)), mp_context=multiprocessing.get_context("fork"),
                                     initializer=die_with_parent, initargs=(signal.SIGKILL, os.getpid())) as pool:
                try:
                    parts = list(pool.map(_evaluate, [t for t, _, _ in tasks], [c for _, c, _ in tasks]))
                except BrokenProcessPool:
                    raise ScoringError("a COCO scoring worker process died (killed, or out of memory?)") from None
        else:
            parts = [_evaluate(t, c) for t, c, _ in tasks]
    finally:
        _STATE.clear()
    out = {"backend": backend}
    position = {c: i for i, c in enumerate(cat_ids)}
    for t in iou_types:
        precision = recall = None
        for iou_type, cats, p, r in parts:
            if iou_type != t:
                continue
            if precision is None:
                precision = np.full(p.shape[:2] + (len(cat_ids),) + p.shape[3:], -1.0)
                recall = np.full(r.shape[:1] + (len(cat_ids),) + r.shape[2:], -1.0)
            idx = [position[c] for c in cats]
            precision[:, :, idx] = p
            recall[:, idx] = r
        stats = _summarize(t, cat_ids, precision, recall)
        out[t] = {"stats": dict(zip(STAT_NAMES, stats)), "per_class": _per_class_ap(precision, cat_ids, gt)}
    return out


def _per_class_ap(precision, cat_ids, gt):
    """AP@[.5:.95] per category (area all, maxDets 100), as the reference's per-class tables compute it."""
    names = [gt.cats[cat_id].get("name") for cat_id in cat_ids]
    out = {}
    for k, (cat_id, name) in enumerate(zip(cat_ids, names)):
        p = precision[:, :, k, 0, -1]
        p = p[p > -1]
        # a row per category: a name COCO's format does not require, or one that two categories share, is
        # told apart by the id (pycocotools scores by id)
        label = f"category {cat_id}" if not name else name if names.count(name) == 1 else f"{name} ({cat_id})"
        out[label] = float(p.mean()) if p.size else float("nan")
    return out


def format_per_class_table(scores):
    """Markdown table of per-class AP, a column for each of bbox and segm that was scored."""
    columns = [(what, scores[key].get("per_class", {})) for key, what in (("bbox", "box"), ("segm", "mask"))
               if key in scores]
    lines = ["| class | " + " | ".join(f"{what} AP" for what, _ in columns) + " |",
             "|---|" + "---:|" * len(columns)]
    for c in sorted(set().union(*(table for _, table in columns))):
        lines.append(f"| {c} | " + " | ".join(f"{table.get(c, float('nan')):.3f}" for _, table in columns) + " |")
    return "\n".join(lines)


class COCOScorer:
    """Scores :class:`Detections` against a COCO annotation file: ``scorer(detections)`` returns the
    :func:`score_coco` dict, plus ``"seconds"``, the time it took.

    It holds the settings of scoring (the annotation file, the images scored, the IoU types, the backend and the
    number of worker processes) and nothing else, so it is cheap to send to the background scoring process: an
    evaluator scores through it in-process, and :class:`~maskrcnn_benchmark.evaluation.BackgroundScorer` runs
    the same object in its own process. ``epoch`` (what the evaluator passes) is not needed to score.
    """

    def __init__(self, ann_file, image_ids=None, iou_types=("bbox", "segm"), backend="auto", workers=0):
        self.ann_file = ann_file
        self.image_ids = list(image_ids) if image_ids is not None else None
        self.iou_types = tuple(iou_types)
        self.backend = backend
        self.workers = workers

    @classmethod
    def for_dataset(cls, dataset, backend="auto", workers=0, iou_types=("bbox", "segm")):
        return cls(dataset.ann_file, dataset.ids, iou_types, backend, workers)

    def __call__(self, detections, epoch=None):
        import time

        t0 = time.perf_counter()
        out = score_coco(self.ann_file, detections, self.iou_types, self.image_ids, self.backend, self.workers)
        out["seconds"] = time.perf_counter() - t0
        return out

    def __repr__(self):
        return (f"COCOScorer({self.ann_file!r}, {len(self.image_ids or ())} images, {self.iou_types}, "
                f"backend={self.backend!r}, workers={self.workers})")
