import pytest

from coco_sets import make_coco_set


@pytest.fixture
def coco_set(tmp_path):
    return make_coco_set(tmp_path)
