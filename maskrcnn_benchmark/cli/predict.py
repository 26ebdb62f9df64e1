"""``tools/predict.py``: draw a model's detections on one image.

    python tools/predict.py --config-file CFG --weights model_final.pth --image IMG.jpg --out found.png
"""
from ..config import load_config
from ..engine.predictor import Predictor, class_names, read_image
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


def predict(args, opts):
    cfg = load_config(args.config_file, opts)
    setup_logger(None)
    predictor = Predictor(cfg, args.weights, class_names(args.ann_file), args.score_threshold)
    image = read_image(args.image)
    found = predictor.predict(image)
    predictor.draw(image, found, args.out)
    print(f"{len(found)} detections drawn into {args.out}")
    return SUCCESS.code


def main(argv=None):
    args, opts = parse_with_overrides(build_parser(), argv)
    return run_program(lambda: predict(args, opts))
