"""Training/test transforms. MLPerf allows resizing and horizontal flips only."""
import random

import torch
from PIL import Image

from ...structures.bounding_box import FLIP_LEFT_RIGHT


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
        if (w, h) != image.size:
            image = image.resize((w, h), Image.BILINEAR)
        if target is not None:
            target = target.resize(image.size)
        return image, target


class RandomHorizontalFlip:
    def __init__(self, prob=0.5):
        self.prob = prob

    def __call__(self, image, target, rng=random):
        if self.prob > 0 and rng.random() < self.prob:
            image = image.transpose(Image.FLIP_LEFT_RIGHT)
            if target is not None:
                target = target.transpose(FLIP_LEFT_RIGHT)
        return image, target


class ToTensor:
    def __call__(self, image, target, rng=None):
        t = torch.frombuffer(bytearray(image.tobytes()), dtype=torch.uint8)
        return t.view(image.size[1], image.size[0], 3).permute(2, 0, 1).float().div_(255), target


class Normalize:
    """Caffe2 convention when ``to_bgr255``: BGR channel order, 0-255 range, then ``(x - mean) / std``."""

    def __init__(self, mean, std, to_bgr255=True):
        self.mean = torch.tensor(mean).view(-1, 1, 1)
        self.std = torch.tensor(std).view(-1, 1, 1)
        self.to_bgr255 = to_bgr255

    def __call__(self, image, target, rng=None):
        if self.to_bgr255:
            image = image[[2, 1, 0]] * 255
        return (image - self.mean) / self.std, target


def build_transforms(cfg, is_train=True):
    i = cfg.INPUT
    if is_train:
        min_size, max_size, flip = i.MIN_SIZE_TRAIN, i.MAX_SIZE_TRAIN, i.HORIZONTAL_FLIP_PROB_TRAIN
    else:
        min_size, max_size, flip = i.MIN_SIZE_TEST, i.MAX_SIZE_TEST, 0.0
    return Compose([Resize(min_size, max_size), RandomHorizontalFlip(flip), ToTensor(),
                    Normalize(i.PIXEL_MEAN, i.PIXEL_STD, i.TO_BGR255)])
