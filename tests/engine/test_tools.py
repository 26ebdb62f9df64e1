import json
import pytest
import os
import subprocess
import sys

import torch
from PIL import Image

from train_runs import CPU_YAML
from helpers import REPO
from maskrcnn_benchmark.config import get_cfg, merge_cfg_from_file, merge_cfg_from_list
from maskrcnn_benchmark.engine.predictor import Predictor
from maskrcnn_benchmark.modeling import build_detection_model
from maskrcnn_benchmark.utils.checkpoint import DetectronCheckpointer

OPTS = ["DATALOADER.NUM_WORKERS", "0", "INPUT.MIN_SIZE_TEST", "96", "INPUT.MAX_SIZE_TEST", "96",
        "MODEL.ROI_HEADS.SCORE_THRESH", "0.0"]


def _weights(tmp_path):
    torch.manual_seed(0)
    cfg = get_cfg()
    merge_cfg_from_file(cfg, CPU_YAML)
    model = build_detection_model(cfg)
    return DetectronCheckpointer(cfg, model, save_dir=str(tmp_path), save_to_disk=True).save("random_init")


@pytest.mark.slow
def test_test_net_writes_results_and_scores(tiny_data, tmp_path):
    weights = _weights(tmp_path)
    base = [sys.executable, os.path.join(REPO, "tools", "test_net.py"), "--config-file", CPU_YAML,
            "--ckpt", weights]
    common = ["DATASETS.DATA_DIR", tiny_data, "OUTPUT_DIR", str(tmp_path)] + OPTS
    r = subprocess.run(base + ["--skip-eval"] + common, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    folder = tmp_path / "inference" / "coco_2017_val"
    bbox = json.loads((folder / "bbox.json").read_text())
    segm = json.loads((folder / "segm.json").read_text())
    assert bbox and {"image_id", "category_id", "bbox", "score"} <= set(bbox[0])
    # the results are COCO's, for this dataset: its image ids and category ids, each image's own size in the RLE,
    # at most DETECTIONS_PER_IMG per image, one mask per box
    gt = json.loads(open(os.path.join(tiny_data, "annotations", "instances_val2017.json")).read())
    sizes = {im["id"]: (im["height"], im["width"]) for im in gt["images"]}
    categories = {c["id"] for c in gt["categories"]}
    assert {d["image_id"] for d in bbox} <= set(sizes) and {d["category_id"] for d in bbox} <= categories
    per_image = {}
    for d in bbox:
        per_image[d["image_id"]] = per_image.get(d["image_id"], 0) + 1
        x, y, w, h = d["bbox"]
        height, width = sizes[d["image_id"]]
        # boxes clipped to the image as the reference clips them (x2 <= width - 1, "+1" widths): x + w <= width
        assert w > 0 and h > 0 and x >= 0 and y >= 0 and x + w <= width + 1e-3 and y + h <= height + 1e-3, d
    assert max(per_image.values()) <= 100
    assert len(segm) == len(bbox)
    assert all(tuple(d["segmentation"]["size"]) == sizes[d["image_id"]] for d in segm)
    assert not (folder / "coco_eval.md").exists()
    r = subprocess.run(base + common, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "box AP" in r.stdout and "| circle |" in r.stdout and (folder / "coco_eval.md").exists()
    # without --ckpt, as the reference: OUTPUT_DIR's last checkpoint (MODEL.WEIGHT, empty here, was loaded); and
    # results written without scores leave no earlier evaluation's summary beside them
    r = subprocess.run(base[:-2] + ["--skip-eval"] + common, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"evaluating the weights {weights}" in r.stdout + r.stderr
    assert not (folder / "coco_eval.md").exists()
    r = subprocess.run(base[:-1] + [str(tmp_path / "missing.pth")] + common, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 1 and "missing.pth" in r.stderr and "Traceback" not in r.stderr



@pytest.mark.slow  # builds the model (a few seconds)
def test_predict_takes_the_number_of_classes_from_the_weights_when_the_config_leaves_it_unset(tiny_data, tmp_path):
    """A config without MODEL.ROI_BOX_HEAD.NUM_CLASSES trains and evaluates with the data's classes (resolve);
    predict built the default 81 and refused the 4-class checkpoint ("does not fit this model")."""
    from maskrcnn_benchmark.cli import predict

    weights = _weights(tmp_path)
    no_classes = tmp_path / "no_num_classes.yaml"
    no_classes.write_text("\n".join(ln for ln in open(CPU_YAML).read().splitlines() if "NUM_CLASSES" not in ln))
    image = os.path.join(tiny_data, "val2017", sorted(os.listdir(os.path.join(tiny_data, "val2017")))[0])
    out = tmp_path / "found.png"
    code = predict.main(["--config-file", str(no_classes), "--weights", weights, "--image", image, "--out", str(out),
                         *OPTS])
    assert code == 0 and out.exists()


def test_predict_names_an_annotation_file_whose_categories_it_cannot_read(tmp_path, capsys):
    from maskrcnn_benchmark.cli import predict

    bad = tmp_path / "cats.json"
    for categories in ([{}], {"id": 1, "name": "a"}, [1, 2]):
        bad.write_text(json.dumps({"categories": categories}))
        code = predict.main(["--config-file", CPU_YAML, "--image", "x.png", "--out", str(tmp_path / "o.png"),
                             "--ann-file", str(bad)])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 1 and len(err) == 1 and "cats.json" in err[0], (categories, code, err)


def test_predict_says_what_it_lacks_before_building_the_model(tmp_path, capsys, monkeypatch):
    """Found after the work was done, as an internal error (exit 5): matplotlib (an extra, not in the image's
    requirements) when drawing; and a cuda config on a node whose torch sees no GPU ran the model on the CPU
    without a word, where the other programs stop with exit 15 (NoGPU)."""
    from maskrcnn_benchmark.cli import predict

    args = ["--config-file", CPU_YAML, "--image", "x.png", "--out", str(tmp_path / "o.png")]
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib: ImportError
    code = predict.main(args)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1 and "matplotlib" in err[0], (code, err)
    monkeypatch.delitem(sys.modules, "matplotlib")
    if not torch.cuda.is_available():
        code = predict.main(args + ["MODEL.DEVICE", "cuda"])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 15 and len(err) == 1 and "MODEL.DEVICE is cuda" in err[0], (code, err)


@pytest.mark.slow  # builds the model (a few seconds)
def test_predict_refuses_category_names_that_do_not_fit_the_models_classes(tmp_path, capsys):
    """The names of --ann-file were drawn on the labels whatever the checkpoint: a 3-class model's labels named
    after COCO's person, bicycle, car."""
    from maskrcnn_benchmark.cli import predict

    weights = _weights(tmp_path)  # 4 classes: 3 categories and the background
    capsys.readouterr()  # what the save logged (through an earlier in-process program's handler, maybe closed)
    cats = tmp_path / "instances_val2017.json"
    cats.write_text(json.dumps({"categories": [{"id": i, "name": f"c{i}"} for i in range(1, 6)]}))
    code = predict.main(["--config-file", CPU_YAML, "--weights", weights, "--image", "x.png", "--out",
                         str(tmp_path / "o.png"), "--ann-file", str(cats)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1, (code, err)
    assert "instances_val2017.json" in err[0] and "5 categories" in err[0] and "3 classes" in err[0], err


@pytest.mark.slow
def test_predictor_draws_png_with_masks_of_image_size(tiny_data, tmp_path):
    weights = _weights(tmp_path)
    cfg = get_cfg()
    merge_cfg_from_file(cfg, CPU_YAML)
    merge_cfg_from_list(cfg, OPTS)
    image = Image.open(os.path.join(tiny_data, "val2017", sorted(os.listdir(os.path.join(tiny_data, "val2017")))[0]))
    pred = Predictor(cfg, weights, class_names=["circle", "square", "triangle"], score_threshold=0.0)
    found = pred.predict(image)
    assert len(found) > 0 and found.get_field("mask").shape == (len(found), 1, image.size[1], image.size[0])
    # masks pasted by the mask head (POSTPROCESS_MASKS, at the size the model saw: 128 here, the image is 96)
    # come back at the image's size too: draw() indexed the image with them and raised an IndexError
    pasted = cfg.clone()
    merge_cfg_from_list(pasted, ["MODEL.ROI_MASK_HEAD.POSTPROCESS_MASKS", "True", "INPUT.MIN_SIZE_TEST", "128",
                                 "INPUT.MAX_SIZE_TEST", "128"])
    pasted_pred = Predictor(pasted, weights, score_threshold=0.0)
    found_pasted = pasted_pred.predict(image)
    assert len(found_pasted) > 0
    assert found_pasted.get_field("mask").shape == (len(found_pasted), 1, image.size[1], image.size[0])
    pasted_pred.draw(image, found_pasted, str(tmp_path / "pasted.png"))
    # a threshold under the model's MODEL.ROI_HEADS.SCORE_THRESH lowers it: --score-threshold 0.01 was 0.5 here
    strict = cfg.clone()
    merge_cfg_from_list(strict, ["MODEL.ROI_HEADS.SCORE_THRESH", "0.5"])
    assert (Predictor(strict, weights, score_threshold=0.0).predict(image).get_field("scores") < 0.5).any()
    out = tmp_path / "found.png"
    pred.draw(image, found, str(out))
    drawn = Image.open(out)
    # the image drawn at least at its own size (figure 2x the image at 100 dpi, tight: the axes and the labels)
    assert drawn.format == "PNG" and drawn.size[0] >= image.size[0] and drawn.size[1] >= image.size[1]
    r = subprocess.run([sys.executable, os.path.join(REPO, "tools", "predict.py"), "--config-file", CPU_YAML,
                        "--weights", weights, "--image", str(tmp_path / "nope.jpg"), "--out", str(out)] + OPTS,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "nope.jpg" in r.stderr


def test_predict_reads_16_bit_and_rotated_images_as_viewers_show_them(tmp_path):
    """PIL's convert("RGB") clips a 16-bit greyscale image (mode I;16 or I) at 255: the model saw, and the drawing
    showed, a white image. A phone's JPEG with EXIF Orientation 6 was predicted on its sideways pixels, and the
    drawing came out turned against the image every viewer shows."""
    import numpy as np
    from PIL import Image

    from maskrcnn_benchmark.engine.predictor import read_image

    ramp = np.tile(np.linspace(0, 65535, 96).astype(np.uint16), (64, 1))
    Image.fromarray(ramp).save(tmp_path / "g16.png")
    rgb = read_image(str(tmp_path / "g16.png"))
    assert rgb.mode == "RGB" and rgb.size == (96, 64)
    grey = np.asarray(rgb)[0, :, 0].astype(int)
    np.testing.assert_array_equal(grey, np.round(ramp[0] / 257).astype(int))  # 16 bits to 8, the full range kept
    from PIL import ImageOps

    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to view
    photo = np.zeros((64, 96, 3), np.uint8)
    photo[:16, :24] = (250, 0, 0)  # a marked corner: a wrong turn or a transpose moves it
    Image.fromarray(photo).save(tmp_path / "phone.png", exif=exif)
    viewed = read_image(str(tmp_path / "phone.png"))
    with Image.open(tmp_path / "phone.png") as raw:  # Pillow's own reading of the tag is the oracle
        np.testing.assert_array_equal(np.asarray(viewed), np.asarray(ImageOps.exif_transpose(raw).convert("RGB")))
    assert viewed.size == (64, 96) and np.asarray(viewed)[:24, -16:, 0].min() == 250  # top right after the turn
