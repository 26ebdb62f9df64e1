"""Data pipeline: COCO-format datasets, transforms, samplers and loaders (``make_data_loader``). The synthetic
dataset generator is :mod:`maskrcnn_benchmark.synthetic`.

The names below are imported on first use (PEP 562): :mod:`.catalog` (the paths catalog's files, categories and
number of classes) imports no torch, and ``tools/preflight.py`` reads it without loading the pipeline
(tests/cli/test_preflight.py)."""
from ..utils.imports import lazy_attributes

_MODULE_OF = {"build_dataset": "build", "check_num_classes": "build", "make_data_loader": "build",
              "make_device_loader": "build", "use_hybrid": "build", "num_classes_from_data": "catalog",
              "static_sizes": "static", "polygon_slots": "shapes", "warm_up_batch": "static"}

__all__ = list(_MODULE_OF)
__getattr__ = lazy_attributes(__name__, _MODULE_OF)
