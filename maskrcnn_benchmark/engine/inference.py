"""Distributed inference: each rank predicts its shard, results are gathered on rank 0."""
import logging
import time

import torch

from ..modeling.roi_heads.mask_head import Masker
from ..data.datasets.evaluation.coco_eval import encode_masks
from ..utils import comm

logger = logging.getLogger(__name__)


def autocast_context(device, dtype):
    if dtype in (None, "float32", torch.float32):
        return torch.autocast(device.type, enabled=False)
    dt = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    if device.type == "cpu" and dt == torch.float16:
        dt = torch.bfloat16  # CPU autocast has no useful fp16 path
    return torch.autocast(device.type, dtype=dt)


def _to_original(pred, dataset, idx, masker):
    info = dataset.get_img_info(idx)
    pred = pred.to("cpu").resize((info["width"], info["height"]))
    if pred.has_field("mask"):
        probs = pred.get_field("mask")
        if probs.dtype == torch.bool:  # already pasted by the model (POSTPROCESS_MASKS): just rescale
            probs = torch.nn.functional.interpolate(probs.float(), size=(info["height"], info["width"]),
                                                    mode="nearest") > 0.5
        else:
            probs = masker.paste(probs, pred.bbox, info["height"], info["width"])
        pred.add_field("rles", encode_masks(probs))
        del pred.extra_fields["mask"]
    return pred


@torch.no_grad()
def inference(model, data_loader, device, dtype="float32"):
    """Predictions of this process's shard, gathered: ``{dataset index: BoxList}`` on rank 0 (``{}`` elsewhere).

    Boxes are scaled back to the original image size and masks pasted there and RLE-encoded right away,
    so what crosses processes is small.
    """
    was_training = model.training
    model.eval()
    dataset = data_loader.dataset
    masker = Masker(threshold=0.5, padding=1)
    results = {}
    start = time.perf_counter()
    for images, _, ids in data_loader:
        with autocast_context(device, dtype):
            outputs = model(images.to(device))
        for idx, out in zip(ids, outputs):
            results[idx] = _to_original(out, dataset, idx, masker)
    elapsed = time.perf_counter() - start
    model.train(was_training)
    gathered = comm.all_gather(results)
    if not comm.is_main_process():
        return {}
    merged = {}
    for part in gathered:
        merged.update(part)
    logger.info("inference on %d images took %.1f s (%d processes)", len(merged), elapsed,
                comm.get_world_size())
    return merged
