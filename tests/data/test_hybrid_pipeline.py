"""The hybrid input path (decode in the worker; resize, flip, normalize and pad on the device, batched) against the
reference path (PIL in the worker), which is the oracle: same images, same random draws, same pixels.

PIL itself is the oracle of the resize: ``pil_resize`` reimplements Pillow's bilinear resampling (coefficients,
22-bit fixed point, horizontal pass then vertical, uint8 after each) and must give Pillow's bytes. Pillow 12+
runs the vertical pass first for some reductions of the height, which rounds differently (by at most one level);
the MLPerf COCO case only enlarges (640x480 -> 1066x800), where the two are identical.
"""
import json
import random

import numpy as np
import pytest
import torch
from PIL import Image

from helpers import bomb_png
from maskrcnn_benchmark.config import get_cfg
from maskrcnn_benchmark.data.collate_batch import BatchCollator
from maskrcnn_benchmark.data.datasets import COCODataset, DatasetError
from maskrcnn_benchmark.data.transforms import build_transforms
from maskrcnn_benchmark.data.transforms.device import DeviceTransform, pil_resize
from maskrcnn_benchmark.modeling.compat import target_batch
from maskrcnn_benchmark.modeling.roi_heads.mask_head.loss import project_masks_on_boxes
from maskrcnn_benchmark.structures import BoxList, RawImage, RawImageBatch, to_image_list
from maskrcnn_benchmark.structures.packing import handed_over_storages
from maskrcnn_benchmark.structures.target_batch import TargetBatch
from maskrcnn_benchmark.synthetic.coco_like import write_coco_like


def _pil(arr, out_hw, flip):
    im = Image.fromarray(arr).resize((out_hw[1], out_hw[0]), Image.BILINEAR)
    return np.asarray(im.transpose(Image.FLIP_LEFT_RIGHT) if flip else im)


def _batch(arrays):
    h, w = max(a.shape[0] for a in arrays), max(a.shape[1] for a in arrays)
    batch = torch.zeros((len(arrays), 3, h, w), dtype=torch.uint8)
    for b, a in zip(batch, arrays):
        b[:, : a.shape[0], : a.shape[1]] = torch.from_numpy(a).permute(2, 0, 1)
    return batch


def test_pil_resize_is_pillows_bilinear_resize_bit_for_bit():
    """Enlarging (any aspect) and every resize Pillow does horizontal pass first, flips included, in one batch
    of images of different sizes."""
    rng = np.random.default_rng(0)
    cases = [((480, 640), (800, 1066)), ((640, 480), (1066, 800)), ((427, 640), (800, 1199)), ((96, 96), (96, 96)),
             ((37, 53), (91, 200)), ((120, 30), (121, 333)), ((50, 180), (20, 90)), ((200, 200), (100, 100)),
             ((300, 80), (301, 81))]
    arrays = [(rng.random((h, w, 3)) * 255).astype(np.uint8) for (h, w), _ in cases]
    flips = [i % 2 == 1 for i in range(len(cases))]
    out = pil_resize(_batch(arrays), [c[0] for c in cases], [c[1] for c in cases], flips)
    for k, ((_, (ho, wo)), arr) in enumerate(zip(cases, arrays)):
        got = out[k, :, :ho, :wo].permute(1, 2, 0).numpy()
        assert np.array_equal(got, _pil(arr, (ho, wo), flips[k])), cases[k]


def test_pil_resize_when_pillow_runs_the_vertical_pass_first():
    """Reducing the height while enlarging the width: Pillow may run the vertical pass first; the rounding
    between the passes then differs by at most one level in some pixels."""
    rng = np.random.default_rng(1)
    errors = []
    for (hi, wi), (ho, wo) in [((252, 85), (59, 152)), ((205, 139), (52, 194)), ((250, 261), (219, 309))]:
        arr = (rng.random((hi, wi, 3)) * 255).astype(np.uint8)
        got = pil_resize(_batch([arr]), [(hi, wi)], [(ho, wo)])[0, :, :ho, :wo].permute(1, 2, 0).numpy()
        errors.append(np.abs(got.astype(int) - _pil(arr, (ho, wo), False)))
    assert max(e.max() for e in errors) <= 1
    assert max(e.mean() for e in errors) < 0.35


