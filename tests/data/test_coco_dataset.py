import json
import logging

import numpy
import pytest
import torch
from PIL import Image

from helpers import small_cfg
from maskrcnn_benchmark.config import merge_cfg_from_list
from maskrcnn_benchmark.data import make_data_loader
from maskrcnn_benchmark.data.datasets import COCODataset, DatasetError
from maskrcnn_benchmark.data.transforms import Resize, build_transforms


def _write(tmp_path, images, annotations, categories=None):
    img_dir = tmp_path / "images"
    img_dir.mkdir(exist_ok=True)
    for im in images:
        Image.new("RGB", (im["width"], im["height"]), (100, 120, 140)).save(img_dir / im["file_name"])
    ann = tmp_path / "instances.json"
    ann.write_text(json.dumps({"images": images, "annotations": annotations,
                               "categories": categories or [{"id": 5, "name": "a"}, {"id": 9, "name": "b"}]}))
    return str(ann), str(img_dir)


def _img(i, w=40, h=30):
    return {"id": i, "file_name": f"{i}.jpg", "width": w, "height": h}


def _ann(i, img, cat, bbox, seg=None, crowd=0):
    x, y, w, h = bbox
    seg = seg if seg is not None else [[x, y, x + w, y, x + w, y + h, x, y + h]]
    return {"id": i, "image_id": img, "category_id": cat, "bbox": bbox, "segmentation": seg, "iscrowd": crowd,
            "area": w * h}


def test_edge_cases_crowd_empty_contiguous_ids_and_rle(tmp_path):
    from pycocotools import mask as mask_utils
    import numpy as np

    m = np.zeros((30, 40), np.uint8, order="F")
    m[5:15, 10:30] = 1
    rle = mask_utils.encode(m)
    rle["counts"] = rle["counts"].decode()
    anns = [
        _ann(1, 1, 9, [2, 3, 10, 8]),
        _ann(2, 1, 5, [0, 0, 40, 30], crowd=1),      # crowd: ignored
        _ann(3, 2, 5, [0, 0, 40, 30], crowd=1),      # only a crowd box: kept (the reference's filter counts it)
        _ann(4, 3, 5, [10, 5, 20, 10], seg=rle),      # RLE segmentation -> bitmap masks
        _ann(5, 4, 5, [1, 1, 0.5, 3]),                # degenerate box -> image 4 removed in training
    ]
    ann, root = _write(tmp_path, [_img(1), _img(2), _img(3), _img(4), _img(5)], anns)
    train = COCODataset(ann, root, remove_images_without_annotations=True)
    assert train.ids == [1, 2, 3]
    assert train.json_category_id_to_contiguous_id == {5: 1, 9: 2}
    img, target, idx = train[0]
    assert idx == 0 and img.size == (40, 30)
    assert target.get_field("labels").tolist() == [2]
    assert target.bbox.tolist() == [[2, 3, 11, 10]]  # xywh -> xyxy with the "+1" convention
    assert target.get_field("masks").mode == "poly"
    _, crowd_only, _ = train[1]
    assert len(crowd_only) == 0  # trains as an image without objects (crowd regions are never targets)
    _, t3, _ = train[2]
    assert t3.get_field("masks").mode == "mask" and t3.get_field("masks").get_mask_tensor().sum() == 200
    test = COCODataset(ann, root, remove_images_without_annotations=False)
    assert test.ids == [1, 2, 3, 4, 5]
    _, empty, _ = test[4]
    assert len(empty) == 0


