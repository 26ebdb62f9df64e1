"""Paths catalog for cluster runs (NVIDIA's name): data mounted at ``/data`` (``$DATADIR`` overrides)."""
from .paths_catalog import DatasetCatalog as _Base
from .paths_catalog import ModelCatalog


class DatasetCatalog(_Base):
    DATA_DIR = "/data"


__all__ = ["DatasetCatalog", "ModelCatalog"]
