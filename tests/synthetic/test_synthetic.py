"""maskrcnn_benchmark.synthetic: the deterministic synthetic COCO-format dataset."""

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from pycocotools import mask as mask_utils  # a hard dependency of the package: imported, never skipped
from pycocotools.coco import COCO

from maskrcnn_benchmark.cli.make_synthetic_coco import main as make_synthetic_main
from maskrcnn_benchmark import synthetic as syn

ROOT = Path(__file__).resolve().parents[2]
# pycocotools' own numpy-2 deprecation noise
pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")
SIZES = [(128, 128), (160, 96)]


def _files(d):
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(Path(d).rglob("*")) if p.is_file()}


def _coco(path):
    with contextlib.redirect_stdout(io.StringIO()):
        return COCO(str(path))


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("synthetic")
    summary = syn.make_synthetic_coco(out, num_train=20, num_val=5, seed=0, progress=False)
    return out, summary


@pytest.fixture(scope="module")
def multi_size(tmp_path_factory):
    out = tmp_path_factory.mktemp("synthetic_sizes")
    syn.make_synthetic_coco(out, num_train=20, num_val=2, image_size=SIZES, seed=3, progress=False)
    return out


def _splits(out):
    for split, (name, _code, first_img, _first_ann) in syn.SPLITS.items():
        yield split, out / name, _coco(out / "annotations" / f"instances_{name}.json"), first_img


def test_layout_and_coco_format(dataset):
    out, summary = dataset
    assert summary["train"]["images"] == 20 and summary["val"]["images"] == 5
    image_ids, ann_ids = set(), set()
    for split, img_dir, coco, _first in _splits(out):
        d = coco.dataset
        assert set(d) >= {"info", "licenses", "images", "annotations", "categories"}
        assert [(c["id"], c["name"]) for c in d["categories"]] == [(1, "circle"), (3, "square"), (7, "triangle")]
        assert all(c["supercategory"] for c in d["categories"])
        assert len(d["images"]) == summary[split]["images"]
        assert len(d["annotations"]) == summary[split]["annotations"]
        for img in d["images"]:
            assert set(img) >= {"id", "file_name", "width", "height"}
            assert img["id"] not in image_ids
            image_ids.add(img["id"])
            n = len(coco.getAnnIds(imgIds=img["id"]))
            assert 1 <= n <= 4
        for a in d["annotations"]:
            assert set(a) >= {"id", "image_id", "category_id", "bbox", "area", "iscrowd", "segmentation"}
            assert a["id"] not in ann_ids
            ann_ids.add(a["id"])
            assert a["iscrowd"] == 0 and a["category_id"] in (1, 3, 7) and a["area"] > 0
            assert isinstance(a["segmentation"], list) and a["segmentation"]
            assert all(len(p) >= 6 and len(p) % 2 == 0 for p in a["segmentation"])
    # all three categories occur
    coco = _coco(out / "annotations" / "instances_train2017.json")
    assert {a["category_id"] for a in coco.dataset["annotations"]} == {1, 3, 7}


def test_images_exist_with_declared_sizes(dataset):
    out, _ = dataset
    for _split, img_dir, coco, _first in _splits(out):
        for img in coco.dataset["images"]:
            with Image.open(img_dir / img["file_name"]) as im:
                assert im.format == "JPEG" and im.mode == "RGB"
                assert im.size == (img["width"], img["height"]) == (128, 128)
    assert not list(out.rglob("*.tmp*"))


def test_several_sizes(multi_size):
    coco = _coco(multi_size / "annotations" / "instances_train2017.json")
    seen = set()
    for img in coco.dataset["images"]:
        with Image.open(multi_size / "train2017" / img["file_name"]) as im:
            assert im.size == (img["width"], img["height"])
        seen.add(im.size)
    assert seen == set(SIZES)
    for a in coco.dataset["annotations"]:
        img = coco.imgs[a["image_id"]]
        x, y, w, h = a["bbox"]
        assert x >= 0 and y >= 0 and x + w <= img["width"] + 1e-6 and y + h <= img["height"] + 1e-6


def _mask_ious(out, sizes, seed):
    ious, occluded, objects = [], 0, 0
    for split, _img_dir, coco, first in _splits(out):
        for img in coco.dataset["images"]:
            sample = syn.generate_image(seed, split, img["id"] - first, sizes)
            assert (sample["width"], sample["height"]) == (img["width"], img["height"])
            anns = coco.loadAnns(coco.getAnnIds(imgIds=img["id"]))
            assert len(anns) == len(sample["objects"])
            for a, o in zip(anns, sample["objects"]):
                assert a["category_id"] == o["category_id"]
                m = coco.annToMask(a).astype(bool)
                v = o["visible_mask"]
                ious.append((m & v).sum() / max((m | v).sum(), 1))
                objects += 1
                occluded += int(v.sum() < 0.9 * o["full_mask"].sum())
    return np.array(ious), occluded, objects