def test_degenerate_polygon_warns_and_invalid_polygon_errors(tmp_path, caplog):
    """A part of fewer than 3 points is dropped whatever its parity, as the reference drops it (len < 6): an odd
    one ([x, y, x2]) raised, in a loader worker, at a random iteration of the run. A part of 3 points or more
    that is not pairs of numbers would break the reference too: one error naming the annotation, when the dataset
    is built (it was raised in a loader worker when the image was first drawn)."""
    anns = [_ann(1, 1, 5, [2, 3, 10, 8], seg=[[2, 3, 12, 3]]),
            _ann(2, 2, 5, [2, 3, 10, 8], seg=[[2, 3, 12], [2, 3, 12, 3, 7, 9]]),
            _ann(3, 3, 5, [2, 3, 10, 8], seg=[[2, 3, 12, 3, 7, 9, 4]])]
    ann, root = _write(tmp_path, [_img(1), _img(2), _img(3)], anns[:2])
    ds = COCODataset(ann, root, True)
    with caplog.at_level(logging.WARNING):
        _, t, _ = ds[0]
    assert "degenerate" in caplog.text and len(t) == 1
    _, t, _ = ds[1]
    assert [[p.tolist() for p in inst] for inst in t.get_field("masks").polygons] == [[[2.0, 3.0, 12.0, 3.0, 7.0, 9.0]]]
    ann, root = _write(tmp_path, [_img(1), _img(2), _img(3)], anns)
    with pytest.raises(DatasetError, match="annotation 3 .*invalid polygon"):
        COCODataset(ann, root, True)


def test_bad_inputs_name_the_file(tmp_path):
    with pytest.raises(DatasetError, match="annotation file .*missing.json"):
        COCODataset(str(tmp_path / "missing.json"), str(tmp_path), True)
    ann, root = _write(tmp_path, [_img(1)], [_ann(1, 1, 5, [2, 3, 10, 8])])
    with pytest.raises(DatasetError, match="image folder .*nope"):
        COCODataset(ann, str(tmp_path / "nope"), True)
    (tmp_path / "images" / "1.jpg").write_bytes(b"\xff\xd8\xff garbage")
    with pytest.raises(DatasetError, match=r"image file .*1\.jpg.* corrupt"):
        COCODataset(ann, root, True)[0]
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(DatasetError, match="bad.json"):
        COCODataset(str(bad), root, True)
    only_tiny, root = _write(tmp_path, [_img(1)], [_ann(1, 1, 5, [0, 0, 1, 4])])
    with pytest.raises(DatasetError, match="no images with usable annotations"):
        COCODataset(only_tiny, root, True)


def test_resize_rule_matches_reference():
    r = Resize((800,), 1333)
    assert r.get_size((640, 480)) == (800, 1066)   # (h, w)
    assert r.get_size((1000, 300)) == (400, 1333)  # capped by max size: round(1333 * 300 / 1000) = 400
    assert r.get_size((800, 600)) == (800, 1066)


@pytest.mark.parametrize("to_bgr255", [True, False])
def test_normalization_is_the_references_recipe_channel_by_channel(to_bgr255):
    """The input tensor as the reference's transforms make it, from torchvision's to_tensor and normalize (an outside
    oracle): BGR at 0-255 minus the Caffe2 means (or RGB at 0-1), on an image whose channels all differ (a swap
    of two channels, or one channel's mean, passed the range check of the loader test)."""
    import torchvision.transforms.functional as TF

    from maskrcnn_benchmark.data.transforms import ToNormalizedTensor

    gen = torch.Generator().manual_seed(0)
    pixels = torch.randint(0, 256, (24, 32, 3), dtype=torch.uint8, generator=gen)
    pixels[..., 0] //= 2                 # the channels' ranges differ: R low, G full, B high
    pixels[..., 2] = 128 + pixels[..., 2] // 2
    image = Image.fromarray(pixels.numpy(), "RGB")
    mean, std = [102.9801, 115.9465, 122.7717], [1.0, 2.0, 4.0]
    ours, _ = ToNormalizedTensor(mean, std, to_bgr255=to_bgr255)(image, None)
    reference = TF.to_tensor(image)
    if to_bgr255:
        reference = reference[[2, 1, 0]] * 255
    reference = TF.normalize(reference, mean, std)
    # BGR x 255: the reference rounds x / 255 to float32 (relative error 2^-24) and multiplies by 255 (another
    # 2^-24): at most 255 * 2 * 2^-24 = 3.04e-5 from the exact x; the mean's subtraction and the std's division
    # (>= 1) add no more than their own roundings, equal on both sides. RGB at 0-1: both divide by 255 in float32.
    torch.testing.assert_close(ours, reference, rtol=0, atol=3.1e-5 if to_bgr255 else 1e-7)


