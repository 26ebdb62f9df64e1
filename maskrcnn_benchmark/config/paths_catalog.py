"""Dataset and weight locations.

Names resolve under a data root: ``DATASETS.DATA_DIR``, else ``$DATADIR``, else ``./datasets``. The COCO 2017
layout is ``<root>/train2017``, ``<root>/val2017`` and ``<root>/annotations/instances_{train,val}2017.json`` —
the layout of the MLPerf ``/data`` mount and of the synthetic dataset alike. Any other COCO-format dataset can
be named without editing code as ``coco:<image_dir>:<annotation_json>`` in ``DATASETS.TRAIN``/``TEST``.

A catalog is a Python file named by ``PATHS_CATALOG`` (this one, ``paths_catalog_dbcluster.py`` or a user's), loaded
by :func:`maskrcnn_benchmark.utils.imports.load_catalog`.
"""
import os


class DatasetCatalog:
    DATA_DIR = "datasets"
    DATASETS = {
        "coco_2017_train": {"img_dir": "train2017", "ann_file": "annotations/instances_train2017.json"},
        "coco_2017_val": {"img_dir": "val2017", "ann_file": "annotations/instances_val2017.json"},
        "coco_2014_train": {"img_dir": "train2014", "ann_file": "annotations/instances_train2014.json"},
        "coco_2014_val": {"img_dir": "val2014", "ann_file": "annotations/instances_val2014.json"},
    }

    @classmethod
    def get(cls, name, data_dir=""):
        """``{"factory": "COCODataset", "args": {"root": ..., "ann_file": ...}}`` for a dataset name."""
        if name.startswith("coco:"):
            parts = name.split(":", 2)
            if len(parts) != 3 or not parts[1] or not parts[2]:
                raise KeyError(f"dataset '{name}' must look like coco:<image_dir>:<annotation_json>")
            return {"factory": "COCODataset", "args": {"root": parts[1], "ann_file": parts[2]}}
        if name not in cls.DATASETS:
            raise KeyError(f"unknown dataset '{name}'; known: {', '.join(sorted(cls.DATASETS))}, "
                           "or coco:<image_dir>:<annotation_json>")
        root = data_dir or os.environ.get("DATADIR") or cls.DATA_DIR
        entry = cls.DATASETS[name]
        return {"factory": "COCODataset", "args": {"root": os.path.join(root, entry["img_dir"]),
                                                   "ann_file": os.path.join(root, entry["ann_file"])}}


class ModelCatalog:
    """``catalog://`` weight names -> file names under ``<data root>/models`` (no downloads here)."""
    C2_IMAGENET_MODELS = {
        "MSRA/R-50": "R-50.pkl",
        "MSRA/R-101": "R-101.pkl",
    }

    @classmethod
    def get(cls, name, data_dir=""):
        key = name[len("ImageNetPretrained/"):] if name.startswith("ImageNetPretrained/") else name
        if key not in cls.C2_IMAGENET_MODELS:
            raise KeyError(f"unknown catalog weights '{name}'")
        root = data_dir or os.environ.get("DATADIR") or DatasetCatalog.DATA_DIR
        return os.path.join(root, "models", cls.C2_IMAGENET_MODELS[key])
