"""Data pipeline: COCO-format datasets, transforms, samplers, loaders (and the synthetic dataset generator)."""
from .build import build_dataset, make_data_loader  # noqa: F401