@pytest.fixture(scope="module")
def coco_like(tmp_path_factory):
    root = tmp_path_factory.mktemp("coco_like")
    image_dir, ann_file = write_coco_like(str(root), num_images=6, seed=4)
    return image_dir, ann_file


def test_coco_like_areas_are_the_polygons(coco_like):
    """The area of each instance was its box's (a star-shaped polygon fills 40-80 % of it): COCOeval's small /
    medium / large ranges read it. Within 3 % of the polygon's shoelace area (the pixel count differs by the
    border pixels)."""
    with open(coco_like[1]) as f:
        anns = json.load(f)["annotations"]
    for a in anns:
        xs, ys = np.array(a["segmentation"][0][0::2]), np.array(a["segmentation"][0][1::2])
        shoelace = 0.5 * abs(np.dot(xs, np.roll(ys, 1)) - np.dot(ys, np.roll(xs, 1)))
        assert a["area"] == pytest.approx(shoelace, rel=0.03), a["id"]


def _cfg(train):
    cfg = get_cfg()
    cfg.INPUT.MIN_SIZE_TRAIN = (640, 672, 704, 736, 768, 800) if train else (800,)
    cfg.DATALOADER.SIZE_DIVISIBILITY = 32
    return cfg


@pytest.mark.parametrize("train", [True, False])
def test_hybrid_equals_the_reference_path_on_coco_sized_images(coco_like, train):
    """The same images and augmentation seeds through both paths: every normalized pixel (padding included),
    every box and every 28x28 mask target are equal."""
    image_dir, ann_file = coco_like
    cfg = _cfg(train)
    reference = COCODataset(ann_file, image_dir, train, build_transforms(cfg, train))
    hybrid = COCODataset(ann_file, image_dir, train, build_transforms(cfg, train), hybrid=True)
    items = [(i, 1000 + i) if train else i for i in range(len(reference))]
    ref = [reference[i] for i in items]
    hyb = [hybrid[i] for i in items]
    if train:
        assert {bool(raw.flip) for raw, _, _ in hyb} == {False, True}  # both branches of the flip are covered
        assert len({raw.image_size for raw, _, _ in hyb}) > 2          # and several sizes
    expected = to_image_list([img for img, _, _ in ref], 32)
    raw_batch = BatchCollator()(hyb)[0]  # as a loader worker makes it: the pixels padded, the resize's tables made
    got = DeviceTransform.from_config(cfg)(raw_batch)
    assert raw_batch.tables is not None
    untabled = DeviceTransform.from_config(cfg)(RawImageBatch.from_raw([raw for raw, _, _ in hyb]))
    assert torch.equal(untabled.tensors, got.tensors)  # tables made by the transform itself: the same pixels
    assert got.image_sizes == expected.image_sizes
    assert got.tensors.shape == expected.tensors.shape
    error = (got.tensors - expected.tensors).abs()
    assert float(error.max()) == 0.0 and float(error.mean()) == 0.0
    for (_, t_ref, _), (_, t_hyb, _) in zip(ref, hyb):
        assert t_ref.size == t_hyb.size
        assert torch.equal(t_ref.bbox, t_hyb.bbox)  # the same BoxList.resize/transpose on both paths
        proposals = BoxList(t_ref.bbox + torch.tensor([-3.0, 2.0, 4.0, -1.0]), t_ref.size)
        assert torch.equal(project_masks_on_boxes(t_ref.get_field("masks"), proposals, 28),
                           project_masks_on_boxes(t_hyb.get_field("masks"), proposals, 28))


