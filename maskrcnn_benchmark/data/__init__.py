"""Data pipeline: COCO-format datasets, transforms, samplers and loaders (``make_data_loader``). The synthetic
dataset generator is :mod:`maskrcnn_benchmark.synthetic`."""
from .build import build_dataset, make_data_loader

__all__ = ["build_dataset", "make_data_loader"]
