"""``tools/predict.py``: draw a model's detections on one image.

    python tools/predict.py --config-file CFG --weights model_final.pth --image IMG.jpg --out found.png
"""
import json

from PIL import Image

from ..config import load_config
from ..data.datasets import DatasetError
from ..engine.predictor import Predictor
from ..utils.logger import setup_logger
from .common import parse_with_overrides, parser
from .exit_codes import SUCCESS, run_program


def build_parser():
    p = parser("Draw a model's detections on an image (PNG)", local_rank=False)
    p.add_argument("--weights", default="")
    p.add_argument("--image", required=True)
    p.add_argument("--out", required=True, help="output PNG")
    p.add_argument("--ann-file", default="", help="COCO json whose categories name the labels")
    p.add_argument("--score-threshold", type=float, default=0.5)
    return p


def class_names(ann_file):
    if not ann_file:
        return None
    try:
        with open(ann_file) as f:
            cats = sorted(json.load(f)["categories"], key=lambda c: c["id"])
    except (OSError, ValueError, KeyError) as e:
        raise DatasetError(f"cannot read the categories of '{ann_file}': {e}") from None
    return [c["name"] for c in cats]


def predict(args, opts):
    cfg = load_config(args.config_file, opts)
    setup_logger(None)
    predictor = Predictor(cfg, args.weights, class_names(args.ann_file), args.score_threshold)
    try:
        image = Image.open(args.image)
        image.load()
    except (OSError, SyntaxError) as e:
        raise DatasetError(f"cannot read image '{args.image}': {e}") from None
    found = predictor.predict(image)
    predictor.draw(image, found, args.out)
    print(f"{len(found)} detections drawn into {args.out}")
    return SUCCESS.code


def main(argv=None):
    args, opts = parse_with_overrides(build_parser(), argv)
    return run_program(lambda: predict(args, opts))