def _dataset_with(tmp_path, content):
    """A one-image COCO dataset whose image file holds ``content`` (bytes or a PIL image to save)."""
    image_dir, ann_file = write_coco_like(str(tmp_path), num_images=1, seed=9)
    path = f"{image_dir}/000000000001.jpg"
    if isinstance(content, bytes):
        with open(path, "wb") as f:
            f.write(content)
    elif content is not None:
        fmt, image = content
        image.save(path, format=fmt)
    return image_dir, ann_file, path


@pytest.mark.parametrize("content,needle", [
    (b"", "corrupt or not an image"),
    (b"\xff\xd8\xff\xe0 truncated", "corrupt or not an image"),
    (bomb_png(), "decompression bomb"),
])
def test_bad_files_are_one_line_naming_the_file(tmp_path, content, needle):
    image_dir, ann_file, path = _dataset_with(tmp_path, content)
    for hybrid in (False, True):
        ds = COCODataset(ann_file, image_dir, True, build_transforms(_cfg(True), True), hybrid=hybrid)
        with pytest.raises(DatasetError) as e:
            ds[0]
        assert path in str(e.value) and needle in str(e.value) and "\n" not in str(e.value)


def test_a_missing_file_is_named_when_the_dataset_is_built(tmp_path):
    import os

    image_dir, ann_file, path = _dataset_with(tmp_path, None)
    os.unlink(path)
    with pytest.raises(DatasetError) as e:
        COCODataset(ann_file, image_dir, True, build_transforms(_cfg(True), True), hybrid=True)
    assert path in str(e.value) and "does not exist" in str(e.value)


