"""SegmentationMask: the instance masks of one image, as polygons ("poly") or binary bitmaps ("mask").

Polygons follow COCO: each instance is a list of parts, each part a flat ``[x0, y0, x1, y1, ...]`` list.
Geometry uses the same "+1" convention as BoxList for flips (``x -> width - x - 1``) and the reference's
crop/resize (a crop shifts points, a resize scales them by ``new / old``).
"""
import math

import numpy as np
import torch
from pycocotools import mask as mask_utils

from .bounding_box import FLIP_LEFT_RIGHT, FLIP_TOP_BOTTOM, TO_REMOVE, by_value, from_value


def _pixels(size):
    """Whole pixels of a ``(width, height)`` that may be a crop's float size: rounded half up."""
    return tuple(int(math.floor(float(v) + 0.5)) for v in size)


def _as_part(part):
    part = torch.as_tensor(np.asarray(part, dtype=np.float32).reshape(-1))
    if part.numel() < 6 or part.numel() % 2:
        raise ValueError(f"a polygon needs at least 3 points (x, y pairs), got {part.numel()} numbers")
    return part


class SegmentationMask:
    """Instance masks of an image of size ``(width, height)``.

    ``instances`` is either a list of polygons (one list of parts per instance; mode "poly") or a
    ``(N, H, W)`` tensor / list of ``(H, W)`` arrays (mode "mask").
    """

    def __init__(self, instances, size, mode="poly"):
        self.size = (int(size[0]), int(size[1]))
        if mode == "poly":
            self.polygons = [[_as_part(p) for p in inst] for inst in instances]
            self.masks = None
            self._packed = None
        elif mode == "mask":
            if isinstance(instances, (list, tuple)):
                instances = (torch.stack([torch.as_tensor(np.asarray(m)) for m in instances])
                             if len(instances) else torch.zeros((0, self.size[1], self.size[0])))
            masks = torch.as_tensor(instances).to(torch.uint8)
            if masks.dim() == 2:
                masks = masks[None]
            if tuple(masks.shape[-2:]) != (self.size[1], self.size[0]):
                raise ValueError(f"mask shape {tuple(masks.shape[-2:])} does not match image size (h, w) = "
                                 f"{(self.size[1], self.size[0])}")
            self.masks = masks
            self.polygons = None
            self._packed = None
        else:
            raise ValueError(f"mode must be 'poly' or 'mask', got {mode!r}")
        self.mode = mode

    def __getstate__(self):
        """Polygons pickle as three arrays (vertices, part lengths, owning instance) by value: one message for a
        loader worker instead of a shared-memory handle per part (see ``bounding_box.by_value``)."""
        state = {"size": self.size, "mode": self.mode}
        if self.mode == "mask":
            state["masks"] = by_value(self.masks)
        elif all(p.device.type == "cpu" for inst in self.polygons for p in inst):
            parts = [p for inst in self.polygons for p in inst]
            state["vertices"] = torch.cat(parts).numpy() if parts else np.zeros((0,), np.float32)
            state["lengths"] = np.array([p.numel() for p in parts], dtype=np.int64)
            state["parts_per_instance"] = np.array([len(inst) for inst in self.polygons], dtype=np.int64)
            state["packed"] = self._packed is not None
        else:
            state["polygons"], state["packed"] = self.polygons, self._packed
        return state

    def __setstate__(self, state):
        self.size, self.mode = state["size"], state["mode"]
        self.masks, self.polygons, self._packed = None, None, None
        if self.mode == "mask":
            self.masks = from_value(state["masks"])
        elif "polygons" in state:
            self.polygons, self._packed = state["polygons"], state["packed"]
        else:
            vertices, lengths = torch.from_numpy(state["vertices"]), torch.from_numpy(state["lengths"])
            per_instance = torch.from_numpy(state["parts_per_instance"])
            parts = vertices.split(lengths.tolist())
            bounds = [0] + per_instance.cumsum(0).tolist()
            self.polygons = [list(parts[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
            if state["packed"]:
                self._packed = (vertices.view(-1, 2), lengths // 2,
                                torch.repeat_interleave(torch.arange(len(per_instance)), per_instance))

    # -- construction helpers -------------------------------------------------------------------------------
    @classmethod
    def _from_polygons(cls, polygons, size):
        """Polygons of an image of ``size``, as given: a crop's size is the box's, in float (:meth:`crop`)."""
        out = cls.__new__(cls)
        out.size, out.mode, out.polygons, out.masks = tuple(size), "poly", polygons, None
        out._packed = None
        return out

    def _map_parts(self, fn, size):
        return SegmentationMask._from_polygons([[fn(p) for p in inst] for inst in self.polygons], size)

    # -- geometry -------------------------------------------------------------------------------------------
    def transpose(self, method):
        if method not in (FLIP_LEFT_RIGHT, FLIP_TOP_BOTTOM):
            raise NotImplementedError("only FLIP_LEFT_RIGHT and FLIP_TOP_BOTTOM are implemented")
        if self.mode == "mask":
            dim = 2 if method == FLIP_LEFT_RIGHT else 1
            return SegmentationMask(self.masks.flip(dim), self.size, "mask")
        width, height = self.size
        axis, extent = (0, width) if method == FLIP_LEFT_RIGHT else (1, height)

        def flip(p):
            p = p.clone()
            p[axis::2] = extent - p[axis::2] - TO_REMOVE
            return p

        return self._map_parts(flip, self.size)

    def crop(self, box):
        """The masks inside ``box`` (xyxy). Polygons as the 2018 reference crops them (NVIDIA's v0.7 mask targets):
        shifted by the raw box corner, the crop's size the box's float32 width and height, at least 1, unrounded,
        so a :meth:`resize` to ``(M, M)`` scales by ``M / max(x2 - x1, 1)`` (bit for bit the golden targets:
        tests/parity/test_golden_layers.py)."""
        box = torch.as_tensor(box, dtype=torch.float32).reshape(4).cpu()
        w, h = max(float(box[2] - box[0]), 1.0), max(float(box[3] - box[1]), 1.0)
        if self.mode == "mask":
            (ix1, iy1), (iw, ih) = _pixels(box[:2].tolist()), _pixels((w, h))
            height, width = self.masks.shape[1], self.masks.shape[2]
            # clamped to the image, at least one pixel (maskrcnn-benchmark's BinaryMaskList.crop): a corner left
            # of or above the image wrapped the slice around
            x0, y0 = min(max(ix1, 0), max(width - 1, 0)), min(max(iy1, 0), max(height - 1, 0))
            x1, y1 = max(min(ix1 + iw, width), x0 + 1), max(min(iy1 + ih, height), y0 + 1)
            masks = self.masks[:, y0:y1, x0:x1]
            return SegmentationMask(masks, (masks.shape[2], masks.shape[1]), "mask")
        shift = box[:2]

        def crop(p):
            return (p.view(-1, 2) - shift.to(p.device)).reshape(-1)

        return self._map_parts(crop, (w, h))

    def resize(self, size, *args, **kwargs):
        size = (int(size[0]), int(size[1]))
        if self.mode == "mask":
            if len(self.masks) == 0:
                return SegmentationMask(torch.zeros((0, size[1], size[0]), dtype=torch.uint8), size, "mask")
            m = torch.nn.functional.interpolate(self.masks[:, None].float(), size=(size[1], size[0]),
                                                mode="bilinear", align_corners=False)[:, 0]
            return SegmentationMask((m > 0.5).to(torch.uint8), size, "mask")
        scale = torch.tensor([size[0] / float(self.size[0]), size[1] / float(self.size[1])])

        def resize(p):
            return (p.view(-1, 2) * scale).reshape(-1)

        return self._map_parts(resize, size)

    def convert(self, mode):
        """Return the masks in ``mode`` ("mask" rasterizes polygons with pycocotools, as the reference)."""
        if mode == self.mode:
            return self
        if mode != "mask":
            raise NotImplementedError("converting binary masks back to polygons is not supported")
        return SegmentationMask(self.get_mask_tensor(), _pixels(self.size), "mask")

    def get_mask_tensor(self):
        """``(N, H, W)`` uint8 bitmaps."""
        if self.mode == "mask":
            return self.masks
        width, height = _pixels(self.size)  # a crop's size is the box's, in float
        if not self.polygons:
            return torch.zeros((0, height, width), dtype=torch.uint8)
        out = []
        for inst in self.polygons:
            if not inst:  # every part was degenerate: an empty mask
                out.append(torch.zeros((height, width), dtype=torch.uint8))
                continue
            rles = mask_utils.frPyObjects([p.tolist() for p in inst], height, width)
            out.append(torch.from_numpy(mask_utils.decode(mask_utils.merge(rles)).astype(np.uint8)))
        return torch.stack(out)

    def packed_polygons(self):
        """All parts of all instances as flat tensors, the form the batched mask-target rasterizer reads:
        ``(vertices (V, 2) float32, part_lengths (P,) int64, part_instance (P,) int64)``, parts in instance
        order. Cached (masks are immutable: every op returns a new object), so a data-loader worker can build
        it once per image and ``to(device)`` moves it with the targets.
        """
        if self.mode != "poly":
            raise ValueError("packed_polygons needs polygon masks")
        if self._packed is None:
            parts = [(i, p) for i, inst in enumerate(self.polygons) for p in inst]
            if parts:
                vertices = torch.cat([p.view(-1, 2) for _, p in parts])
                lengths = torch.tensor([p.numel() // 2 for _, p in parts], dtype=torch.int64)
                owner = torch.tensor([i for i, _ in parts], dtype=torch.int64)
            else:
                vertices = torch.zeros((0, 2))
                lengths = owner = torch.zeros((0,), dtype=torch.int64)
            self._packed = (vertices, lengths, owner)
        return self._packed

    # -- containers -----------------------------------------------------------------------------------------
    def to(self, device, non_blocking=False):
        if self.mode == "mask":
            return SegmentationMask(self.masks.to(device, non_blocking=non_blocking), self.size, "mask")
        out = SegmentationMask._from_polygons(self.polygons, self.size)
        if self._packed is not None:
            out._packed = tuple(t.to(device, non_blocking=non_blocking) for t in self._packed)
        return out

    def pin_memory(self):
        out = SegmentationMask._from_polygons(self.polygons, self.size) if self.mode == "poly" else \
            SegmentationMask(self.masks.pin_memory(), self.size, "mask")
        if self.mode == "poly" and self._packed is not None:
            out._packed = tuple(t.pin_memory() for t in self._packed)
        return out

    def __getitem__(self, item):
        if self.mode == "mask":
            return SegmentationMask(self.masks[item], self.size, "mask")
        if isinstance(item, int):
            return SegmentationMask._from_polygons([self.polygons[item]], self.size)
        if isinstance(item, (list, tuple)) and item and all(isinstance(i, bool) for i in item):
            item = torch.tensor(item)
        if isinstance(item, torch.Tensor):
            if item.dtype in (torch.bool, torch.uint8):  # a mask, as torch (and the BoxList beside) reads it
                item = item.nonzero().squeeze(1)
            item = item.tolist()
        elif isinstance(item, slice):
            item = range(len(self.polygons))[item]
        return SegmentationMask._from_polygons([self.polygons[i] for i in item], self.size)

    def __len__(self):
        return len(self.masks) if self.mode == "mask" else len(self.polygons)

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __repr__(self):
        return f"SegmentationMask(num_instances={len(self)}, image_width={self.size[0]}, " \
               f"image_height={self.size[1]}, mode={self.mode})"
