from .coco import COCODataset, DatasetError, read_categories  # noqa: F401
