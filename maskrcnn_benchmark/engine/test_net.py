"""Evaluate a checkpoint on DATASETS.TEST (``tools/test_net.py``), or only write the COCO results json.

    python tools/test_net.py --config-file CFG [--ckpt WEIGHTS] [--skip-eval] KEY VALUE ...

Results go to ``OUTPUT_DIR/inference/<dataset>/{bbox,segm}.json`` (written atomically); the AP summary and a
per-class AP table are printed and saved as ``coco_eval.md``.
"""
import argparse
import json
import os
import sys
import tempfile

from ..config import ConfigError, load_config
from ..data import make_data_loader
from ..data.datasets import DatasetError
from ..evaluation import COCOEvaluator, ScoringError, format_per_class_table, inference_on_dataset, score_coco
from ..modeling import build_detection_model
from ..utils import comm
from ..utils.c2_model_loading import WeightsError
from ..utils.checkpoint import DetectronCheckpointer
from ..utils.env import setup_environment
from ..utils.logger import setup_logger
from .train_mlperf import error_line


def _write_atomic(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def evaluate_checkpoint(cfg, weights, skip_eval=False, logger=None, backend=None):
    rank, world, _, device = comm.init_distributed(None, cfg.MODEL.DEVICE)
    model = build_detection_model(cfg).to(device)
    DetectronCheckpointer(cfg, model, logger=logger).load_weights(weights or cfg.MODEL.WEIGHT)
    results = {}
    loaders = make_data_loader(cfg, is_train=False, num_replicas=world, rank=rank)
    for name, loader in zip(cfg.DATASETS.TEST, loaders):
        evaluator = COCOEvaluator(loader.dataset, backend=backend or cfg.TEST.COCO_BACKEND,
                                  workers=cfg.TEST.COCO_WORKERS, mask_method=cfg.TEST.MASK_ENCODING)
        detections = inference_on_dataset(model, loader, evaluator, device, cfg.DTYPE)
        if not comm.is_main_process():
            continue
        folder = os.path.join(cfg.OUTPUT_DIR, "inference", name.replace(":", "_").replace("/", "_"))
        bbox, segm = detections.to_coco_lists()
        _write_atomic(os.path.join(folder, "bbox.json"), json.dumps(bbox))
        _write_atomic(os.path.join(folder, "segm.json"), json.dumps(segm))
        if skip_eval:
            print(f"{name}: wrote {len(bbox)} detections to {folder} (evaluation skipped)")
            continue
        scores = score_coco(loader.dataset.ann_file, detections, image_ids=loader.dataset.ids,
                            backend=evaluator.backend, workers=evaluator.workers)
        table = format_per_class_table(scores)
        summary = (f"{name}: box AP {scores['bbox']['stats']['AP']:.4f}, "
                   f"mask AP {scores['segm']['stats']['AP']:.4f}")
        _write_atomic(os.path.join(folder, "coco_eval.md"), summary + "\n\n" + table + "\n")
        print(summary)
        print(table)
        results[name] = scores
    return results


def main(argv=None):
    setup_environment()  # the reference's site hook (TORCH_DETECTRON_ENV_MODULE), before anything else
    p = argparse.ArgumentParser(description="Evaluate Mask R-CNN weights on DATASETS.TEST")
    p.add_argument("--config-file", default="", metavar="FILE")
    p.add_argument("--ckpt", default="", help="weights (.pth of this package or Detectron .pkl); "
                                              "default MODEL.WEIGHT")
    p.add_argument("--skip-eval", action="store_true", help="only write the COCO results json")
    p.add_argument("--coco-backend", default="", choices=["", "auto", "faster_coco_eval", "pycocotools"],
                   help="COCO scoring backend (default: TEST.COCO_BACKEND)")
    p.add_argument("--local_rank", "--local-rank", type=int, default=None)
    p.add_argument("opts", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    try:
        cfg = load_config(args.config_file, args.opts)
        logger = setup_logger(None, comm.get_rank())
        evaluate_checkpoint(cfg, args.ckpt, args.skip_eval, logger, args.coco_backend or None)
    except (ConfigError, DatasetError, WeightsError, ScoringError, FileNotFoundError, KeyError, ValueError) as e:
        print(f"error: {error_line(e)}", file=sys.stderr)
        return 1
    finally:
        comm.destroy()
    return 0
