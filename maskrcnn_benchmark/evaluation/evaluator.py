"""The COCO evaluator (``reset / process(inputs, outputs) / evaluate``) and the inference loop that feeds it.

Training (every epoch), ``tools/test_net.py`` and the predictor all go through :func:`detections_to_coco`; the
evaluator gathers the detections of every rank on rank 0 (an image that the distributed sampler gave to two
ranks, to pad the shards, counts once) and scores them with :func:`score_coco`.
"""
import logging
import time

import torch

from ..utils import comm
from .detections import Detections
from .postprocess import detections_to_coco
from .scoring import score_coco

logger = logging.getLogger(__name__)


def autocast_context(device, dtype):
    if dtype in (None, "float32", torch.float32):
        return torch.autocast(device.type, enabled=False)
    dt = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    if device.type == "cpu" and dt == torch.float16:
        dt = torch.bfloat16  # CPU autocast has no useful fp16 path
    return torch.autocast(device.type, dtype=dt)


class COCOEvaluator:
    """COCO box and mask AP of a model on a COCO-format dataset (one rank or many).

    ``process(inputs, outputs)``: ``inputs`` are the dataset indices of the batch (the loader's third element),
    ``outputs`` the model's BoxLists; post-processing runs on the outputs' device. ``evaluate()`` returns the
    scores on rank 0 (``None`` elsewhere); ``detections()`` only gathers them (for an asynchronous scorer or a
    results json).
    """

    def __init__(self, dataset, iou_types=("bbox", "segm"), backend="auto", workers=0, mask_method="box",
                 mask_threshold=0.5):
        self.dataset = dataset
        self.iou_types = tuple(iou_types)
        self.backend = backend
        self.workers = workers
        self.mask_method = mask_method
        self.mask_threshold = mask_threshold
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

    def detections(self):
        """All ranks' detections on rank 0, by image id (``None`` on the other ranks)."""
        gathered = comm.all_gather(self._per_image) if comm.get_world_size() > 1 else [self._per_image]
        if not comm.is_main_process():
            return None
        merged = {}
        for part in gathered:
            for image_id, dets in part.items():
                merged.setdefault(image_id, dets)
        return Detections.concat([merged[i] for i in sorted(merged)])

    def evaluate(self):
        dets = self.detections()
        if dets is None:
            return None
        return score_coco(self.dataset.ann_file, dets, self.iou_types, image_ids=self.dataset.ids,
                          backend=self.backend, workers=self.workers)


@torch.no_grad()
def inference_on_dataset(model, data_loader, evaluator, device, dtype="float32"):
    """Run ``model`` over this rank's shard of ``data_loader`` into ``evaluator`` (reset first); returns the
    gathered :class:`Detections` on rank 0 (``None`` elsewhere) and logs the time per image."""
    was_training = model.training
    model.eval()
    evaluator.reset()
    start = time.perf_counter()
    count = 0
    try:
        for images, _, ids in data_loader:
            with autocast_context(device, dtype):
                outputs = model(images.to(device, non_blocking=True))
            evaluator.process(ids, outputs)
            count += len(ids)
    finally:
        model.train(was_training)
    elapsed = time.perf_counter() - start
    dets = evaluator.detections()
    if dets is not None:
        logger.info("inference on %d images: %.1f s (%.1f ms/image on each of %d processes)",
                    len(evaluator.dataset), elapsed, 1000 * elapsed / max(count, 1), comm.get_world_size())
    return dets