def test_synthetic_dataset_through_transforms_and_loader(synthetic_dir):
    cfg = small_cfg()
    merge_cfg_from_list(cfg, ["DATASETS.DATA_DIR", str(synthetic_dir), "DATASETS.TRAIN", "('coco_2017_train',)",
                              "DATASETS.TEST", "('coco_2017_val',)", "INPUT.MIN_SIZE_TRAIN", "(96,)",
                              "INPUT.MAX_SIZE_TRAIN", 96, "DATALOADER.NUM_WORKERS", 0,
                              "SOLVER.IMS_PER_BATCH", 4, "SOLVER.MAX_ITER", 7])
    loader = make_data_loader(cfg, is_train=True)
    batches = list(loader)
    assert len(batches) == 7
    images, targets, ids = batches[0]
    assert images.tensors.shape[0] == 4 and images.tensors.shape[-1] % 32 == 0
    assert targets.image_wh.tolist() == [[96.0, 96.0]] * 4
    # Caffe2 normalization: BGR, 0-255, mean subtracted
    assert images.tensors.min() < -50 and images.tensors.max() > 50
    labels = targets.labels[targets.valid]
    assert labels.min() >= 1 and labels.max() <= 3
    test_loader = make_data_loader(cfg, is_train=False)[0]
    seen = [i for _, _, ids in test_loader for i in ids]
    assert sorted(seen) == list(range(8))


def test_two_training_datasets_are_concatenated(synthetic_dir):
    """DATASETS.TRAIN with two entries (the reference's ('coco_2014_train', 'coco_2014_valminusminival')): one
    dataset of both, its augmentation seeds passed through to the member that holds the index."""
    cfg = small_cfg()
    merge_cfg_from_list(cfg, ["DATASETS.DATA_DIR", str(synthetic_dir),
                              "DATASETS.TRAIN", "('coco_2017_train', 'coco_2017_val')",
                              "INPUT.MIN_SIZE_TRAIN", "(64,)", "INPUT.MAX_SIZE_TRAIN", 64,
                              "DATALOADER.NUM_WORKERS", 0, "DATALOADER.ASPECT_RATIO_GROUPING", False,
                              "SOLVER.IMS_PER_BATCH", 4, "SOLVER.MAX_ITER", 3])
    loader = make_data_loader(cfg, is_train=True, seed=1)
    dataset = loader.dataset
    sizes = [len(d) for d in dataset.datasets]
    assert len(sizes) == 2 and len(dataset) == sum(sizes)
    # the last index is the second dataset's last image, read through the tuple form the training sampler yields
    image, target, _ = dataset[(len(dataset) - 1, 123)]
    img_id = dataset.datasets[1].ids[sizes[1] - 1]
    assert target.bbox.shape[0] == len(dataset.datasets[1].coco.imgToAnns[img_id])
    batches = list(loader)
    assert len(batches) == 3 and all(images.tensors.shape[0] == 4 for images, _, _ in batches)


def test_flip_moves_boxes_and_polygons_together(synthetic_dir):
    """The reference's flip (x -> W - 1 - x for boxes and polygon vertices), exactly; the masks are pycocotools'
    rasterization of the flipped polygons (an outside oracle: the mean difference of 2 % it replaced let a mask
    shifted by several columns pass, and only each box's x1 was looked at)."""
    cfg = small_cfg("INPUT.HORIZONTAL_FLIP_PROB_TRAIN", 1.0, "INPUT.MIN_SIZE_TRAIN", "(128,)",
                    "INPUT.MAX_SIZE_TRAIN", 128)
    ds = COCODataset(str(synthetic_dir / "annotations" / "instances_train2017.json"),
                     str(synthetic_dir / "train2017"), True, transforms=build_transforms(cfg, True))
    plain = COCODataset(ds.ann_file, ds.root, True, transforms=build_transforms(small_cfg(
        "INPUT.HORIZONTAL_FLIP_PROB_TRAIN", 0.0, "INPUT.MIN_SIZE_TRAIN", "(128,)", "INPUT.MAX_SIZE_TRAIN", 128),
        True))
    import pycocotools.mask as mask_util

    for i in range(3):
        img_f, t_f, _ = ds[i]
        img_p, t_p, _ = plain[i]
        height, width = img_p.shape[-2:]
        torch.testing.assert_close(img_f, img_p.flip(-1))
        x1, y1, x2, y2 = t_p.bbox.unbind(1)
        assert torch.equal(t_f.bbox, torch.stack([width - 1 - x2, y1, width - 1 - x1, y2], 1))
        flipped = [[p.clone() for p in instance] for instance in t_p.get_field("masks").polygons]
        for part in (p for instance in flipped for p in instance):
            part[0::2] = width - part[0::2] - 1
        ours = t_f.get_field("masks")
        assert all(torch.equal(a, b) for x, y in zip(ours.polygons, flipped) for a, b in zip(x, y))
        coco = [mask_util.decode(mask_util.merge(mask_util.frPyObjects([p.double().tolist() for p in instance],
                                                                       height, width))) for instance in flipped]
        assert torch.equal(ours.convert("mask").get_mask_tensor().to(torch.uint8),
                           torch.from_numpy(numpy.stack(coco)))


