"""The evaluator protocol (``reset / process(inputs, outputs) / evaluate``), the COCO evaluator, and the inference
loop that feeds an evaluator.

One contract for training (every epoch) and ``tools/test_net.py``:

* ``process(inputs, outputs)`` turns a batch of model outputs into COCO results (:func:`detections_to_coco`, on
  the outputs' device);
* ``evaluate(epoch=None)`` gathers them on rank 0, writes them (``output_folder``) and scores them with its
  scorer: ``{"bbox": {"stats": {...}, "per_class": {...}}, "segm": ..., "backend", "seconds"}`` on rank 0,
  ``None`` on the other ranks. With a :class:`~maskrcnn_benchmark.evaluation.BackgroundScorer` as its scorer (a
  training run) it returns a :class:`~maskrcnn_benchmark.evaluation.ScoresFuture` of that dict instead, scored
  in a separate process.

(The predictor, ``tools/predict.py``, shares only the post-processing: :func:`to_original`.)
"""
import json
import logging
import os
import time

import numpy as np
import torch

from ..utils import comm
from ..utils.amp import autocast
from ..utils.fileio import write_text
from .detections import Detections
from .postprocess import detections_to_coco
from .scoring import COCOScorer

logger = logging.getLogger(__name__)


class DatasetEvaluator:
    """What :func:`inference_on_dataset` drives: ``reset()`` before a pass, ``process(inputs, outputs)`` per batch
    (``inputs``: the dataset indices of the batch, ``outputs``: the model's BoxLists), ``evaluate()`` after it."""

    def reset(self):
        pass

    def process(self, inputs, outputs):
        pass

    def evaluate(self):
        raise NotImplementedError


class COCOEvaluator(DatasetEvaluator):
    """COCO box and mask AP of a model on a COCO-format dataset (one rank or many).

    ``scorer``: a :class:`COCOScorer` (default: the dataset's annotation file and images, backend ``auto``),
    or ``None`` to only collect detections. ``output_folder``: if given, ``evaluate()`` also writes the COCO
    results json files ``bbox.json`` and ``segm.json`` there (atomically). Detections are gathered on rank 0; an
    image that the distributed sampler gave to two ranks (to pad the shards) counts once.
    """

    def __init__(self, dataset, scorer="default", mask_method="box", mask_threshold=0.5, output_folder=None):
        self.dataset = dataset
        self.scorer = COCOScorer.for_dataset(dataset) if scorer == "default" else scorer
        self.mask_method = mask_method
        self.mask_threshold = mask_threshold
        self.output_folder = output_folder
        lut = dataset.contiguous_category_id_to_json_id
        self.category_ids = torch.tensor([lut.get(i, 0) for i in range(max(lut) + 1)])
        self.reset()

    def reset(self):
        self._per_image = {}

    def process(self, inputs, outputs):
        infos = [self.dataset.get_img_info(i) for i in inputs]
        image_ids = [self.dataset.id_to_img_map[i] for i in inputs]
        per_image = detections_to_coco(outputs, image_ids, [(info["width"], info["height"]) for info in infos],
                                       self.category_ids, self.mask_threshold, self.mask_method)
        for image_id, dets in zip(image_ids, per_image):
            self._per_image.setdefault(image_id, dets)

    def local_part(self):
        """This rank's detections as one part: ``(image ids, Detections)``, its images in id order, concatenated
        here (each rank in parallel), so that rank 0 unpickles and merges a few arrays per rank instead of one
        object per image, while the other ranks wait (bench/eval_gather.py; docs/benchmarks.md)."""
        ids = sorted(self._per_image)
        return ids, Detections.concat([self._per_image[i] for i in ids])

    def gather_parts(self):
        """The collective alone: every rank's part (:meth:`local_part`) on rank 0 (``None`` elsewhere). To rank 0
        only: COCO val2017's detections are about 150 MB pickled, which every rank would otherwise receive."""
        return comm.gather(self.local_part(), dst=0)

    @staticmethod
    def merge(parts):
        """Rank 0: the parts as one :class:`Detections` in image-id order (each image's rows in the order they were
        made); an image that the distributed sampler gave to two ranks (to pad the shards) counts once, the
        lowest rank's."""
        seen, kept = set(), []
        for ids, dets in parts:
            if seen.intersection(ids):
                new = np.asarray([i for i in ids if i not in seen], dtype=np.int64)
                dets = dets.take(np.flatnonzero(np.isin(dets.box_image_ids, new)),
                                 np.flatnonzero(np.isin(dets.mask_image_ids, new)))
            seen.update(ids)
            kept.append(dets)
        merged = Detections.concat(kept)
        return merged.take(np.argsort(merged.box_image_ids, kind="stable"),
                           np.argsort(merged.mask_image_ids, kind="stable"))

    def gather(self):
        """Every rank's detections on rank 0, as one :class:`Detections` in image-id order (``None`` elsewhere).
        A collective: every rank calls it."""
        parts = self.gather_parts()
        return None if parts is None else self.merge(parts)

    def write_results(self, detections):
        """``bbox.json`` and ``segm.json`` (COCO results format) in ``output_folder``."""
        bbox, segm = detections.to_coco_lists()
        write_text(os.path.join(self.output_folder, "bbox.json"), json.dumps(bbox), what="results json")
        write_text(os.path.join(self.output_folder, "segm.json"), json.dumps(segm), what="results json")

    def score(self, detections, epoch=None):
        """Rank 0's part after the gather: write, score; the scores (or their future)."""
        if self.output_folder:
            self.write_results(detections)
        if self.scorer is None:
            return {"detections": len(detections)}
        return self.scorer(detections, epoch=epoch)

    def evaluate(self, epoch=None):
        """Gather (a collective: every rank calls it), then :meth:`score`; the scores (or their future) on rank 0,
        None elsewhere."""
        detections = self.gather()
        return None if detections is None else self.score(detections, epoch)


@torch.no_grad()
def run_inference(model, data_loader, evaluator, device, dtype="float32"):
    """Run ``model`` over this rank's shard of ``data_loader`` (batches on ``device`` already: a
    :class:`~maskrcnn_benchmark.data.device_loader.DeviceLoader`) into ``evaluator`` (reset first); logs the time
    per image. The evaluation itself is the caller's (``evaluator.evaluate()``)."""
    was_training = model.training
    model.eval()
    evaluator.reset()
    start = time.perf_counter()
    count = 0
    try:
        for images, _, ids in data_loader:
            with autocast(device, dtype):
                outputs = model(images)
            evaluator.process(ids, outputs)
            count += len(ids)
    finally:
        model.train(was_training)
    elapsed = time.perf_counter() - start
    if comm.is_main_process():
        logger.info("inference on %d images: %.1f s (%.1f ms/image on each of %d processes)",
                    len(data_loader.dataset), elapsed, 1000 * elapsed / max(count, 1), comm.get_world_size())


def inference_on_dataset(model, data_loader, evaluator, device, dtype="float32"):
    """:func:`run_inference`, then ``evaluator.evaluate()``, whose result it returns (the scores, on rank 0)."""
    run_inference(model, data_loader, evaluator, device, dtype)
    return evaluator.evaluate()
