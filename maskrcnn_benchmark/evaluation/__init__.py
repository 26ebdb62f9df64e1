"""COCO evaluation in one place: post-processing of model outputs, the evaluator, scoring backends (pycocotools,
faster-coco-eval), parallel and asynchronous scoring."""
from .async_scorer import AsyncScorer
from .detections import Detections
from .evaluator import COCOEvaluator, autocast_context, inference_on_dataset
from .postprocess import detections_to_coco
from .scoring import STAT_NAMES, ScoringError, format_per_class_table, resolve_backend, score_coco

__all__ = ["AsyncScorer", "Detections", "COCOEvaluator", "autocast_context", "inference_on_dataset",
           "detections_to_coco", "STAT_NAMES", "ScoringError", "format_per_class_table", "resolve_backend",
           "score_coco"]
