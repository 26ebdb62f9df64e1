"""The fixed image sizes of a compiled step: a few widths per orientation, each batch padded to the first it fits."""
import torch

from helpers import R50_YAML
from maskrcnn_benchmark.config import load_config
from maskrcnn_benchmark.data import static_sizes
from maskrcnn_benchmark.data.collate_batch import BatchCollator
from maskrcnn_benchmark.structures import BoxList


def _target(w, h):
    t = BoxList(torch.tensor([[1.0, 1.0, 20.0, 20.0]]), (w, h))
    t.add_field("labels", torch.tensor([1]))
    return t


def test_coco_sizes_per_orientation():
    cfg = load_config(R50_YAML, [])
    assert static_sizes(cfg) == ((800, 1088), (800, 1216), (800, 1344), (1088, 800), (1216, 800), (1344, 800))
    one = load_config(R50_YAML, ["DATALOADER.STATIC_SHAPES_PER_ORIENTATION", 1])
    assert static_sizes(one) == ((800, 1344), (1344, 800))


def test_a_4_by_3_batch_is_padded_to_1088_not_1344():
    """COCO's 640x480 images resize to 800x1067: padded to 800x1088 (the reference pads a batch of them to
    800x1088 too); a 16:9 one to 800x1344; portrait batches to the portrait sizes."""
    sizes = static_sizes(load_config(R50_YAML, []))
    collate = BatchCollator(32, sizes, 96)
    for (h, w), want in [((800, 1067), (800, 1088)), ((800, 1199), (800, 1216)), ((800, 1333), (800, 1344)),
                         ((1067, 800), (1088, 800)), ((1333, 800), (1344, 800))]:
        images, _, _ = collate([(torch.zeros(3, h, w), _target(w, h), 0), (torch.zeros(3, h - 40, w - 60),
                                                                            _target(w - 60, h - 40), 1)])
        assert tuple(images.tensors.shape[-2:]) == want, (h, w)
