"""Training/test transforms. MLPerf allows resizing and horizontal flips only.

Two paths share these classes. The reference path (``DATALOADER.HYBRID False``) does everything in the loader
worker: PIL resize and flip, then one fused conversion to normalized float (:class:`ToNormalizedTensor`). The
hybrid path hands the transforms a :class:`~maskrcnn_benchmark.structures.image_list.RawImage` (decoded
``uint8``): they draw the same random choices, move the target, and leave the pixels to the device
(:mod:`.device`), which resizes, flips and normalizes a whole batch there, to the same values.
"""
import random
import warnings

import torch
from PIL import Image

from ...structures.bounding_box import FLIP_LEFT_RIGHT
from ...structures.image_list import RawImage


class Compose:
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, image, target, rng=None):
        """``rng``: the ``random.Random`` of this sample (the training sampler seeds one per sample), else the
        ``random`` module."""
        rng = rng or random
        for t in self.transforms:
            image, target = t(image, target, rng)
        return image, target


class Resize:
    """Shorter side to ``min_size`` (random choice when several), capped so the longer side is <= max_size."""

    def __init__(self, min_size, max_size):
        self.min_size = (min_size,) if isinstance(min_size, int) else tuple(min_size)
        self.max_size = max_size

    def get_size(self, image_size, rng=random):
        w, h = image_size
        size = rng.choice(self.min_size)
        if self.max_size is not None:
            lo, hi = float(min(w, h)), float(max(w, h))
            if hi / lo * size > self.max_size:
                size = int(round(self.max_size * lo / hi))
        if (w <= h and w == size) or (h <= w and h == size):
            return h, w
        if w < h:
            return int(size * h / w), size
        return size, int(size * w / h)

    def __call__(self, image, target, rng=random):
        h, w = self.get_size(image.size, rng)
        if isinstance(image, RawImage):
            image.image_size = (h, w)  # the device resizes
        elif (w, h) != image.size:
            image = image.resize((w, h), Image.BILINEAR)
        if target is not None:
            target = target.resize((w, h))
        return image, target


class RandomHorizontalFlip:
    def __init__(self, prob=0.5):
        self.prob = prob

    def __call__(self, image, target, rng=random):
        if self.prob > 0 and rng.random() < self.prob:
            if isinstance(image, RawImage):
                image.flip = True  # the device flips
            else:
                image = image.transpose(Image.FLIP_LEFT_RIGHT)
            if target is not None:
                target = target.transpose(FLIP_LEFT_RIGHT)
        return image, target


class ToNormalizedTensor:
    """The reference's ``ToTensor`` + ``Normalize`` in one pass: PIL RGB ``uint8`` (H, W, 3) -> float32 (3, H, W),
    Caffe2 convention when ``to_bgr255`` (BGR channel order, 0-255 range: the ``uint8`` values themselves), then
    ``(x - mean) / std``. Each output channel is written once, straight from the ``uint8`` pixels (no arithmetic
    on a permuted float copy). The hybrid path's device transform computes the same values."""

    def __init__(self, mean, std, to_bgr255=True):
        self.mean = [float(m) for m in mean]
        self.std = [float(s) for s in std]
        self.to_bgr255 = to_bgr255

    def __call__(self, image, target, rng=None):
        if isinstance(image, RawImage):
            return image, target
        w, h = image.size
        bands = image.convert("RGB").split() if image.mode != "RGB" else image.split()  # PIL: planar copies
        out = torch.empty((3, h, w), dtype=torch.float32)
        with warnings.catch_warnings():  # the bands' bytes are read-only; they are only read here
            warnings.simplefilter("ignore", UserWarning)
            for c in range(3):
                band = bands[2 - c] if self.to_bgr255 else bands[c]
                src = torch.frombuffer(band.tobytes(), dtype=torch.uint8).view(h, w)
                if self.to_bgr255:
                    torch.sub(src, self.mean[c], out=out[c])
                else:
                    torch.div(src, 255.0, out=out[c])
                    out[c].sub_(self.mean[c])
                if self.std[c] != 1.0:
                    out[c].div_(self.std[c])
        return out, target


def build_transforms(cfg, is_train=True):
    i = cfg.INPUT
    if is_train:
        min_size, max_size, flip = i.MIN_SIZE_TRAIN, i.MAX_SIZE_TRAIN, i.HORIZONTAL_FLIP_PROB_TRAIN
    else:
        min_size, max_size, flip = i.MIN_SIZE_TEST, i.MAX_SIZE_TEST, 0.0
    return Compose([Resize(min_size, max_size), RandomHorizontalFlip(flip),
                    ToNormalizedTensor(i.PIXEL_MEAN, i.PIXEL_STD, i.TO_BGR255)])
