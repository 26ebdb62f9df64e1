"""COCO evaluation in one place: the evaluator protocol and the COCO evaluator, post-processing of model outputs,
scoring backends (pycocotools, faster-coco-eval), parallel scoring, and scoring in a background process.

Training (every epoch) and ``tools/test_net.py`` use :class:`COCOEvaluator`; training gives it a
:class:`BackgroundScorer` (an executor around the one :class:`COCOScorer`) as its scorer. ``evaluate()`` returns
the scores (a :class:`ScoresFuture` of them in the background). This package uses
:mod:`maskrcnn_benchmark.layers` and :mod:`maskrcnn_benchmark.structures`, never the model's internals.

The names below are imported on first use (PEP 562): the COCO scoring process, which ``spawn`` starts by importing
:mod:`.background` (and with it this package), then needs only :mod:`.scoring` and :mod:`.detections` (numpy and
the scoring backend, no torch): it is ready in a fraction of a second instead of the seconds a torch import takes
(tests/evaluation/test_scoring_process_imports.py reads the imports from the source).
"""
from ..utils.imports import lazy_attributes

_MODULE_OF = {"BackgroundScorer": "background", "ScoresFuture": "background", "Detections": "detections",
              "COCOEvaluator": "evaluator", "DatasetEvaluator": "evaluator", "inference_on_dataset": "evaluator",
              "run_inference": "evaluator", "detections_to_coco": "postprocess", "to_original": "postprocess",
              "STAT_NAMES": "scoring", "COCOScorer": "scoring", "ScoringError": "scoring",
              "format_per_class_table": "scoring", "resolve_backend": "scoring", "score_coco": "scoring"}

__all__ = list(_MODULE_OF)
__getattr__ = lazy_attributes(__name__, _MODULE_OF)


def __dir__():
    return sorted(set(globals()) | set(__all__))
