import pytest

from maskrcnn_benchmark.synthetic import make_synthetic_coco


@pytest.fixture(scope="session")
def synthetic_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("synthetic")
    make_synthetic_coco(str(out), num_train=24, num_val=8, image_size=(128, 128), seed=0)
    return out
