"""The pixel half of the input transforms, on the training device, for a whole batch at once.

The hybrid input path (``DATALOADER.HYBRID``) splits the transforms: a loader worker decodes the JPEG to ``uint8``
and moves the targets (boxes, polygons) to the resized and flipped image; the device does the pixels of the whole
batch in one call of :class:`DeviceTransform`: resize, horizontal flip, BGR x 255 / mean / std normalization and
zero padding to ``SIZE_DIVISIBILITY``.

The resize is PIL's bilinear resampling, reimplemented: the same coefficients (a triangle filter whose support
grows with the downscaling factor, so downscaling is antialiased as PIL does), the same 22-bit fixed-point
arithmetic, the same two passes (horizontal, then vertical) with the same rounding to ``uint8`` after each. So a
pixel of the hybrid path is the pixel of the reference path (``DATALOADER.HYBRID False``: PIL in the worker),
bit for bit, wherever Pillow runs its passes in that order: every enlargement (COCO's images at 800x1333), and
most reductions; for some reductions of the height Pillow 12 and later run the vertical pass first, and a pixel
may differ by one level of 255 (``tests/data/test_hybrid_pipeline.py``; docs/numerics.md). Integer arithmetic in
``int32`` cannot overflow: the weights of an output pixel are non-negative and sum to about ``2**22``, so a sum
stays below ``255 * 2**22 + 2**21 < 2**31``.

Each pass is ``K`` gathers along one axis (``K`` = taps per output pixel: 3 when upsampling, more when
downsampling), with per-image tap tables, so images of different sizes share the calls; a flip is a reversed tap
table.
"""
import math

import numpy as np
import torch

PRECISION_BITS = 32 - 8 - 2  # PIL's fixed-point precision for 8-bit images


def pil_bilinear_taps(in_size, out_size):
    """PIL's bilinear resampling of one axis (``precompute_coeffs`` + ``normalize_coeffs_8bpc``): for every output
    pixel the first input pixel and the fixed-point weights of its taps. Returns ``(first (out,), weights (out,
    K) int64)`` as numpy arrays, computed in double as PIL does."""
    scale = float(in_size) / float(out_size)
    filterscale = max(scale, 1.0)
    support = 1.0 * filterscale
    ksize = int(math.ceil(support)) * 2 + 1
    first = np.zeros(out_size, np.int64)
    weights = np.zeros((out_size, ksize), np.int64)
    ss = 1.0 / filterscale
    for xx in range(out_size):
        center = (xx + 0.5) * scale
        xmin = max(int(center - support + 0.5), 0)
        xmax = min(int(center + support + 0.5), in_size) - xmin
        w = [max(0.0, 1.0 - abs((x + xmin - center + 0.5) * ss)) for x in range(xmax)]
        ww = sum(w)
        if ww != 0.0:
            w = [v / ww for v in w]
        first[xx] = xmin
        weights[xx, :xmax] = [int(0.5 + v * (1 << PRECISION_BITS)) for v in w]
    return first, weights


_TAPS = {}


def _taps(in_size, out_size):
    key = (int(in_size), int(out_size))
    if key not in _TAPS:
        if len(_TAPS) > 4096:
            _TAPS.clear()
        _TAPS[key] = pil_bilinear_taps(*key)
    return _TAPS[key]


def _axis_tables(in_sizes, out_sizes, flips, out_len):
    """Per-image tap tables of one axis, padded to ``out_len`` outputs and the largest tap count: ``(index (N,
    out_len, K), weight (N, out_len, K))``. A flipped image reads its taps in reverse output order."""
    tables = [_taps(i, o) for i, o in zip(in_sizes, out_sizes)]
    k = max(w.shape[1] for _, w in tables)
    index = np.zeros((len(tables), out_len, k), np.int64)
    weight = np.zeros((len(tables), out_len, k), np.int32)
    for n, ((first, w), o, flip) in enumerate(zip(tables, out_sizes, flips)):
        idx = first[:, None] + np.arange(w.shape[1])[None, :]
        idx = np.minimum(idx, int(in_sizes[n]) - 1)  # taps past the image have weight 0
        if flip:
            idx, w = idx[::-1], w[::-1]
        index[n, :o, : w.shape[1]] = idx
        weight[n, :o, : w.shape[1]] = w
    return index, weight


def _resample(images, index, weight, dim):
    """One pass of PIL's resampling along ``dim`` (-1: width, -2: height) of a uint8 batch ``(N, C, H, W)``,
    rounded to uint8 as PIL does after each pass."""
    n, c = images.shape[:2]
    src = images.to(torch.int32)
    acc = None
    for k in range(index.shape[-1]):
        if dim == -1:
            idx = index[:, None, None, :, k].expand(n, c, src.shape[2], index.shape[1])
            w = weight[:, None, None, :, k]
        else:
            idx = index[:, None, :, None, k].expand(n, c, index.shape[1], src.shape[3])
            w = weight[:, None, :, None, k]
        term = src.gather(dim, idx) * w
        acc = term if acc is None else acc + term
    acc += 1 << (PRECISION_BITS - 1)
    return (acc >> PRECISION_BITS).clamp_(0, 255).to(torch.uint8)