def test_polygons_match_rendered_visible_masks(dataset, multi_size):
    ious, occluded, objects = _mask_ious(dataset[0], syn.DEFAULT_SIZE, 0)
    assert ious.mean() > 0.95 and ious.min() > 0.8, (ious.mean(), ious.min())
    assert occluded >= 1, "no shape is noticeably occluded"
    ious, _, _ = _mask_ious(multi_size, SIZES, 3)
    assert ious.mean() > 0.95 and ious.min() > 0.8


def test_bbox_and_area_consistent(dataset):
    out, _ = dataset
    for _split, _img_dir, coco, _first in _splits(out):
        for a in coco.dataset["annotations"]:
            parts = [np.asarray(p).reshape(-1, 2) for p in a["segmentation"]]
            pts = np.concatenate(parts)
            x0, y0 = pts.min(0)
            x1, y1 = pts.max(0)
            # the box is the written polygons' extent (coordinates of 2 decimals: their differences are exact
            # to float rounding)
            assert np.allclose(a["bbox"], [x0, y0, x1 - x0, y1 - y0], rtol=0, atol=1e-9)
            # the area is the parts' shoelace area, written with 2 decimals
            shoelace = sum(0.5 * abs(np.dot(p[:, 0], np.roll(p[:, 1], 1)) - np.dot(p[:, 1], np.roll(p[:, 0], 1)))
                           for p in parts)
            assert abs(a["area"] - shoelace) <= 0.005 + 1e-9
            # pycocotools rasterises the polygons to pixels whose box is the extent rounded out to whole pixels
            # (at most 1 px on each side) and whose count differs from the exact area by part of the border
            # pixels: at most half the perimeter (shapes are 16 px and larger)
            img = coco.imgs[a["image_id"]]
            rle = mask_utils.merge(mask_utils.frPyObjects(a["segmentation"], img["height"], img["width"]))
            assert np.abs(mask_utils.toBbox(rle) - np.asarray(a["bbox"])).max() <= 1.0
            perimeter = sum(np.linalg.norm(np.diff(p, axis=0, append=p[:1]), axis=1).sum() for p in parts)
            assert abs(float(mask_utils.area(rle)) - a["area"]) <= 0.5 * perimeter


def test_occlusion_happens(dataset):
    out, _ = dataset
    coco = _coco(out / "annotations" / "instances_train2017.json")
    overlapping = 0
    for img_id in coco.getImgIds():
        boxes = [a["bbox"] for a in coco.loadAnns(coco.getAnnIds(imgIds=img_id))]
        for i in range(len(boxes)):
            for j in range(i):
                (ax, ay, aw, ah), (bx, by, bw, bh) = boxes[i], boxes[j]
                if min(ax + aw, bx + bw) > max(ax, bx) and min(ay + ah, by + bh) > max(ay, by):
                    overlapping += 1
    assert overlapping >= 2


def test_ground_truth_scores_perfectly_in_cocoeval(dataset):
    """The files are valid input for COCOeval (as the trainer's evaluation uses them)."""
    from pycocotools.cocoeval import COCOeval

    out, _ = dataset
    gt = _coco(out / "annotations" / "instances_val2017.json")
    dets = [dict(image_id=a["image_id"], category_id=a["category_id"], bbox=a["bbox"], score=1.0,
                 segmentation=mask_utils.merge(mask_utils.frPyObjects(a["segmentation"], gt.imgs[a["image_id"]]
                                                                      ["height"], gt.imgs[a["image_id"]]["width"])))
            for a in gt.dataset["annotations"]]
    for d in dets:
        d["segmentation"]["counts"] = d["segmentation"]["counts"].decode()
    with contextlib.redirect_stdout(io.StringIO()):
        dt = gt.loadRes(dets)
        for iou_type in ("bbox", "segm"):
            ev = COCOeval(gt, dt, iou_type)
            ev.evaluate()
            ev.accumulate()
            ev.summarize()
            assert ev.stats[0] > 0.99, iou_type


