"""``tools/predict.py``: draw a model's detections on one image.

    python tools/predict.py --config-file CFG --weights model_final.pth --image IMG.jpg --out found.png
"""
import argparse

from ..config import load_config
from ..engine.preflight import check_gpus
from ..utils.errors import UserError
from ..utils.logger import setup_logger
from .common import parse_with_overrides, parser
from .exit_codes import SUCCESS, run_program


def _probability(text):
    try:
        v = float(text)
    except ValueError:
        v = None
    if v is None or not 0.0 <= v <= 1.0:  # nan too
        raise argparse.ArgumentTypeError(f"invalid score '{text}' (need a number from 0 to 1)")
    return v


def build_parser():
    p = parser("Draw a model's detections on an image (PNG)", local_rank=False)
    p.add_argument("--weights", default="", help="a trained checkpoint (OUTPUT_DIR/model_final.pth)")
    p.add_argument("--image", required=True)
    p.add_argument("--out", required=True, help="output PNG")
    p.add_argument("--ann-file", default="", help="COCO json whose categories name the labels")
    p.add_argument("--score-threshold", type=_probability, default=0.5, help="draw detections scored at least this")
    return p


def predict(args, opts):
    cfg = load_config(args.config_file, opts)  # a config error is one line before torch is loaded
    try:
        import matplotlib  # noqa: F401 (the drawing's, an extra: said now, not after the model ran)
    except ImportError:
        raise UserError("predict draws with matplotlib, which this Python lacks: pip install matplotlib") from None
    check_gpus(cfg, 1)
    from ..engine.predictor import Predictor, class_names, read_image

    setup_logger(None)
    predictor = Predictor(cfg, args.weights, class_names(args.ann_file), args.score_threshold,
                          names_from=f"the categories of '{args.ann_file}'")
    image = read_image(args.image)
    found = predictor.predict(image)
    predictor.draw(image, found, args.out)
    print(f"{len(found)} detections drawn into {args.out}")
    return SUCCESS.code


def main(argv=None):
    args, opts = parse_with_overrides(build_parser(), argv)
    return run_program(lambda: predict(args, opts))