def test_a_truncated_jpeg_is_named_on_both_paths(tmp_path):
    """A JPEG cut in the middle of its data: PIL refuses it (LOAD_TRUNCATED_IMAGES is off, as in the reference's
    loader), and the hybrid path's decoder must refuse it too rather than train on pixels it made up: one line
    naming the file on both paths."""
    image_dir, ann_file, path = _dataset_with(tmp_path, None)
    data = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(data[: len(data) // 2])
    cfg = _cfg(False)
    outcomes = []
    for hybrid in (False, True):
        ds = COCODataset(ann_file, image_dir, False, build_transforms(cfg, False), hybrid=hybrid)
        try:
            outcomes.append(ds[0][0])
        except DatasetError as e:
            assert path in str(e) and "\n" not in str(e)
            outcomes.append(None)
    assert outcomes == [None, None]


@pytest.mark.parametrize("mode,fmt", [("L", "JPEG"), ("CMYK", "JPEG"), ("RGB", "PNG"), ("I;16", "PNG"),
                                      ("RGB", "BMP"), ("RGB", "TIFF"), ("P", "GIF")])
def test_grayscale_cmyk_and_png_are_converted_like_the_reference(tmp_path, mode, fmt):
    """Every image the reference reads (PIL, ``convert("RGB")``), read alike by the hybrid path: torchvision's
    decoder gave a 16-bit PNG as uint16 (whose values overflowed the resampling's int32) and refused BMP and
    TIFF; PIL decodes those."""
    rng = np.random.default_rng(5)
    if mode == "I;16":  # values above 255 (PIL's I;16 -> RGB clips them)
        image = Image.fromarray((rng.random((640, 480)) * 65535).astype(np.uint16))
    else:
        image = Image.fromarray((rng.random((640, 480, 3)) * 255).astype(np.uint8)).convert(mode)  # 480x640
    image_dir, ann_file, _ = _dataset_with(tmp_path, (fmt, image))
    cfg = _cfg(False)
    ref = COCODataset(ann_file, image_dir, False, build_transforms(cfg, False))[0][0]
    raw = COCODataset(ann_file, image_dir, False, build_transforms(cfg, False), hybrid=True)[0][0]
    got = DeviceTransform.from_config(cfg)(RawImageBatch.from_raw([raw]))
    expected = to_image_list([ref], 32)
    assert torch.equal(got.tensors, expected.tensors)


def test_the_device_transform_pads_with_zeros_like_to_image_list():
    cfg = _cfg(False)
    arrays = [np.full((30, 40, 3), 200, np.uint8), np.full((50, 20, 3), 10, np.uint8)]
    raw = RawImageBatch([torch.from_numpy(a).permute(2, 0, 1) for a in arrays], [(45, 60), (50, 20)], [False, True])
    out = DeviceTransform.from_config(cfg)(raw)
    assert out.tensors.shape == (2, 3, 64, 64) and out.image_sizes == [(45, 60), (50, 20)]
    assert (out.tensors[0, :, 45:] == 0).all() and (out.tensors[0, :, :, 60:] == 0).all()
    assert (out.tensors[1, :, :, 20:] == 0).all()
    assert torch.allclose(out.tensors[0, :, 0, 0], torch.tensor([200.0, 200.0, 200.0]) - torch.tensor(
        cfg.INPUT.PIXEL_MEAN))


def test_random_draws_are_the_same_on_both_paths():
    """The hybrid transforms draw the size and the flip as the reference does, from the sample's own seed."""
    cfg = _cfg(True)
    reference, hybrid = build_transforms(cfg, True), build_transforms(cfg, True)
    from maskrcnn_benchmark.structures import RawImage

    for seed in range(20):
        image = Image.new("RGB", (640, 480))
        img, _ = reference(image, None, random.Random(seed))
        raw, _ = hybrid(RawImage(torch.zeros((3, 480, 640), dtype=torch.uint8)), None, random.Random(seed))
        assert raw.image_size == (img.shape[1], img.shape[2])


class _CountingLoader:
    def __init__(self, batches):
        self.batches, self.passes, self.dataset = batches, 0, None

    def __iter__(self):
        self.passes += 1
        return iter(self.batches)

    def __len__(self):
        return len(self.batches)


def test_the_device_loader_transforms_raw_batches_and_can_keep_them():
    from maskrcnn_benchmark.data.device_loader import DeviceLoader

    cfg = _cfg(False)
    images = [torch.full((3, 30, 40), 100, dtype=torch.uint8), torch.full((3, 30, 40), 50, dtype=torch.uint8)]
    raw = RawImageBatch(images, [(60, 80), (60, 80)], [False, False])
    target = BoxList(torch.tensor([[1.0, 2.0, 10.0, 12.0]]), (80, 60))
    target.add_field("labels", torch.tensor([1]))
    source = _CountingLoader([(raw, target_batch([target, target]), (0, 1))])
    loader = DeviceLoader(source, "cpu", DeviceTransform.from_config(cfg), cache=True)
    first = list(loader)
    second = list(loader)
    assert source.passes == 1  # the second pass came from the kept device batches
    for (imgs, targets, ids) in (first[0], second[0]):
        assert imgs.tensors.shape == (2, 3, 64, 96) and ids == (0, 1)
        assert torch.allclose(imgs.tensors[0, 0, 0, 0], torch.tensor(100.0 - cfg.INPUT.PIXEL_MEAN[0]))
        assert torch.equal(targets.boxes[0], target.bbox) and torch.equal(targets.boxes[1], target.bbox)
    assert torch.equal(first[0][0].tensors, second[0][0].tensors)


class _HostCopies(torch.overrides.TorchFunctionMode):
    """Counts the tensors made on, or moved to, a device other than the CPU from host memory (Python numbers, a CPU
    tensor): on CUDA each is a copy from pageable memory, which waits for the stream (the side stream of the
    loader, whose copies and resizes then block the training process)."""

    def __init__(self):
        super().__init__()
        self.sites = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        device = kwargs.get("device")
        if func in (torch.Tensor.to, torch.Tensor.cuda, torch.Tensor.copy_):
            src = args[1] if func is torch.Tensor.copy_ else args[0]
            dst = args[0].device if func is torch.Tensor.copy_ else next(
                (a for a in (*args[1:], device) if isinstance(a, (str, torch.device))), None)
            if dst is not None and src.device.type == "cpu" and torch.device(dst).type != "cpu":
                self.sites.append(func.__name__)
        elif func in (torch.tensor, torch.as_tensor) and device is not None and torch.device(device).type != "cpu":
            self.sites.append(func.__name__)
        return func(*args, **kwargs)


def test_the_device_transform_copies_nothing_from_host_memory():
    """The transform made eight copies from pageable host memory per batch (the four resize tables, the mean and
    std, the sizes twice): on CUDA each blocks until the loader's side stream has done the batch's copies and
    resizes. Now the tables and sizes come with the batch's one pinned copy, the mean and std are copied once. On
    the meta device (no CUDA here) the copies are counted as they would be made."""
    cfg = _cfg(True)
    raws = [RawImage(torch.full((3, 30, 40), 100, dtype=torch.uint8), (60, 80), False),
            RawImage(torch.full((3, 40, 20), 50, dtype=torch.uint8), (80, 40), True)]
    batch = BatchCollator()([(r, BoxList(torch.zeros((0, 4)), r.image_size[::-1]), i) for i, r in enumerate(raws)])[0]
    transform = DeviceTransform.from_config(cfg)
    transform(batch.to("meta"))  # the first batch copies the mean and std to the device, once
    on_device = batch.to("meta")  # the loader's copy (pinned, asynchronous on CUDA)
    with _HostCopies() as copies:
        out = transform(on_device)
    assert copies.sites == []
    assert out.tensors.shape == (2, 3, 96, 96) and out.sizes.device.type == "meta"
    # the ImageList's sizes are their own: the raw batch's buffer is not kept alive through the step by them
    assert out.sizes.untyped_storage()._cdata != on_device.tensors.untyped_storage()._cdata


def test_a_hybrid_batch_leaves_its_worker_and_reaches_the_device_in_one_piece(coco_like):
    """Twelve images were twelve tensors: twelve shared-memory handovers from the worker to the training process,
    twelve pinned copies, twelve copies to the device (and the device padded them); the targets eight more. The
    collator now packs the padded pixels, the sizes and the resize's tables into one buffer, and the targets into
    another: two of each per batch, the targets unchanged."""
    raws = [RawImage(torch.randint(0, 255, (3, 30 + i, 40 - i), dtype=torch.uint8), (60, 80), i % 2 == 1)
            for i in range(12)]
    batch = BatchCollator()([(r, BoxList(torch.zeros((0, 4)), (80, 60)), i) for i, r in enumerate(raws)])[0]
    assert handed_over_storages(batch) == 1
    image_dir, ann_file = coco_like
    dataset = COCODataset(ann_file, image_dir, True, build_transforms(_cfg(True), True), hybrid=True)
    samples = [dataset[(i, 7 + i)] for i in range(len(dataset))]
    for max_gt in (0, 96):  # eager and static batches
        images, targets, _ = BatchCollator(max_gt=max_gt)(samples)
        assert targets.has_polygons and handed_over_storages((images, targets)) == 2
        expected = TargetBatch.from_boxlists([t for _, t, _ in samples], max_gt=max_gt)
        for a, b in zip(expected.tensors(), targets.to("cpu").tensors()):
            assert torch.equal(a, b) and a.dtype == b.dtype
    copies = []
    moved = batch._map(lambda t: copies.append(t.numel()) or t.clone())  # what pin_memory() and to() do
    assert len(copies) == 1
    for a, b in ((batch.tensors, moved.tensors), (batch.sizes, moved.sizes), *zip(batch.tables, moved.tables)):
        assert torch.equal(a, b) and a.dtype == b.dtype and b.storage_offset() % (128 // b.element_size()) == 0
    for i, r in enumerate(raws):
        h, w = r.tensor.shape[-2:]
        assert torch.equal(moved.tensors[i, :, :h, :w], r.tensor) and not moved.tensors[i, :, h:].any()


def test_views_of_one_host_buffer_that_start_at_one_address_move_as_their_own_storages():
    """Two tensors made from one numpy array (from_numpy) have two storages at the same address: keyed by the
    address, the second was rebuilt on the first one's smaller copy (its tail garbage)."""
    from maskrcnn_benchmark.structures.packing import map_storages

    base = np.arange(100, dtype=np.uint8)
    short, long = torch.from_numpy(base[:50]), torch.from_numpy(base[:80])
    moved = map_storages([short, long], lambda t: t.clone())
    assert torch.equal(moved[0], short) and torch.equal(moved[1], long)


class _DivisionsByANumber(torch.overrides.TorchFunctionMode):
    """The divisions whose divisor is a Python number: on CUDA such a divisor is a CPU scalar, which torch's
    true-division kernel turns into a multiplication by its reciprocal (one bit apart for 126 of the 256 uint8
    values divided by 255), where the reference divides on the CPU."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in (torch.Tensor.__truediv__, torch.Tensor.div, torch.div, torch.true_divide) and len(args) > 1 \
                and isinstance(args[1], (int, float)):
            self.calls += 1
        return func(*args, **(kwargs or {}))


def test_without_bgr255_the_device_divides_by_a_device_tensor():
    cfg = _cfg(True)
    cfg.defrost()
    cfg.INPUT.TO_BGR255 = False
    cfg.INPUT.PIXEL_MEAN, cfg.INPUT.PIXEL_STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    raws = [RawImage(torch.arange(3 * 30 * 40).reshape(3, 30, 40).remainder(256).to(torch.uint8), (30, 40), False)]
    batch = BatchCollator()([(r, BoxList(torch.zeros((0, 4)), r.image_size[::-1]), i) for i, r in enumerate(raws)])[0]
    transform = DeviceTransform.from_config(cfg)
    with _DivisionsByANumber() as divisions:
        out = transform(batch)
    assert divisions.calls == 0
    mean, std = torch.tensor(cfg.INPUT.PIXEL_MEAN)[:, None, None], torch.tensor(cfg.INPUT.PIXEL_STD)[:, None, None]
    assert torch.equal(out.tensors[0, :, :30, :40], (raws[0].tensor.float() / 255 - mean) / std)


def test_the_device_loader_keeps_one_side_stream_and_orders_each_pass_after_the_main_one(monkeypatch):
    """Each pass took a new side stream from torch's pool: the evaluation loader passes every epoch, and the
    caching allocator reuses a freed block only on the stream that allocated it, so every epoch's evaluation
    stranded its resize buffers on another stream (reserved memory growing epoch after epoch). And a pass over
    cached batches read what an earlier pass's copies wrote with no order between the two streams. The stream
    calls are recorded here (no GPU): one side stream per loader, made to wait for the main one at each pass."""
    from maskrcnn_benchmark.data.device_loader import DeviceLoader

    calls = []

    class Stream:
        def __init__(self, device=None):
            calls.append(("new", id(self)))

        def wait_stream(self, other):
            calls.append(("wait", id(self), id(other)))

    main = Stream()
    calls.clear()
    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: main)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: __import__("contextlib").nullcontext())

    class Images:  # a batch that reaches the device (its tensors on the CPU here: nothing to record)
        tensors = sizes = torch.zeros(1)

        def to(self, device, non_blocking=False):
            return self

    class Targets:
        def to(self, device, non_blocking=False):
            return self

        def tensors(self):
            return []

    loader = DeviceLoader([(Images(), Targets(), [0])] * 3, "cuda")
    for _ in range(3):  # three evaluations
        assert len(list(loader)) == 3
    made = [c for c in calls if c[0] == "new"]
    assert len(made) == 1, calls
    side = made[0][1]
    assert calls.count(("wait", side, id(main))) == 3, calls  # at the start of every pass
