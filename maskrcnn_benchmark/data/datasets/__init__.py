from .coco import COCODataset, DatasetError  # noqa: F401
