"""The fixed image sizes of a compiled step: a few widths per orientation, each batch padded to the first it fits."""
import math

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


def _polygon_target(w, h, vertices, parts):
    from maskrcnn_benchmark.structures.segmentation_mask import SegmentationMask

    ring = [[20 + 10 * math.cos(2 * math.pi * k / vertices) for k in range(vertices)],
            [20 + 10 * math.sin(2 * math.pi * k / vertices) for k in range(vertices)]]
    polygon = [v for xy in zip(*ring) for v in xy]
    t = BoxList(torch.tensor([[10.0, 10.0, 30.0, 30.0]]), (w, h))
    t.add_field("labels", torch.tensor([1]))
    t.add_field("masks", SegmentationMask([[polygon] * parts], (w, h)))
    return t


def test_a_batch_within_the_polygon_floors_has_the_warm_up_batchs_shapes():
    """A compiled run records CUDA graphs for the warm-up batch's polygon padding; a loader batch padded otherwise
    records another graph after run_start. A mask of 2 parts of 10 vertices: with the least padding (16, 4) it
    pads to 32 vertices, the warm-up's square to 16; with CUDA graphs' floors (256, 8) both pad to them."""
    from maskrcnn_benchmark.data.build import _collator
    from maskrcnn_benchmark.data.static import warm_up_batch
    from maskrcnn_benchmark.engine.resolve import resolve

    for mode, want in (("default", None), ("reduce-overhead", (256, 8))):
        cfg = resolve(load_config(R50_YAML, ["COMPILE", True, "COMPILE_MODE", mode,
                                             "MODEL.ROI_BOX_HEAD.NUM_CLASSES", 81]), "cuda")
        h, w = static_sizes(cfg)[0]
        _, batch, _ = _collator(cfg, static=True)([(torch.zeros(3, h, w), _polygon_target(w, h, 10, 2), 0),
                                                   (torch.zeros(3, h, w), _polygon_target(w, h, 5, 1), 1)])
        _, warm = warm_up_batch(2, h, w, cfg.DATALOADER.MAX_ANNOTATIONS_PER_IMAGE, torch.device("cpu"),
                                tuple(cfg.DATALOADER.STATIC_POLYGON_SLOTS))
        loader_shape = (batch.poly_vertices.shape[1], batch.poly_parts.shape[1])
        warm_shape = (warm.poly_vertices.shape[1], warm.poly_parts.shape[1])
        if want is None:
            assert loader_shape == (32, 4) and warm_shape == (16, 4)  # another graph for this batch
        else:
            assert loader_shape == warm_shape == want


def test_polygon_floors_need_not_be_powers_of_two():
    """A floor of 200 vertices: a mask of 150 pads to 200, as the warm-up's square does (it padded to 256, another
    CUDA graph on the clock for every batch of 129 to 200 vertices); past the floor, powers of two."""
    from maskrcnn_benchmark.layers.rasterize import pad_polygons

    for count, want in ((4, 200), (150, 200), (200, 200), (201, 256)):
        _, nxt, _, parts = pad_polygons(torch.tensor([count]), torch.tensor([0]), 1, 200, 3)
        assert (nxt.shape[1], parts) == (want, 3), count


def test_without_aspect_ratio_grouping_a_mixed_batch_has_a_fixed_size_too():
    """A landscape and a portrait image in one batch fit no size of either orientation: it padded to 1088x1088, a
    size of its own (one more compile on the clock, and past dynamo's recompile limit the eager step)."""
    cfg = load_config(R50_YAML, ["DATALOADER.ASPECT_RATIO_GROUPING", False])
    sizes = static_sizes(cfg)
    assert sizes[-1] == (1344, 1344) and sizes[:-1] == static_sizes(load_config(R50_YAML, []))
    images, _, _ = BatchCollator(32, sizes, 96)([(torch.zeros(3, 800, 1067), _target(1067, 800), 0),
                                                 (torch.zeros(3, 1067, 800), _target(800, 1067), 1)])
    assert tuple(images.tensors.shape[-2:]) == (1344, 1344)


def test_with_one_image_per_gpu_the_square_is_not_warmed_up():
    """One image per GPU never mixes orientations: the square, the largest size the warm-up compiles (and, with
    CUDA graphs, records), was warmed up all the same."""
    cfg = load_config(R50_YAML, ["DATALOADER.ASPECT_RATIO_GROUPING", False])
    assert static_sizes(cfg, images_per_gpu=1) == static_sizes(load_config(R50_YAML, []))
    assert static_sizes(cfg, images_per_gpu=2)[-1] == (1344, 1344)
