import pytest

from maskrcnn_benchmark.synthetic import make_synthetic_coco


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny_synthetic")
    make_synthetic_coco(str(out), num_train=16, num_val=6, image_size=(96, 96), seed=3)
    return str(out)