def test_training_filter_counts_crowd_boxes_like_the_reference(tmp_path):
    """maskrcnn-benchmark keeps a training image when any annotation, crowd included, has a box wider and
    higher than 1 pixel (``has_valid_annotation``); train_samples is logged from that count."""
    anns = [_ann(1, 1, 5, [0, 0, 40, 30], crowd=1), _ann(2, 2, 5, [0, 0, 1, 30]), _ann(3, 3, 9, [3, 3, 9, 9])]
    ann, root = _write(tmp_path, [_img(1), _img(2), _img(3), _img(4)], anns)
    assert COCODataset(ann, root, True).ids == [1, 3]


def test_degenerate_parts_are_dropped_per_instance_not_per_image(tmp_path):
    """A part with fewer than 3 points is dropped from its instance (the reference); the image keeps polygon
    masks, so its other instances keep their exact polygon targets."""
    anns = [_ann(1, 1, 5, [2, 3, 10, 8], seg=[[2, 3, 12, 3], [2, 3, 12, 3, 12, 11]]),
            _ann(2, 1, 9, [20, 3, 10, 8], seg=[[20, 3, 30, 3]])]
    ann, root = _write(tmp_path, [_img(1)], anns)
    _, t, _ = COCODataset(ann, root, True)[0]
    masks = t.get_field("masks")
    assert masks.mode == "poly" and len(masks) == 2
    assert [len(inst) for inst in masks.polygons] == [1, 0]


@pytest.mark.parametrize("field,value,needle", [
    ("bbox", [2, 3, float("nan"), 8], r"annotation 1 in '.*instances.json' has an invalid bbox \[2, 3, nan, 8\]"),
    ("bbox", [float("inf"), 3, 10, 8], r"annotation 1 in .* invalid bbox \[inf"),
    ("segmentation", [[2, 3, 12, 3, float("nan"), 11]], r"annotation 1 in .* polygon with a non-finite coordinate"),
    ("category_id", 99, r"annotation 1 in .* category_id 99, which is not in the file's categories \(5, 9\)"),
    ("image_id", 7, r"annotation 1 in .* image_id 7, which is not in the file's images"),
    # loaded before, then failed in a loader worker an epoch in ("too many dimensions 'str'"), naming nothing
    ("bbox", ["2", 3, 10, 8], r"annotation 1 in '.*instances.json' has an invalid bbox \['2', 3, 10, 8\]"),
])
def test_corrupt_annotations_are_one_line_errors_naming_id_and_file(tmp_path, field, value, needle):
    ann = _ann(1, 1, 5, [2, 3, 10, 8])
    ann[field] = value
    path, root = _write(tmp_path, [_img(1)], [ann, _ann(2, 1, 9, [1, 1, 5, 5])])  # json writes NaN/Infinity
    with pytest.raises(DatasetError, match=needle) as e:
        COCODataset(path, root, True)
    assert "\n" not in str(e.value)


def test_filter_report_warns_when_a_large_share_is_dropped(tmp_path, caplog):
    anns = [_ann(i, 1 + i % 4, 5, [1, 1, 0.5, 0.5]) for i in range(1, 9)] + [_ann(9, 1, 5, [2, 3, 10, 8])]
    path, root = _write(tmp_path, [_img(i) for i in range(1, 5)], anns)
    with caplog.at_level(logging.INFO):
        ds = COCODataset(path, root, True)
    assert ds.ids == [1]
    assert "training on 1 of 4 images" in caplog.text and "8 have boxes of 1 px or less" in caplog.text
    assert any(r.levelno == logging.WARNING and "large share" in r.getMessage() for r in caplog.records)


