"""ImageList: a batch of images of different sizes padded into one tensor."""
import math

import torch


class ImageList:
    """``tensors`` is ``(N, C, H, W)``, zero padded at the bottom/right; ``image_sizes`` holds each ``(h, w)``."""

    def __init__(self, tensors, image_sizes):
        self.tensors = tensors
        self.image_sizes = [tuple(int(v) for v in s) for s in image_sizes]

    def to(self, device, non_blocking=False):
        return ImageList(self.tensors.to(device, non_blocking=non_blocking), self.image_sizes)

    def pin_memory(self):
        return ImageList(self.tensors.pin_memory(), self.image_sizes)

    def __len__(self):
        return len(self.image_sizes)


def to_image_list(tensors, size_divisible=0):
    """Batch a tensor, a list of ``(C, H, W)`` tensors or an ImageList, padding to a multiple of size_divisible."""
    if isinstance(tensors, ImageList):
        return tensors
    if isinstance(tensors, torch.Tensor) and tensors.dim() == 3:
        tensors = tensors[None]
    if isinstance(tensors, torch.Tensor) and size_divisible == 0:
        return ImageList(tensors, [t.shape[-2:] for t in tensors])
    if not isinstance(tensors, (list, tuple, torch.Tensor)):
        raise TypeError(f"to_image_list does not accept {type(tensors).__name__}")
    sizes = [tuple(t.shape[-2:]) for t in tensors]
    max_h = max(s[0] for s in sizes)
    max_w = max(s[1] for s in sizes)
    if size_divisible > 0:
        max_h = int(math.ceil(max_h / size_divisible) * size_divisible)
        max_w = int(math.ceil(max_w / size_divisible) * size_divisible)
    if isinstance(tensors, torch.Tensor) and tuple(tensors.shape[-2:]) == (max_h, max_w):
        return ImageList(tensors, sizes)
    first = tensors[0]
    batched = first.new_zeros((len(tensors), first.shape[0], max_h, max_w))
    for img, pad in zip(tensors, batched):
        pad[:, : img.shape[-2], : img.shape[-1]].copy_(img)
    return ImageList(batched, sizes)