def test_deterministic(dataset, tmp_path):
    out, _ = dataset
    a = _files(out)
    syn.make_synthetic_coco(tmp_path / "b", num_train=20, num_val=5, seed=0, progress=False)
    assert _files(tmp_path / "b") == a
    # image i does not depend on how many images were asked for
    syn.make_synthetic_coco(tmp_path / "c", num_train=6, num_val=1, seed=0, progress=False)
    c = _files(tmp_path / "c")
    assert {k: v for k, v in c.items() if k.endswith(".jpg")} == {k: a[k] for k in c if k.endswith(".jpg")}
    syn.make_synthetic_coco(tmp_path / "d", num_train=20, num_val=5, seed=1, progress=False)
    d = _files(tmp_path / "d")
    key = "annotations/instances_train2017.json"
    assert d[key] != a[key]
    assert sum(d[k] != a[k] for k in a if k.endswith(".jpg")) == 25


def test_rerun_is_idempotent_and_removes_stale_images(tmp_path):
    out = tmp_path / "ds"
    syn.make_synthetic_coco(out, num_train=5, num_val=2, seed=0, progress=False)
    first = _files(out)
    syn.make_synthetic_coco(out, num_train=5, num_val=2, seed=0, progress=False)
    assert _files(out) == first
    syn.make_synthetic_coco(out, num_train=3, num_val=2, seed=0, progress=False)
    assert len(list((out / "train2017").glob("*.jpg"))) == 3
    assert len(_coco(out / "annotations" / "instances_train2017.json").dataset["images"]) == 3


def test_interrupted_run_leaves_no_annotation_file(tmp_path):
    out = tmp_path / "ds"
    syn.make_synthetic_coco(out, num_train=4, num_val=2, seed=0, progress=False)

    def stop(split, done, total):
        if split == "train" and done == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        syn.make_synthetic_coco(out, num_train=4, num_val=2, seed=5, progress=stop)
    assert not (out / "annotations" / "instances_train2017.json").exists()
    assert not list(out.rglob("*.tmp*"))


def test_refuses_to_overwrite_foreign_dataset(tmp_path):
    out = tmp_path / "coco"
    (out / "annotations").mkdir(parents=True)
    real = out / "annotations" / "instances_train2017.json"
    real.write_text(json.dumps({"info": {"description": "COCO 2017 Dataset"}, "images": []}))
    (out / "train2017").mkdir()
    coco_image = out / "train2017" / "000000000139.jpg"  # COCO's own naming, as the generator's
    coco_image.write_bytes(b"a COCO image")
    with pytest.raises(ValueError, match="not made by this generator"):
        syn.make_synthetic_coco(out, num_train=2, num_val=1, progress=False)
    assert "COCO 2017" in real.read_text()
    syn.make_synthetic_coco(out, num_train=2, num_val=1, progress=False, force=True)
    assert len(_coco(real).dataset["images"]) == 2
    # --force overwrites what collides; the images it did not write stay (they were removed as "stale": the
    # generator's leftovers are only those of a folder it had written before)
    assert coco_image.read_bytes() == b"a COCO image"
    # a second run, with or without --force: the folder now has the generator's marker, which was all that
    # counted; the run took every COCO-named image it had not written for its own leftover and deleted it
    syn.make_synthetic_coco(out, num_train=1, num_val=1, progress=False)
    syn.make_synthetic_coco(out, num_train=1, num_val=1, progress=False, force=True)
    assert coco_image.read_bytes() == b"a COCO image"
    assert len(list((out / "train2017").glob("*.jpg"))) == 2  # its own earlier second image is gone


def test_real_coco_unpacked_over_a_synthetic_folder_is_not_overwritten(tmp_path):
    """The marker of an earlier synthetic run made a later one skip the check for a foreign dataset: COCO
    unpacked into the folder since (or DEMO_DATADIR pointed at it) had its annotation files replaced."""
    out = tmp_path / "coco"
    syn.make_synthetic_coco(out, num_train=2, num_val=1, progress=False)
    real = out / "annotations" / "instances_val2017.json"
    real.write_text(json.dumps({"info": {"description": "COCO 2017 Dataset"}, "images": []}))
    with pytest.raises(ValueError, match="not made by this generator.*instances_val2017.json"):
        syn.make_synthetic_coco(out, num_train=2, num_val=1, progress=False)
    assert "COCO 2017" in real.read_text()