def test_evaluation_batches_group_orientations_as_the_reference(tmp_path):
    """maskrcnn-benchmark groups the test set's batches by aspect ratio too (ASPECT_RATIO_GROUPING): a quarter of
    COCO val is portrait, and a batch mixing orientations pads both to a square (about 36 % more pixels). The test
    loader batched in order."""
    images = [_img(i, *((40, 30) if i % 2 else (30, 40))) for i in range(1, 7)]
    ann, root = _write(tmp_path, images, [_ann(i, i, 5, [2, 2, 9, 9]) for i in range(1, 7)])
    cfg = small_cfg("TEST.IMS_PER_BATCH", 2, "DATALOADER.NUM_WORKERS", 0)
    ds = COCODataset(ann, root, False, transforms=build_transforms(cfg, False))
    loader = make_data_loader(cfg, is_train=False, datasets=[ds], num_replicas=1, rank=0)[0]
    batches = list(loader.batch_sampler)
    portrait = [ds.get_img_info(i)["height"] > ds.get_img_info(i)["width"] for i in range(len(ds))]
    assert sorted(i for b in batches for i in b) == list(range(6))  # every image once
    assert all(len({portrait[i] for i in b}) == 1 for b in batches), batches
    cfg.merge_from_list(["DATALOADER.ASPECT_RATIO_GROUPING", False])
    assert list(make_data_loader(cfg, is_train=False, datasets=[ds], num_replicas=1, rank=0)[0].batch_sampler) == \
        [[0, 1], [2, 3], [4, 5]]


def test_loader_workers_are_forked_whatever_pythons_default(tmp_path):
    """Python 3.14 starts processes by forkserver by default on Linux: the loader's workers then got the dataset
    pickled to each of them (COCO train's parsed annotations, a gigabyte or more, per worker and rank, after
    run_start). They are forked, as torch's loaders always were on Linux before 3.14."""
    import multiprocessing

    ann, root = _write(tmp_path, [_img(1)], [_ann(1, 1, 5, [2, 2, 9, 9])])
    cfg = small_cfg("TEST.IMS_PER_BATCH", 1, "DATALOADER.NUM_WORKERS", 1)
    ds = COCODataset(ann, root, False, transforms=build_transforms(cfg, False))
    default = multiprocessing.get_start_method(allow_none=True)
    multiprocessing.set_start_method("forkserver", force=True)  # 3.14's default, here
    try:
        loader = make_data_loader(cfg, is_train=False, datasets=[ds], num_replicas=1, rank=0)[0]
    finally:
        multiprocessing.set_start_method(default, force=True)
    assert loader.multiprocessing_context.get_start_method() == "fork"


@pytest.mark.slow  # starts a loader worker process
def test_evaluation_loader_keeps_its_worker_between_evaluations(synthetic_dir):
    """Every epoch's evaluation iterates the test loader again: its worker process stays (forking one for each
    evaluation cost about 60 ms of the demo's 3 s evaluation), and each pass yields every image once, in order."""
    cfg = small_cfg()
    merge_cfg_from_list(cfg, ["DATASETS.DATA_DIR", str(synthetic_dir), "DATASETS.TEST", "('coco_2017_val',)",
                              "DATALOADER.NUM_WORKERS", 1, "TEST.IMS_PER_BATCH", 4])
    loader = make_data_loader(cfg, is_train=False)[0]
    first = [i for _, _, ids in loader for i in ids]
    workers = list(loader._iterator._workers)
    second = [i for _, _, ids in loader for i in ids]
    assert first == second == list(range(8))
    assert [w.pid for w in loader._iterator._workers] == [w.pid for w in workers]
    assert all(w.is_alive() for w in workers)


