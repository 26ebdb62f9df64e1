"""Evaluate weights on ``DATASETS.TEST`` (the library behind ``tools/test_net.py``).

For every test dataset: the COCO results json (``bbox.json``, ``segm.json``) go to
``OUTPUT_DIR/inference/<dataset>/`` (written atomically) and, unless only the results are wanted, the scores: the
AP summary and a per-class AP table, also saved there as ``coco_eval.md``.
"""
import os

from ..data import check_num_classes, make_data_loader, make_device_loader
from ..evaluation import COCOEvaluator, COCOScorer, format_per_class_table, inference_on_dataset
from ..modeling import build_detection_model
from ..utils import comm
from ..utils.checkpoint import DetectronCheckpointer
from ..utils.fileio import write_text
from .preflight import check_scoring
from .resolve import resolve


def results_folder(cfg, dataset_name):
    return os.path.join(cfg.OUTPUT_DIR, "inference", dataset_name.replace(":", "_").replace("/", "_"))


def summary_line(name, scores):
    """``NAME: box AP x, mask AP y``; a box-only model's scores (MODEL.MASK_ON False) have no mask AP."""
    return f"{name}: " + ", ".join(f"{what} AP {scores[key]['stats']['AP']:.4f}"
                                   for key, what in (("bbox", "box"), ("segm", "mask")) if key in scores)


def report(cfg, name, scores, skip_eval=False):
    """What ``tools/test_net.py`` prints for one dataset: the AP summary and the per-class table, or where the
    results went."""
    if skip_eval:
        return (f"{name}: wrote {scores['detections']} detections to {results_folder(cfg, name)} "
                "(evaluation skipped)")
    return summary_line(name, scores) + "\n" + format_per_class_table(scores)


def _drop_stale_summary(folder):
    """An earlier evaluation's ``coco_eval.md`` goes once the results json it summed up are replaced (not before:
    an evaluation stopped or failed before writing them leaves both)."""
    summary = os.path.join(folder, "coco_eval.md")
    if not os.path.exists(summary):
        return
    written = [os.path.join(folder, f) for f in ("bbox.json", "segm.json")]
    if any(os.path.exists(f) and os.path.getmtime(f) > os.path.getmtime(summary) for f in written):
        os.remove(summary)


def weights_to_evaluate(cfg, weights=""):
    """``weights`` (``--ckpt``), else the run's last checkpoint (``OUTPUT_DIR/last_checkpoint``), else
    ``MODEL.WEIGHT``: the reference's ``tools/test_net.py`` without ``--ckpt`` evaluates the run's latest
    checkpoint."""
    if weights:
        return weights
    last = DetectronCheckpointer(cfg, None, save_dir=cfg.OUTPUT_DIR).get_checkpoint_file()
    return last or cfg.MODEL.WEIGHT


def evaluate_checkpoint(cfg, weights="", skip_eval=False, backend=None, logger=None, local_rank=None):
    """``{dataset name: scores}`` on rank 0 (``scores`` as ``COCOEvaluator.evaluate()`` returns them; with
    ``skip_eval`` only ``{"detections": N}``), ``{}`` on the other ranks. ``weights``: as
    :func:`weights_to_evaluate` finds them."""
    if not skip_eval:  # before the inference of the whole test set, not after it
        check_scoring(backend or cfg.TEST.COCO_BACKEND, "--coco-backend" if backend else "TEST.COCO_BACKEND")
    rank, world, _, device = comm.init_distributed(local_rank, cfg.MODEL.DEVICE, timeout_s=cfg.DISTRIBUTED_TIMEOUT)
    cfg = resolve(cfg, device, world, is_train=False)
    model = build_detection_model(cfg).to(device)
    weights = weights_to_evaluate(cfg, weights)
    if logger is not None:
        logger.info("evaluating the weights %s", weights)
    DetectronCheckpointer(cfg, model, logger=logger).load_weights(weights, complete=True)
    results = {}
    loaders = [make_device_loader(cfg, loader, device, is_train=False)
               for loader in make_data_loader(cfg, is_train=False, num_replicas=world, rank=rank)]
    check_num_classes(cfg.MODEL.ROI_BOX_HEAD.NUM_CLASSES, None, [loader.dataset for loader in loaders])
    for name, loader in zip(cfg.DATASETS.TEST, loaders):
        folder = results_folder(cfg, name)
        iou_types = ("bbox", "segm") if cfg.MODEL.MASK_ON else ("bbox",)  # segm with masks, as the reference
        scorer = None if skip_eval else COCOScorer.for_dataset(loader.dataset, backend or cfg.TEST.COCO_BACKEND,
                                                               cfg.TEST.COCO_WORKERS, iou_types=iou_types)
        evaluator = COCOEvaluator(loader.dataset, scorer, mask_method=cfg.TEST.MASK_ENCODING, output_folder=folder)
        try:
            scores = inference_on_dataset(model, loader, evaluator, device, cfg.DTYPE)
        finally:
            if rank == 0:
                _drop_stale_summary(folder)
        if scores is None:  # not rank 0
            continue
        if not skip_eval:
            write_text(os.path.join(folder, "coco_eval.md"),
                       summary_line(name, scores) + "\n\n" + format_per_class_table(scores) + "\n",
                       what="evaluation summary")
        results[name] = scores
    return results
