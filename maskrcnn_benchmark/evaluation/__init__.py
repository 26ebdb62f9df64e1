"""COCO evaluation in one place: the evaluator protocol and the COCO evaluator, post-processing of model outputs,
scoring backends (pycocotools, faster-coco-eval), parallel scoring, and scoring in a background process.

Training (every epoch) and ``tools/test_net.py`` use :class:`COCOEvaluator`; training gives it a
:class:`BackgroundScorer` (an executor around the one :class:`COCOScorer`) as its scorer. ``evaluate()`` returns
the scores (a :class:`ScoresFuture` of them in the background). This package uses
:mod:`maskrcnn_benchmark.layers` and :mod:`maskrcnn_benchmark.structures`, never the model's internals.
"""
from .background import BackgroundScorer, ScoresFuture
from .detections import Detections
from .evaluator import COCOEvaluator, DatasetEvaluator, inference_on_dataset, run_inference
from .postprocess import detections_to_coco, to_original
from .scoring import STAT_NAMES, COCOScorer, ScoringError, format_per_class_table, resolve_backend, score_coco

__all__ = ["BackgroundScorer", "ScoresFuture", "Detections", "COCOEvaluator", "DatasetEvaluator",
           "inference_on_dataset", "run_inference", "detections_to_coco", "to_original", "STAT_NAMES", "COCOScorer", "ScoringError",
           "format_per_class_table", "resolve_backend", "score_coco"]