def test_progress_only_on_a_terminal(tmp_path, monkeypatch):
    class FakeTTY(io.StringIO):
        def isatty(self):
            return True

    tty = FakeTTY()
    monkeypatch.setattr(sys, "stderr", tty)
    syn.make_synthetic_coco(tmp_path / "a", num_train=3, num_val=1, progress=None)
    assert "\r" in tty.getvalue() and "3/3" in tty.getvalue()
    pipe = io.StringIO()
    monkeypatch.setattr(sys, "stderr", pipe)
    syn.make_synthetic_coco(tmp_path / "b", num_train=3, num_val=1, progress=None)
    syn.make_synthetic_coco(tmp_path / "c", num_train=3, num_val=1, progress=True)
    assert pipe.getvalue() == ""
    calls = []
    syn.make_synthetic_coco(tmp_path / "d", num_train=3, num_val=1, progress=lambda *a: calls.append(a))
    assert calls[-1] == ("val", 1, 1) and ("train", 3, 3) in calls


def test_trace_contours_ring():
    yy, xx = np.mgrid[0:64, 0:64]
    r = np.hypot(xx - 31.5, yy - 31.5)
    ring = ((r < 25) & (r > 10)).astype(float)
    outer, holes = syn.loops(ring)
    assert len(outer) == 1 and len(holes) == 1
    assert abs(outer[0][1] - np.pi * 25 ** 2) < 0.05 * np.pi * 25 ** 2
    assert abs(holes[0][1] - np.pi * 10 ** 2) < 0.1 * np.pi * 10 ** 2
    assert syn.trace_contours(np.zeros((5, 5))) == []


def test_api_rejects_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="-1"):
        syn.make_synthetic_coco(tmp_path, num_train=-1)
    with pytest.raises(ValueError, match="num_val"):
        syn.make_synthetic_coco(tmp_path, num_val="3")
    with pytest.raises(ValueError, match="image size"):
        syn.make_synthetic_coco(tmp_path, image_size=(8, 8))
    with pytest.raises(ValueError, match="seed"):
        syn.make_synthetic_coco(tmp_path, seed=-2)


def _cli(*args, tool=False):
    cmd = [sys.executable, str(ROOT / "tools" / "make_synthetic_coco.py")] if tool else \
        [sys.executable, "-m", "maskrcnn_benchmark.cli.make_synthetic_coco"]
    return subprocess.run(cmd + [str(a) for a in args], cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_cli_writes_dataset_without_progress_into_a_pipe(tmp_path):
    r = _cli("--out", tmp_path / "m", "--train", 3, "--val", 2, "--sizes", "96x64,64x96", "--seed", 7)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    assert len(r.stdout.strip().splitlines()) == 1 and "3 train / 2 val" in r.stdout
    coco = _coco(tmp_path / "m" / "annotations" / "instances_val2017.json")
    assert len(coco.dataset["images"]) == 2
    assert {(i["width"], i["height"]) for i in coco.dataset["images"]} <= {(96, 64), (64, 96)}
    assert json.loads((tmp_path / "m" / "annotations" / "instances_train2017.json").read_text())["info"]["seed"] == 7

    r = _cli("--out", tmp_path / "t", "--train", 2, "--val", 1, "--min-size", 64, "--max-size", 96, "--quiet",
             tool=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "" and r.stderr == ""
    for img in _coco(tmp_path / "t" / "annotations" / "instances_train2017.json").dataset["images"]:
        assert 64 <= img["width"] <= 96 and 64 <= img["height"] <= 96


@pytest.mark.parametrize("args, needle", [
    (["--train", "-5"], "-5"),
    (["--val", "abc"], "abc"),
    (["--size", "12x12"], "12x12"),
    (["--size", "128by128"], "128by128"),
    (["--min-size", "128", "--max-size", "64"], "--min-size 128"),
    (["--min-size", "64"], "--max-size"),
    (["--seed", "-1"], "-1"),
])
def test_cli_bad_arguments_give_one_clean_error_line(tmp_path, capsys, args, needle):
    with pytest.raises(SystemExit) as e:
        make_synthetic_main(["--out", str(tmp_path / "x"), *args])
    assert e.value.code != 0
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "error" in lines[0] and needle in lines[0], err
    assert not (tmp_path / "x").exists()


def test_cli_unwritable_output_dir(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    for out in (blocker, blocker / "sub"):
        assert make_synthetic_main(["--out", str(out), "--train", "1", "--val", "1"]) == 1
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and "error" in lines[0] and str(blocker) in lines[0], lines


@pytest.mark.slow
def test_cli_errors_in_a_subprocess_have_no_traceback(tmp_path):
    r = _cli("--out", tmp_path / "x", "--train", "-5")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "-5" in r.stderr and "Traceback" not in r.stderr
    blocker = tmp_path / "file"
    blocker.write_text("")
    r = _cli("--out", blocker / "sub", "--train", 1, "--val", 1, tool=True)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and str(blocker) in r.stderr and "Traceback" not in r.stderr