def resize_tables(in_sizes_hw, out_sizes_hw, flips=None):
    """The tap tables of :func:`pil_resize` for a batch, as CPU tensors ``(x_index, x_weight, y_index,
    y_weight)``: the collator makes them in the loader worker, and they travel with the batch's pixels."""
    n = len(in_sizes_hw)
    flips = [False] * n if flips is None else [bool(f) for f in flips]
    hi, wi = [int(s[0]) for s in in_sizes_hw], [int(s[1]) for s in in_sizes_hw]
    ho, wo = [int(s[0]) for s in out_sizes_hw], [int(s[1]) for s in out_sizes_hw]
    x_index, x_weight = _axis_tables(wi, wo, flips, max(wo))
    y_index, y_weight = _axis_tables(hi, ho, [False] * n, max(ho))
    return tuple(torch.from_numpy(t) for t in (x_index, x_weight, y_index, y_weight))


def pil_resize(images, in_sizes_hw, out_sizes_hw, flips=None, tables=None):
    """PIL's bilinear resize (and horizontal flip) of a padded uint8 batch ``(N, C, H, W)``: image ``n`` occupies
    ``images[n, :, :h_n, :w_n]`` and becomes ``out[n, :, :H_n, :W_n]``; the rest of ``out`` is undefined.
    Bit for bit ``Image.resize((W_n, H_n), Image.BILINEAR)`` (then ``transpose(FLIP_LEFT_RIGHT)``). ``tables``:
    :func:`resize_tables` of these sizes already on the images' device; without them they are made here and
    copied there."""
    if tables is None:
        tables = [t.to(images.device) for t in resize_tables(in_sizes_hw, out_sizes_hw, flips)]
    x_index, x_weight, y_index, y_weight = tables
    horizontal = _resample(images, x_index, x_weight, -1)   # PIL: horizontal pass first ...
    return _resample(horizontal, y_index, y_weight, -2)      # ... then vertical, uint8 in between


class DeviceTransform:
    """Resize, flip, normalize and pad a :class:`~maskrcnn_benchmark.structures.image_list.RawImageBatch` on its
    device in one call; returns an :class:`~maskrcnn_benchmark.structures.image_list.ImageList` whose tensors
    equal those of the reference path (PIL in the worker, then ``to_image_list``)."""

    def __init__(self, pixel_mean, pixel_std, to_bgr255=True, size_divisible=0, fixed_sizes=()):
        self.fixed_sizes = tuple(fixed_sizes or ())
        self.mean = torch.tensor(pixel_mean, dtype=torch.float32).view(1, -1, 1, 1)
        self.std = torch.tensor(pixel_std, dtype=torch.float32).view(1, -1, 1, 1)
        self._on_device = {}  # device -> (mean, std, 255): copied there once
        self.to_bgr255 = to_bgr255
        self.size_divisible = size_divisible

    def _mean_std(self, device):
        """The mean, std and 255 on ``device``, copied once. 255 as a device tensor: on CUDA a Python number is a CPU
        scalar, which the true-division kernel turns into a multiplication by its reciprocal (a bit apart from the
        reference's division on the CPU for about half the uint8 values)."""
        if device not in self._on_device:
            self._on_device[device] = (self.mean.to(device), self.std.to(device),
                                       torch.tensor(255.0, device=device))
        return self._on_device[device]

    @classmethod
    def from_config(cls, cfg, fixed_sizes=()):
        i = cfg.INPUT
        return cls(i.PIXEL_MEAN, i.PIXEL_STD, i.TO_BGR255, cfg.DATALOADER.SIZE_DIVISIBILITY, fixed_sizes)

    def __call__(self, batch):
        from ...structures.image_list import ImageList, padded_size

        raw = batch.tensors
        device = raw.device
        resized = pil_resize(raw, batch.input_sizes, batch.image_sizes, batch.flips, batch.tables)
        x = resized.to(torch.float32)
        mean, std, scale = self._mean_std(device)
        if self.to_bgr255:
            x = x.flip(1)  # RGB -> BGR; the 0-255 range is the uint8 values themselves
        else:
            x = x / scale
        x = (x - mean) / std
        h, w = padded_size(max(s[0] for s in batch.image_sizes), max(s[1] for s in batch.image_sizes),
                           self.size_divisible, self.fixed_sizes)
        rows = torch.arange(h, device=device, dtype=torch.float32)
        cols = torch.arange(w, device=device, dtype=torch.float32)
        sizes = batch.sizes.clone()  # (N, 2) float, come with the batch; a copy: the raw buffer can go
        inside = (rows[None, :, None] < sizes[:, 0, None, None]) & (cols[None, None, :] < sizes[:, 1, None, None])
        x = torch.nn.functional.pad(x, (0, w - x.shape[3], 0, h - x.shape[2]))
        return ImageList(torch.where(inside[:, None], x, 0.0), batch.image_sizes, sizes)
