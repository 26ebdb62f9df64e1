import pytest

from maskrcnn_benchmark.utils.errors import ConfigError
from maskrcnn_benchmark.utils.imports import load_catalog


@pytest.mark.parametrize("text,needle", [
    ("class DatasetCatalog:\n    pass\nclass ModelCatalog(\n", r"cannot be loaded \(line 3\): SyntaxError"),
    ("import no_such_module_here\n", r"cannot be loaded: ModuleNotFoundError: No module named 'no_such_module_here'"),
    ("class ModelCatalog:\n    pass\n", r"defines no DatasetCatalog"),
])
def test_a_paths_catalog_that_cannot_be_used_is_one_line_naming_it(tmp_path, text, needle):
    """A syntax error, a failing import or a missing class in the user's PATHS_CATALOG file was a traceback (exit
    5, a bug's code), from the preflight too."""
    path = tmp_path / "my_catalog.py"
    path.write_text(text)
    with pytest.raises(ConfigError, match=f"PATHS_CATALOG file '{path}' " + needle) as e:
        load_catalog(str(path))
    assert "\n" not in str(e.value)


def test_a_catalog_of_datasets_only_still_serves_the_datasets(tmp_path):
    path = tmp_path / "datasets_only.py"
    path.write_text("class DatasetCatalog:\n    pass\n")
    assert load_catalog(str(path)).DatasetCatalog
    with pytest.raises(ConfigError, match="defines no ModelCatalog"):
        load_catalog(str(path), needs="ModelCatalog")


NVIDIA_STYLE_CATALOG = '''
import os


class DatasetCatalog:
    DATA_DIR = "/data"
    DATASETS = {"coco_2017_train": {"img_dir": "coco2017/train2017",
                                    "ann_file": "coco2017/annotations/instances_train2017.json"}}

    @staticmethod
    def get(name):
        attrs = DatasetCatalog.DATASETS[name]
        return dict(factory="COCODataset", args=dict(root=os.path.join(DatasetCatalog.DATA_DIR, attrs["img_dir"]),
                                                     ann_file=os.path.join(DatasetCatalog.DATA_DIR, attrs["ann_file"])))


class ModelCatalog:
    @staticmethod
    def get(name):
        return "/coco/models/" + name
'''


def test_a_catalog_whose_get_takes_the_name_alone_works(tmp_path):
    """maskrcnn-benchmark's catalogs (NVIDIA's too) define ``get(name)``; ours also take DATASETS.DATA_DIR. A site's
    own catalog in the reference's form was a TypeError traceback ('takes 1 positional argument but 2 were
    given'), from the preflight on."""
    from maskrcnn_benchmark.config import load_config
    from maskrcnn_benchmark.data.catalog import dataset_paths
    from maskrcnn_benchmark.utils.imports import resolve_weights

    path = tmp_path / "nv_catalog.py"
    path.write_text(NVIDIA_STYLE_CATALOG)
    cfg = load_config("configs/e2e_mask_rcnn_R_50_FPN_1x.yaml",
                      ["PATHS_CATALOG", str(path), "DATASETS.TRAIN", "('coco_2017_train',)",
                       "DATASETS.TEST", "('coco_2017_train',)"])
    (key, name, root, ann), _ = dataset_paths(cfg)
    assert (key, name, root, ann) == ("DATASETS.TRAIN", "coco_2017_train", "/data/coco2017/train2017",
                                      "/data/coco2017/annotations/instances_train2017.json")
    assert resolve_weights(cfg, "catalog://R-50.pkl") == "/coco/models/R-50.pkl"


UPSTREAM_STYLE_CATALOG = '''
class DatasetCatalog:
    @staticmethod
    def get(name):
        raise RuntimeError("Dataset not available: {}".format(name))


class ModelCatalog:
    @staticmethod
    def get(name):
        raise RuntimeError("model not present in the catalog {}".format(name))
'''


def test_a_catalog_that_does_not_know_a_name_is_one_line_naming_the_key(tmp_path):
    """maskrcnn-benchmark's catalogs raise RuntimeError for a name they do not know ("Dataset not available"):
    only a KeyError was taken as the catalog's answer, anything else a traceback (exit 5)."""
    from maskrcnn_benchmark.config import load_config
    from maskrcnn_benchmark.data.catalog import catalog_entries
    from maskrcnn_benchmark.utils.errors import DatasetError, WeightsError
    from maskrcnn_benchmark.utils.imports import resolve_weights

    path = tmp_path / "upstream_catalog.py"
    path.write_text(UPSTREAM_STYLE_CATALOG)
    cfg = load_config("configs/e2e_mask_rcnn_R_50_FPN_1x.yaml", ["PATHS_CATALOG", str(path)])
    with pytest.raises(DatasetError, match=r"DATASETS.TRAIN: .*Dataset not available: coco_2017_train"):
        catalog_entries(cfg, cfg.DATASETS.TRAIN, True)
    with pytest.raises(WeightsError, match=r"MODEL.WEIGHT 'catalog://R-50': .*model not present"):
        resolve_weights(cfg, "catalog://R-50")


def test_a_dataset_of_another_factory_than_coco_is_one_line(tmp_path):
    """maskrcnn-benchmark's catalog also names Pascal VOC (factory PascalVOCDataset, args data_dir/split): this
    package reads COCO-format datasets only, and such an entry was an AttributeError (or KeyError 'ann_file')
    traceback when the datasets were built."""
    from maskrcnn_benchmark.config import load_config
    from maskrcnn_benchmark.data.catalog import catalog_entries
    from maskrcnn_benchmark.utils.errors import DatasetError

    path = tmp_path / "voc_catalog.py"
    path.write_text("class DatasetCatalog:\n    @staticmethod\n    def get(name):\n        return dict(factory="
                    "'PascalVOCDataset', args=dict(data_dir='/data/voc/VOC2007', split='train'))\n")
    cfg = load_config("configs/e2e_mask_rcnn_R_50_FPN_1x.yaml",
                      ["PATHS_CATALOG", str(path), "DATASETS.TRAIN", "('voc_2007_train',)"])
    with pytest.raises(DatasetError) as e:
        catalog_entries(cfg, cfg.DATASETS.TRAIN, True)
    assert str(e.value) == ("DATASETS.TRAIN: the paths catalog gives 'voc_2007_train' as a PascalVOCDataset: this "
                            "package reads COCO-format datasets (factory COCODataset, args root and ann_file)")