@pytest.mark.parametrize("change,needle,scored", [
    (lambda a: a.update(segmentation={"size": [30, 40]}), r"annotation 1 in '.*' has an RLE segmentation without "
     r"'counts': ", False),
    # a loader worker an epoch in: "mask shape ... does not match image size", naming neither file nor annotation
    (lambda a: a.update(segmentation={"size": [40, 30], "counts": "PPYo0"}), r"annotation 1 in '.*' has an RLE "
     r"segmentation of size \[40, 30\], not its image's \[30, 40\] \(height, width\)", False),
    (lambda a: a.pop("area"), r"annotation 1 in '.*instances.json' has no 'area'", True),
    (lambda a: a.pop("iscrowd"), r"annotation 1 in '.*instances.json' has no 'iscrowd'", True),
])
def test_what_the_coco_evaluation_reads_is_checked_when_the_dataset_is_built(tmp_path, change, needle, scored):
    """pycocotools' COCOeval reads every ground-truth annotation's 'area' and 'iscrowd', and decodes an RLE by its
    'counts' and 'size': an evaluation set without them trained a whole epoch, then scoring failed with "KeyError:
    'iscrowd'", naming no file. A training set needs neither 'area' nor 'iscrowd' (crowd: 0 when absent)."""
    path, root = _write(tmp_path, [_img(1)], [_ann(1, 1, 5, [2, 3, 10, 8])])
    data = json.loads(open(path).read())
    change(data["annotations"][0])
    open(path, "w").write(json.dumps(data))
    with pytest.raises(DatasetError, match=needle) as e:
        COCODataset(path, root, False)  # an evaluation set (the reference's flag: False when not training)
    assert "\n" not in str(e.value)
    if scored:
        assert len(COCODataset(path, root, True)) == 1  # a training set
    if "RLE segmentation of size" in needle:  # a crowd region, which training skips: a training set keeps it
        data["annotations"][0]["iscrowd"] = 1
        data["annotations"].append(_ann(2, 1, 5, [2, 3, 10, 8]))
        open(path, "w").write(json.dumps(data))
        assert len(COCODataset(path, root, True)) == 1
        with pytest.raises(DatasetError, match=needle):
            COCODataset(path, root, False)


@pytest.mark.parametrize("change,needle", [
    (lambda d: d["images"].append("2.jpg"), r"has an entry of 'images' that is not an object: '2.jpg'"),
    (lambda d: d["annotations"].append(7), r"has an entry of 'annotations' that is not an object: 7"),
    (lambda d: d.update(categories={"id": 5}), r"is not COCO instances json"),
    (lambda d: d["images"][0].pop("file_name"), r"image 1 in '.*instances.json' has no file_name"),
    # below: pycocotools' index, the aspect grouping, the evaluator or a loader worker an epoch in raised a bare
    # KeyError / ZeroDivisionError / AttributeError, or a wrong box trained silently
    (lambda d: d["images"][0].pop("id"), r"image '1.jpg' in '.*instances.json' has no integer id"),
    (lambda d: d["annotations"][0].pop("id"), r"an annotation of image 1 in '.*instances.json' has no integer id"),
    (lambda d: d["categories"][0].pop("id"), r"category 'a' in '.*instances.json' has no integer id"),
    # pycocotools indexes categories by id: the second one replaced the first, and labels counted both
    (lambda d: d["categories"].append({"id": 5, "name": "again"}), r"category id 5 is listed twice in '.*instances"),
    (lambda d: d.pop("categories"), r"is not COCO instances json"),
    (lambda d: d["images"][0].pop("width"), r"image 1 in '.*instances.json' has no width and height"),
    (lambda d: d["images"][0].update(height=0), r"image 1 in '.*instances.json' has no width and height .*: 40x0"),
    (lambda d: d["annotations"][0].pop("segmentation"), r"annotation 1 in '.*instances.json' has no segmentation"),
    (lambda d: d["annotations"][0].update(segmentation=[[1, 2, 3, 4, 5, 6, 7]]),
     r"annotation 1 in '.*instances.json' has an invalid polygon \(7 coordinates"),
    # a number too large for a float parses as inf without json's NaN/Infinity hook (the text is put in below)
    (lambda d: d["annotations"][0].update(bbox=[2, 3, "1e999", 8]), r"annotation 1 .* has an invalid bbox"),
    # an integer beyond a float's range (json keeps it an int: math.isfinite raised OverflowError)
    (lambda d: d["annotations"][0].update(bbox=[2, 3, 10 ** 400, 8]), r"annotation 1 .* has an invalid bbox"),
])
def test_annotation_files_of_the_wrong_shape_are_one_line_errors_naming_the_file(tmp_path, change, needle):
    """Each was an AttributeError or KeyError traceback (exit 5) when the dataset was built or indexed."""
    path, root = _write(tmp_path, [_img(1)], [_ann(1, 1, 5, [2, 3, 10, 8])])
    with open(path) as f:
        data = json.load(f)
    change(data)
    with open(path, "w") as f:
        f.write(json.dumps(data).replace('"1e999"', "1e999"))
    with pytest.raises(DatasetError, match=needle) as e:
        COCODataset(path, root, True)
    assert "\n" not in str(e.value)


