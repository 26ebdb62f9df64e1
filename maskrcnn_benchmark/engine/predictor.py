"""Run a trained model on one image and draw what it found (boxes, masks, labels) into a PNG (the library behind
``tools/predict.py``)."""
import numpy as np
import torch
from PIL import Image, ImageOps

from ..config import given_keys, merge_cfg_from_list
from ..data.catalog import NUM_CLASSES_KEY
from ..data.datasets import DatasetError, read_categories
from ..data.transforms import build_transforms
from ..evaluation import to_original
from ..modeling import build_detection_model
from ..structures.image_list import to_image_list
from ..utils.checkpoint import DetectronCheckpointer, load_torch_checkpoint
from ..utils.errors import WeightsError
from ..utils.fileio import atomic_write


def read_image(path):
    """The image at ``path`` as an 8-bit RGB image the way viewers show it, or one DatasetError line naming it:
    turned by its EXIF orientation (a phone's photo; COCO's training images are read without it, as the
    reference reads them), and a 16-bit greyscale one (PIL's I;16, or I) scaled from 0-65535 to 8 bits (PIL's
    convert clips it at 255: white); a float one (F) is taken as values in [0, 1]."""
    try:
        image = Image.open(path)
        image.load()
        image = ImageOps.exif_transpose(image)
        if image.mode in ("I", "I;16", "I;16B", "I;16L", "I;16N", "F"):
            values = np.asarray(image, dtype=np.float64)
            scale = 255.0 if image.mode == "F" else 255.0 / 65535.0
            image = Image.fromarray(np.clip(np.round(values * scale), 0, 255).astype(np.uint8), mode="L")
        return image.convert("RGB")
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as e:
        raise DatasetError(f"cannot read image '{path}': {e}") from None


def class_names(ann_file):
    """The category names of a COCO json in the file's order (what labels 1..K stand for: COCODataset's
    numbering), or None without a file. Only the category list is decoded (COCO train's file is 450 MB)."""
    if not ann_file:
        return None
    return [name for _, name in read_categories(ann_file)]


def with_num_classes(cfg, weights, class_names=None):
    """``cfg`` with ``MODEL.ROI_BOX_HEAD.NUM_CLASSES`` set where the config leaves it to the data (a training run
    resolves it from its annotation files, engine/resolve.py): the rows of the class scores in ``weights`` (a torch
    checkpoint), else the categories of ``class_names`` + 1; unchanged when the config sets it or neither tells."""
    if NUM_CLASSES_KEY in given_keys(cfg):
        return cfg
    n = None
    try:
        state = load_torch_checkpoint(weights) if weights else {}
    except WeightsError:
        state = {}  # not a torch file (a Detectron .pkl, a catalog:// name): the load below names what is wrong
    state = state.get("model", state) if isinstance(state, dict) else {}
    rows = [v.shape[0] for k, v in state.items() if k.endswith("cls_score.weight") and hasattr(v, "shape")]
    if rows:
        n = int(rows[0])
    elif class_names:
        n = len(class_names) + 1
    if n is None:
        return cfg
    out = cfg.clone()
    out.defrost()
    merge_cfg_from_list(out, [NUM_CLASSES_KEY, n])
    out.freeze()
    return out


class Predictor:
    """``class_names`` (:func:`class_names`) name labels 1..K and must be as many as the model's classes;
    ``score_threshold``: the detections kept, MODEL.ROI_HEADS.SCORE_THRESH lowered to it where above."""

    def __init__(self, cfg, weights="", class_names=None, score_threshold=0.5, names_from="the class names"):
        cfg = with_num_classes(cfg, weights or cfg.MODEL.WEIGHT, class_names)
        classes = cfg.MODEL.ROI_BOX_HEAD.NUM_CLASSES - 1
        if class_names is not None and len(class_names) != classes:
            raise DatasetError(f"{names_from} list {len(class_names)} categories but the model has {classes} "
                               "classes: give the annotation file it was trained with")
        if score_threshold < cfg.MODEL.ROI_HEADS.SCORE_THRESH:
            cfg = cfg.clone()
            cfg.defrost()
            cfg.MODEL.ROI_HEADS.SCORE_THRESH = score_threshold
            cfg.freeze()
        self.cfg = cfg
        self.device = torch.device(cfg.MODEL.DEVICE)
        self.model = build_detection_model(cfg).to(self.device).eval()
        DetectronCheckpointer(cfg, self.model).load_weights(weights or cfg.MODEL.WEIGHT, complete=True)
        self.transforms = build_transforms(cfg, is_train=False)
        self.class_names = class_names
        self.score_threshold = score_threshold

    @torch.no_grad()
    def predict(self, image):
        """BoxList in the image's own coordinates with ``scores``, ``labels`` and ``mask`` (H x W bool)."""
        image = image.convert("RGB")
        tensor, _ = self.transforms(image, None)
        images = to_image_list([tensor.to(self.device)], self.cfg.DATALOADER.SIZE_DIVISIBILITY)
        out = self.model(images)[0]
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
        try:
            with atomic_write(path, "wb", what="drawing") as f:
                fig.savefig(f, format="png", bbox_inches="tight", pad_inches=0)
        finally:
            plt.close(fig)
