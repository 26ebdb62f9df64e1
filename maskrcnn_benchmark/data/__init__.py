"""Data pipeline: COCO-format datasets, transforms, samplers and loaders (``make_data_loader``). The synthetic
dataset generator is :mod:`maskrcnn_benchmark.synthetic`."""
from .build import (build_dataset, check_num_classes, make_data_loader, make_device_loader, num_classes_from_data,
                    use_hybrid)
from .static import static_sizes, warm_up_batch

__all__ = ["build_dataset", "make_data_loader", "make_device_loader", "check_num_classes", "num_classes_from_data",
           "use_hybrid", "static_sizes", "warm_up_batch"]