def test_categories_map_to_labels_in_the_files_order_as_the_reference_maps_them(tmp_path):
    """The reference numbers the categories as pycocotools lists them, the file's order
    (``enumerate(self.coco.getCatIds())``); labels 1..K were given in sorted id order, so on a file whose categories
    are not sorted a label meant another class than in the reference (its checkpoints, its label maps). The class
    names the predictor prints follow the same order."""
    from pycocotools.coco import COCO

    from maskrcnn_benchmark.engine.predictor import class_names

    cats = [{"id": 9, "name": "b"}, {"id": 5, "name": "a"}, {"id": 7, "name": "c"}]
    ann, root = _write(tmp_path, [_img(1)], [_ann(1, 1, 5, [2, 3, 10, 8]), _ann(2, 1, 7, [1, 1, 9, 9])], cats)
    dataset = COCODataset(ann, root, remove_images_without_annotations=True)
    reference = {c: i + 1 for i, c in enumerate(COCO(ann).getCatIds())}
    assert dataset.json_category_id_to_contiguous_id == reference == {9: 1, 5: 2, 7: 3}
    assert dataset.contiguous_category_id_to_json_id == {1: 9, 2: 5, 3: 7}
    assert class_names(ann) == ["b", "a", "c"]
    _, target, _ = dataset[0]
    assert target.get_field("labels").tolist() == [2, 3]


def test_datasets_whose_categories_come_in_another_order_are_refused(tmp_path):
    """Labels number the categories in each file's order, so a test file listing the training file's categories
    in another order scores every class as another one; the checks compared the sorted lists and let it through."""
    from maskrcnn_benchmark.data.build import check_num_classes
    from maskrcnn_benchmark.data.catalog import read_categories

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = ({"id": 5, "name": "a"}, {"id": 9, "name": "b"})
    train = COCODataset(*_write(tmp_path / "a", [_img(1)], [_ann(1, 1, 5, [2, 3, 10, 8])], [a, b]),
                        remove_images_without_annotations=True)
    test = COCODataset(*_write(tmp_path / "b", [_img(1)], [_ann(1, 1, 5, [2, 3, 10, 8])], [b, a]),
                       remove_images_without_annotations=False)
    assert read_categories(test.ann_file) == [(9, "b"), (5, "a")]  # the file's order
    with pytest.raises(DatasetError, match="different categories"):
        check_num_classes(3, train, [test])
    check_num_classes(3, train, [train])


@pytest.mark.parametrize("categories", [[{}], {"id": 1, "name": "a"}, [1, 2], [{"id": [1], "name": "a"}],
                                        [{"id": True}], [{"id": 1, "name": "a"}, {"id": 1, "name": "b"}]])
def test_categories_that_are_not_cocos_are_one_line_naming_the_file(tmp_path, categories):
    """A category without an integer id (COCO's format: a list of {"id": int, "name": str}) or one id twice: the
    number of classes read from the file (engine/resolve.py, before any rank starts) raised KeyError or TypeError,
    an internal error (exit 5) with a traceback instead of one line naming the file."""
    from maskrcnn_benchmark.data.catalog import read_categories

    ann = tmp_path / "instances_train.json"
    ann.write_text(json.dumps({"images": [], "annotations": [], "categories": categories}))
    with pytest.raises(DatasetError, match="instances_train.json") as e:
        read_categories(str(ann))
    assert "\n" not in str(e.value)
