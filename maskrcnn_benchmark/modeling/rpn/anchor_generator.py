"""Anchors as in Detectron/maskrcnn-benchmark (``generate_anchors``), with the "+1" convention and numpy's
round-half-to-even, so every anchor matches the reference to the pixel."""
import numpy as np
import torch
from torch import nn


def _whctrs(anchor):
    w = anchor[2] - anchor[0] + 1
    h = anchor[3] - anchor[1] + 1
    return w, h, anchor[0] + 0.5 * (w - 1), anchor[1] + 0.5 * (h - 1)


def _mkanchors(ws, hs, x_ctr, y_ctr):
    ws, hs = ws[:, None], hs[:, None]
    return np.hstack((x_ctr - 0.5 * (ws - 1), y_ctr - 0.5 * (hs - 1), x_ctr + 0.5 * (ws - 1), y_ctr + 0.5 * (hs - 1)))


def generate_anchors(stride, sizes, aspect_ratios):
    """Cell anchors ``(len(ratios) * len(sizes), 4)`` centred on the first ``stride x stride`` cell."""
    anchor = np.array([0, 0, stride - 1, stride - 1], dtype=np.float64)
    w, h, x_ctr, y_ctr = _whctrs(anchor)
    ratios = np.asarray(aspect_ratios, dtype=np.float64)
    ws = np.round(np.sqrt(w * h / ratios))
    hs = np.round(ws * ratios)
    ratio_anchors = _mkanchors(ws, hs, x_ctr, y_ctr)
    scales = np.asarray(sizes, dtype=np.float64) / stride
    out = []
    for a in ratio_anchors:
        w, h, x_ctr, y_ctr = _whctrs(a)
        out.append(_mkanchors(w * scales, h * scales, x_ctr, y_ctr))
    return torch.from_numpy(np.vstack(out)).float()


class BufferList(nn.Module):
    """A list of buffers named ``0, 1, ...`` (the reference's ``rpn.anchor_generator.cell_anchors.<i>``)."""

    def __init__(self, buffers):
        super().__init__()
        for i, b in enumerate(buffers):
            self.register_buffer(str(i), b)

    def __len__(self):
        return len(self._buffers)

    def __iter__(self):
        return iter(self._buffers.values())


class AnchorGenerator(nn.Module):
    """Per FPN level: one anchor size, all aspect ratios, on the level's stride grid.

    Anchors depend only on the feature-map shapes, so they are cached per (shapes, device).
    """

    def __init__(self, sizes=(32, 64, 128, 256, 512), aspect_ratios=(0.5, 1.0, 2.0),
                 anchor_strides=(4, 8, 16, 32, 64), straddle_thresh=0):
        super().__init__()
        if len(anchor_strides) == 1:
            cell = [generate_anchors(anchor_strides[0], sizes, aspect_ratios)]
        else:
            if len(anchor_strides) != len(sizes):
                raise ValueError("MODEL.RPN.ANCHOR_STRIDE and ANCHOR_SIZES must have the same length with FPN")
            cell = [generate_anchors(s, (size,), aspect_ratios) for s, size in zip(anchor_strides, sizes)]
        self.strides = tuple(anchor_strides)
        self.cell_anchors = BufferList(cell)  # buffers, as the reference: state dicts match key for key
        self.straddle_thresh = straddle_thresh
        self._cache = {}
        self._pinned = {}  # precomputed for a compiled step's fixed sizes: never evicted

    def _load_from_state_dict(self, *args, **kwargs):
        self._cache.clear()  # loaded cell anchors replace the ones the grids were built from
        self._pinned.clear()
        super()._load_from_state_dict(*args, **kwargs)

    def num_anchors_per_location(self):
        return [len(c) for c in self.cell_anchors]

    def precompute(self, grid_sizes, device):
        """Compute the anchors of ``grid_sizes`` now and keep them for good. A compiled step's fixed sizes are
        precomputed before it is traced: it then reads them as constants, and the cache of the other sizes
        (evaluation) can change without invalidating the compiled graph. Keyed by the device the anchors are on
        (``cuda`` is read as the current device, ``cuda:N``: the device the feature maps will name)."""
        anchors = self._compute(grid_sizes, device)
        self._pinned[self._key(grid_sizes, anchors[0].device)] = anchors

    @staticmethod
    def _key(grid_sizes, device):
        return tuple(tuple(int(v) for v in s) for s in grid_sizes), str(device)

    def _compute(self, grid_sizes, device):
        out = []
        for (h, w), stride, base in zip(grid_sizes, self.strides, self.cell_anchors):
            sx = torch.arange(0, w * stride, step=stride, dtype=torch.float32, device=device)
            sy = torch.arange(0, h * stride, step=stride, dtype=torch.float32, device=device)
            yy, xx = torch.meshgrid(sy, sx, indexing="ij")
            shifts = torch.stack((xx.reshape(-1), yy.reshape(-1), xx.reshape(-1), yy.reshape(-1)), dim=1)
            out.append((shifts[:, None, :] + base.to(device=device, dtype=torch.float32)[None, :, :]).reshape(-1, 4))
        return out

    def grid_anchors(self, grid_sizes, device):
        key = self._key(grid_sizes, device)
        pinned = self._pinned.get(key)
        if pinned is not None:
            return pinned
        if torch.compiler.is_compiling():
            # no cache write from a traced graph: the anchors would be one of its outputs, kept in this module,
            # and a CUDA-graph replay overwrites such an output (read in the next step: wrong anchors, or
            # CUDA-graph trees' "overwritten by a subsequent run" error)
            return self._compute(grid_sizes, device)
        if key not in self._cache:
            if len(self._cache) > 32:
                self._cache.clear()
            self._cache[key] = self._compute(grid_sizes, device)
        return self._cache[key]

    def visibility(self, anchors, image_sizes):
        """``(N, A)`` mask of anchors inside each image (within ``straddle_thresh`` pixels)."""
        n = image_sizes.shape[0]
        if self.straddle_thresh < 0:
            return torch.ones((n, anchors.shape[0]), dtype=torch.bool, device=anchors.device)
        t = self.straddle_thresh
        h, w = image_sizes[:, 0:1], image_sizes[:, 1:2]
        return ((anchors[None, :, 0] >= -t) & (anchors[None, :, 1] >= -t)
                & (anchors[None, :, 2] < w + t) & (anchors[None, :, 3] < h + t))

    def forward(self, image_list, feature_maps):
        """Anchors per level, ``(A_l, 4)`` each (shared by all images of the batch)."""
        return self.grid_anchors([tuple(f.shape[-2:]) for f in feature_maps], feature_maps[0].device)
