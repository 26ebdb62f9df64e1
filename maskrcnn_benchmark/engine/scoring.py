"""COCO scoring that runs beside training.

``COCOScorer(asynchronous=True)`` scores each epoch's detections in a separate process (pycocotools' COCOeval
takes minutes on COCO val), so training continues; ``poll()`` hands back finished epochs in order.
``asynchronous=False`` scores in-process and is what the async path is tested against.
"""
import multiprocessing
from concurrent.futures import ProcessPoolExecutor

from ..data.datasets.evaluation.coco_eval import score_coco


class COCOScorer:
    def __init__(self, ann_file, asynchronous=True):
        self.ann_file = ann_file
        self.asynchronous = asynchronous
        self._pool = None
        self._pending = []  # [(epoch, future or result)]

    def submit(self, epoch, bbox_results, segm_results, image_ids=None):
        if self.asynchronous:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
            fut = self._pool.submit(score_coco, self.ann_file, bbox_results, segm_results, ("bbox", "segm"),
                                    image_ids)
            self._pending.append((epoch, fut))
        else:
            self._pending.append((epoch, score_coco(self.ann_file, bbox_results, segm_results,
                                                    ("bbox", "segm"), image_ids)))

    def _done(self, item):
        return not self.asynchronous or item[1].done()

    def poll(self):
        """Finished ``(epoch, scores)`` in submission order (stops at the first unfinished one)."""
        out = []
        while self._pending and self._done(self._pending[0]):
            epoch, res = self._pending.pop(0)
            out.append((epoch, res.result() if self.asynchronous else res))
        return out

    def wait_all(self):
        out = []
        while self._pending:
            epoch, res = self._pending.pop(0)
            out.append((epoch, res.result() if self.asynchronous else res))
        return out

    @property
    def pending(self):
        return len(self._pending)

    def shutdown(self):
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
