"""ImageList: a batch of images of different sizes padded into one tensor."""
import math

import torch

from .packing import map_storages, packed_empty


class ImageList:
    """``tensors`` is ``(N, C, H, W)``, zero padded at the bottom/right; ``image_sizes`` holds each ``(h, w)``.

    ``sizes`` is the same as an ``(N, 2)`` float tensor on the images' device: what the training step reads, so
    that a compiled step sees a tensor input, not Python numbers it would have to specialize on."""

    def __init__(self, tensors, image_sizes, sizes=None):
        self.tensors = tensors
        self.image_sizes = [tuple(int(v) for v in s) for s in image_sizes]
        if sizes is None:
            sizes = torch.tensor(self.image_sizes, dtype=torch.float32).reshape(-1, 2)
            sizes = sizes.to(tensors.device) if isinstance(tensors, torch.Tensor) else sizes
        self.sizes = sizes

    def to(self, device, non_blocking=False):
        return ImageList(self.tensors.to(device, non_blocking=non_blocking), self.image_sizes,
                         self.sizes.to(device, non_blocking=non_blocking))

    def pin_memory(self):
        return ImageList(self.tensors.pin_memory(), self.image_sizes, self.sizes.pin_memory())

    def __len__(self):
        return len(self.image_sizes)


def padded_size(height, width, size_divisible=0, fixed_sizes=()):
    """The ``(H, W)`` a batch whose largest image is ``height x width`` is padded to: the first of
    ``fixed_sizes`` it fits in (a compiled step's few shapes), else the next multiple of ``size_divisible``."""
    for h, w in fixed_sizes or ():
        if height <= h and width <= w:
            return int(h), int(w)
    if size_divisible > 0:
        height = int(math.ceil(height / size_divisible) * size_divisible)
        width = int(math.ceil(width / size_divisible) * size_divisible)
    return int(height), int(width)


def to_image_list(tensors, size_divisible=0, fixed_sizes=()):
    """Batch a tensor, a list of ``(C, H, W)`` tensors or an ImageList, padding to a multiple of size_divisible
    (or to the first of ``fixed_sizes`` the batch fits in, :func:`padded_size`)."""
    if isinstance(tensors, ImageList):
        return tensors
    if isinstance(tensors, torch.Tensor) and tensors.dim() == 3:
        tensors = tensors[None]
    if isinstance(tensors, torch.Tensor) and size_divisible == 0 and not fixed_sizes:
        return ImageList(tensors, [t.shape[-2:] for t in tensors])
    if not isinstance(tensors, (list, tuple, torch.Tensor)):
        raise TypeError(f"to_image_list does not accept {type(tensors).__name__}")
    sizes = [tuple(t.shape[-2:]) for t in tensors]
    max_h, max_w = padded_size(max(s[0] for s in sizes), max(s[1] for s in sizes), size_divisible, fixed_sizes)
    if isinstance(tensors, torch.Tensor) and tuple(tensors.shape[-2:]) == (max_h, max_w):
        return ImageList(tensors, sizes)
    first = tensors[0]
    batched = first.new_empty((len(tensors), first.shape[0], max_h, max_w))
    _pad_into(tensors, batched)
    return ImageList(batched, sizes)


def _pad_into(images, batched):
    """Each ``(C, h, w)`` image into its ``(C, H, W)`` row of ``batched``, zero padded at the bottom and right: only
    the padding is zeroed, the image is written once."""
    for img, pad in zip(images, batched):
        h, w = img.shape[-2:]
        pad[:, :h, :w].copy_(img)
        pad[:, h:].zero_()
        pad[:, :h, w:].zero_()



class RawImage:
    """A decoded image as it leaves a loader worker on the hybrid input path: ``uint8`` ``(3, h, w)`` RGB pixels,
    the size ``(H, W)`` it is to be resized to and whether it is to be flipped (the target already is)."""

    __slots__ = ("tensor", "image_size", "flip")

    def __init__(self, tensor, image_size=None, flip=False):
        self.tensor = tensor
        self.image_size = tuple(image_size) if image_size is not None else tuple(tensor.shape[-2:])
        self.flip = bool(flip)

    @property
    def size(self):
        """``(width, height)`` of the decoded pixels, like ``PIL.Image.size``."""
        return int(self.tensor.shape[-1]), int(self.tensor.shape[-2])


class RawImageBatch:
    """The raw images of a batch, as the hybrid path moves them to the device, built in the loader worker, all in
    one buffer (one shared-memory handover from the worker, one pinned copy, one asynchronous copy to the device):

    * ``tensors``: the ``uint8`` ``(N, 3, H, W)`` RGB pixels, zero padded;
    * ``input_sizes``: each image's ``(h, w)``; ``image_sizes``: its ``(h, w)`` after the resize; ``flips``: whether
      it is flipped;
    * ``sizes``: ``image_sizes`` as the ``(N, 2)`` float tensor that the :class:`ImageList` carries;
    * ``tables``: the resize's tap tables (:func:`~maskrcnn_benchmark.data.transforms.device.resize_tables`), made
      by the collator, or ``None``.

    With ``sizes`` and ``tables`` in the batch, the device transform reads nothing that a copy from host memory of
    its own would have to bring (each would wait for the loader's stream: tests/data/test_hybrid_pipeline.py
    counts them). :class:`~maskrcnn_benchmark.data.transforms.device.DeviceTransform` turns it into the normalized
    :class:`ImageList`."""

    def __init__(self, images, image_sizes, flips, tables=None):
        """``images``: a list of ``uint8`` ``(3, h, w)`` tensors, padded here into ``tensors``."""
        input_sizes = [tuple(int(v) for v in t.shape[-2:]) for t in images]
        n, c = len(images), images[0].shape[0]
        h, w = max(s[0] for s in input_sizes), max(s[1] for s in input_sizes)
        tables = [] if tables is None else list(tables)
        padded, sizes, *packed_tables = packed_empty(
            [((n, c, h, w), images[0].dtype), ((n, 2), torch.float32)] + [(t.shape, t.dtype) for t in tables])
        _pad_into(images, padded)
        image_sizes = [tuple(int(v) for v in s) for s in image_sizes]
        sizes.copy_(torch.tensor(image_sizes, dtype=torch.float32).reshape(-1, 2))
        for src, dst in zip(tables, packed_tables):
            dst.copy_(src)
        self._set(padded, input_sizes, image_sizes, [bool(f) for f in flips], sizes, packed_tables or None)

    def _set(self, tensors, input_sizes, image_sizes, flips, sizes, tables):
        self.tensors = tensors
        self.input_sizes = input_sizes
        self.image_sizes = image_sizes
        self.flips = flips
        self.sizes = sizes
        self.tables = tuple(tables) if tables is not None else None
        return self

    @classmethod
    def from_raw(cls, images, tables=None):
        return cls([r.tensor for r in images], [r.image_size for r in images], [r.flip for r in images], tables)

    def _map(self, fn):
        tensors, sizes, *tables = map_storages([self.tensors, self.sizes, *(self.tables or ())], fn)
        return RawImageBatch.__new__(RawImageBatch)._set(tensors, self.input_sizes, self.image_sizes, self.flips,
                                                         sizes, tables if self.tables is not None else None)

    def to(self, device, non_blocking=False):
        return self._map(lambda t: t.to(device, non_blocking=non_blocking))

    def pin_memory(self):
        return self._map(lambda t: t.pin_memory())

    def __len__(self):
        return len(self.image_sizes)
