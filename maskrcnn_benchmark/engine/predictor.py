"""Run a trained model on one image and draw what it found (boxes, masks, labels) into a PNG.

    python tools/predict.py --config-file CFG --weights model_final.pth --image IMG.jpg --out found.png
"""
import argparse
import sys

import numpy as np
import torch
from PIL import Image

from ..config import ConfigError, load_config
from ..data.transforms import build_transforms
from ..modeling import build_detection_model
from ..evaluation.postprocess import to_original
from ..structures.image_list import to_image_list
from ..utils.c2_model_loading import WeightsError
from ..utils.checkpoint import DetectronCheckpointer


class Predictor:
    def __init__(self, cfg, weights="", class_names=None, score_threshold=0.5):
        self.cfg = cfg
        self.device = torch.device(cfg.MODEL.DEVICE if cfg.MODEL.DEVICE != "cuda" or torch.cuda.is_available()
                                   else "cpu")
        self.model = build_detection_model(cfg).to(self.device).eval()
        DetectronCheckpointer(cfg, self.model).load_weights(weights or cfg.MODEL.WEIGHT)
        self.transforms = build_transforms(cfg, is_train=False)
        self.class_names = class_names
        self.score_threshold = score_threshold

    @torch.no_grad()
    def predict(self, image):
        """BoxList in the image's own coordinates with ``scores``, ``labels`` and ``mask`` (H x W bool)."""
        image = image.convert("RGB")
        tensor, _ = self.transforms(image, None)
        out = self.model(to_image_list([tensor], self.cfg.DATALOADER.SIZE_DIVISIBILITY).to(self.device))[0]
        out = out[out.get_field("scores") >= self.score_threshold]
        return to_original(out, image.size[0], image.size[1]).to("cpu")

    def label_name(self, label):
        if self.class_names and 0 < label <= len(self.class_names):
            return self.class_names[label - 1]
        return f"class {label}"

    def draw(self, image, predictions, path):
        """Save a PNG of the image with masks, boxes and ``name score`` labels."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        img = np.asarray(image.convert("RGB")).astype(np.float32) / 255
        colors = plt.get_cmap("tab10")
        if predictions.has_field("mask"):
            for k, m in enumerate(predictions.get_field("mask")[:, 0].numpy()):
                c = np.array(colors(k % 10)[:3])
                img[m] = 0.5 * img[m] + 0.5 * c
        fig, ax = plt.subplots(figsize=(img.shape[1] / 50, img.shape[0] / 50), dpi=100)
        ax.imshow(img)
        ax.axis("off")
        for k, (box, score, label) in enumerate(zip(predictions.bbox.tolist(),
                                                    predictions.get_field("scores").tolist(),
                                                    predictions.get_field("labels").tolist())):
            x1, y1, x2, y2 = box
            c = colors(k % 10)
            ax.add_patch(plt.Rectangle((x1, y1), x2 - x1 + 1, y2 - y1 + 1, fill=False, color=c, linewidth=1.5))
            ax.text(x1, y1, f"{self.label_name(label)} {score:.2f}", color="white", fontsize=7,
                    bbox={"facecolor": c, "alpha": 0.8, "pad": 1, "edgecolor": "none"})
        fig.savefig(path, bbox_inches="tight", pad_inches=0)
        plt.close(fig)


def _class_names(ann_file):
    if not ann_file:
        return None
    import json

    with open(ann_file) as f:
        cats = sorted(json.load(f)["categories"], key=lambda c: c["id"])
    return [c["name"] for c in cats]


def main(argv=None):
    p = argparse.ArgumentParser(description="Draw a model's detections on an image (PNG)")
    p.add_argument("--config-file", default="")
    p.add_argument("--weights", default="")
    p.add_argument("--image", required=True)
    p.add_argument("--out", required=True, help="output PNG")
    p.add_argument("--ann-file", default="", help="COCO json whose categories name the labels")
    p.add_argument("--score-threshold", type=float, default=0.5)
    p.add_argument("opts", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    try:
        cfg = load_config(args.config_file, args.opts)
        predictor = Predictor(cfg, args.weights, _class_names(args.ann_file), args.score_threshold)
        try:
            image = Image.open(args.image)
            image.load()
        except (OSError, SyntaxError) as e:
            raise FileNotFoundError(f"cannot read image '{args.image}': {e}") from None
        found = predictor.predict(image)
        predictor.draw(image, found, args.out)
    except (ConfigError, WeightsError, FileNotFoundError, KeyError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"{len(found)} detections drawn into {args.out}")
    return 0
