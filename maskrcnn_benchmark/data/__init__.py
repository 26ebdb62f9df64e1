"""Data pipeline: COCO-format datasets, transforms, samplers and loaders (``make_data_loader``). The synthetic
dataset generator is :mod:`maskrcnn_benchmark.synthetic`.

The names below are imported on first use (PEP 562): :mod:`.catalog` (the paths catalog's files, categories and
number of classes) imports no torch, and ``tools/preflight.py`` reads it without loading the pipeline
(tests/cli/test_preflight.py)."""
import importlib

_MODULE_OF = {"build_dataset": "build", "check_num_classes": "build", "make_data_loader": "build",
              "make_device_loader": "build", "use_hybrid": "build", "num_classes_from_data": "catalog",
              "static_sizes": "static", "warm_up_batch": "static"}

__all__ = list(_MODULE_OF)


def __getattr__(name):
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
