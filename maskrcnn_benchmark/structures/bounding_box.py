"""BoxList: the boxes of one image plus per-box fields (labels, scores, masks...).

Box convention (maskrcnn-benchmark / MLPerf reference): coordinates are inclusive pixel indices, so a box
``(x1, y1, x2, y2)`` is ``x2 - x1 + 1`` wide ("TO_REMOVE = 1" in the reference). ``xywh`` boxes store that width.
"""
import numpy as np
import torch

FLIP_LEFT_RIGHT = 0
FLIP_TOP_BOTTOM = 1

# The "+1" of the legacy box convention.
TO_REMOVE = 1

# Largest CPU tensor a pickled BoxList / SegmentationMask carries by value (see ``by_value``).
_BY_VALUE_MAX_ELEMENTS = 1 << 16
_NUMPY_DTYPES = {torch.float32, torch.float64, torch.float16, torch.int64, torch.int32, torch.int16, torch.int8,
                 torch.uint8, torch.bool}


def by_value(t):
    """``t`` as a numpy array if it is a small CPU tensor, else ``t``.

    A data-loader worker hands its batch to the trainer by pickling it. torch pickles each tensor as a
    shared-memory file descriptor, which costs the trainer a socket connection to the worker per tensor:
    a batch of 4 images has about 40 small target tensors (boxes, labels, polygon parts), so that was about
    25 ms of the training process's time per iteration on the CPU demo. Small tensors travel inside the pickle
    instead, and the image batch (one big tensor) keeps the shared-memory path.
    """
    if (isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.dtype in _NUMPY_DTYPES
            and t.numel() <= _BY_VALUE_MAX_ELEMENTS and not t.requires_grad):
        return t.numpy()
    return t


def from_value(x):
    """Inverse of :func:`by_value`."""
    return torch.from_numpy(x) if isinstance(x, np.ndarray) else x


class BoxList:
    """Boxes of one image of size ``(width, height)`` with optional per-box fields.

    Fields are tensors (or objects with ``__getitem__``/``resize``/``transpose``/``crop``, such as
    SegmentationMask) whose first dimension indexes the boxes.
    """

    def __init__(self, bbox, image_size, mode="xyxy"):
        device = bbox.device if isinstance(bbox, torch.Tensor) else torch.device("cpu")
        bbox = torch.as_tensor(bbox, dtype=torch.float32, device=device)
        if bbox.numel() == 0:
            bbox = bbox.reshape(0, 4)
        if bbox.ndim != 2 or bbox.size(-1) != 4:
            raise ValueError(f"bbox must be of shape (N, 4), got {tuple(bbox.shape)}")
        if mode not in ("xyxy", "xywh"):
            raise ValueError(f"mode must be 'xyxy' or 'xywh', got {mode!r}")
        self.bbox = bbox
        self.size = (int(image_size[0]), int(image_size[1]))  # (width, height)
        self.mode = mode
        self.extra_fields = {}

    def __getstate__(self):
        state = dict(self.__dict__)
        state["bbox"] = by_value(self.bbox)
        state["extra_fields"] = {k: by_value(v) for k, v in self.extra_fields.items()}
        return state

    def __setstate__(self, state):
        state["bbox"] = from_value(state["bbox"])
        state["extra_fields"] = {k: from_value(v) for k, v in state["extra_fields"].items()}
        self.__dict__.update(state)

    # -- fields ---------------------------------------------------------------------------------------------
    def add_field(self, field, field_data):
        self.extra_fields[field] = field_data

    def get_field(self, field):
        return self.extra_fields[field]

    def has_field(self, field):
        return field in self.extra_fields

    def fields(self):
        return list(self.extra_fields.keys())

    def _copy_extra_fields(self, other):
        for k, v in other.extra_fields.items():
            self.extra_fields[k] = v

    # -- conversions ----------------------------------------------------------------------------------------
    def _split_into_xyxy(self):
        if self.mode == "xyxy":
            return self.bbox.unbind(-1)
        x, y, w, h = self.bbox.unbind(-1)
        return x, y, x + (w - TO_REMOVE).clamp(min=0), y + (h - TO_REMOVE).clamp(min=0)

    def convert(self, mode):
        if mode not in ("xyxy", "xywh"):
            raise ValueError(f"mode must be 'xyxy' or 'xywh', got {mode!r}")
        if mode == self.mode:
            return self
        x1, y1, x2, y2 = self._split_into_xyxy()
        if mode == "xyxy":
            bbox = torch.stack((x1, y1, x2, y2), dim=-1)
        else:
            bbox = torch.stack((x1, y1, x2 - x1 + TO_REMOVE, y2 - y1 + TO_REMOVE), dim=-1)
        out = BoxList(bbox, self.size, mode=mode)
        out._copy_extra_fields(self)
        return out

    # -- geometry -------------------------------------------------------------------------------------------
    def resize(self, size, *args, **kwargs):
        """Scale to a new image size ``(width, height)``; fields that can be resized are resized too."""
        ratio_w = float(size[0]) / float(self.size[0])
        ratio_h = float(size[1]) / float(self.size[1])
        if ratio_w == ratio_h and self.mode == "xywh":  # the reference: scaled in their own mode (w' = w r)
            bbox = self.bbox * ratio_w
        elif self.mode == "xyxy":  # Python-float ratios: no host-to-device copy of a scale tensor (float32 either way)
            x1, y1, x2, y2 = self.bbox.unbind(-1)
            bbox = torch.stack((x1 * ratio_w, y1 * ratio_h, x2 * ratio_w, y2 * ratio_h), -1)
        else:
            return self.convert("xyxy").resize(size, *args, **kwargs).convert(self.mode)
        out = BoxList(bbox, size, mode=self.mode)
        for k, v in self.extra_fields.items():
            if not isinstance(v, torch.Tensor) and hasattr(v, "resize"):
                v = v.resize(size, *args, **kwargs)
            out.add_field(k, v)
        return out

    def transpose(self, method):
        """Flip horizontally (FLIP_LEFT_RIGHT, "+1" aware: ``width - x2 - 1``) or vertically (FLIP_TOP_BOTTOM:
        ``height - y2``, without the "+1", as the reference flips boxes; a ``masks`` field's polygons flip as the
        reference's, ``height - y - 1``)."""
        if method not in (FLIP_LEFT_RIGHT, FLIP_TOP_BOTTOM):
            raise NotImplementedError("only FLIP_LEFT_RIGHT and FLIP_TOP_BOTTOM are implemented")
        width, height = self.size
        x1, y1, x2, y2 = self._split_into_xyxy()
        if method == FLIP_LEFT_RIGHT:
            bbox = torch.stack((width - x2 - TO_REMOVE, y1, width - x1 - TO_REMOVE, y2), dim=-1)
        else:
            bbox = torch.stack((x1, height - y2, x2, height - y1), dim=-1)
        out = BoxList(bbox, self.size, mode="xyxy")
        for k, v in self.extra_fields.items():
            if not isinstance(v, torch.Tensor) and hasattr(v, "transpose"):
                v = v.transpose(method)
            out.add_field(k, v)
        return out.convert(self.mode)

    def crop(self, box):
        """Crop to ``box = (left, top, right, bottom)``; boxes are shifted and clamped to the crop."""
        left, top, right, bottom = box
        w, h = right - left, bottom - top
        x1, y1, x2, y2 = self._split_into_xyxy()
        bbox = torch.stack(
            ((x1 - left).clamp(0, w), (y1 - top).clamp(0, h), (x2 - left).clamp(0, w), (y2 - top).clamp(0, h)),
            dim=-1,
        )
        out = BoxList(bbox, (w, h), mode="xyxy")
        for k, v in self.extra_fields.items():
            if not isinstance(v, torch.Tensor) and hasattr(v, "crop"):
                v = v.crop(box)
            out.add_field(k, v)
        return out.convert(self.mode)

    def clip_to_image(self, remove_empty=True):
        """Clamp boxes to the image (max coordinate is size - 1); optionally drop boxes left empty."""
        x1, y1, x2, y2 = self._split_into_xyxy()
        w, h = self.size
        bbox = torch.stack(
            (x1.clamp(0, w - TO_REMOVE), y1.clamp(0, h - TO_REMOVE),
             x2.clamp(0, w - TO_REMOVE), y2.clamp(0, h - TO_REMOVE)),
            dim=-1,
        )
        out = BoxList(bbox, self.size, mode="xyxy")
        out._copy_extra_fields(self)
        out = out.convert(self.mode)
        if remove_empty:
            b = out.convert("xyxy").bbox
            keep = (b[:, 3] > b[:, 1]) & (b[:, 2] > b[:, 0])
            return out[keep]
        return out

    def area(self):
        """Areas with the "+1" convention: ``(x2 - x1 + 1) * (y2 - y1 + 1)``."""
        if self.mode == "xywh":
            return self.bbox[:, 2] * self.bbox[:, 3]
        b = self.bbox
        return (b[:, 2] - b[:, 0] + TO_REMOVE) * (b[:, 3] - b[:, 1] + TO_REMOVE)

    # -- containers -----------------------------------------------------------------------------------------
    def to(self, device, non_blocking=False):
        out = BoxList(self.bbox.to(device, non_blocking=non_blocking), self.size, self.mode)
        for k, v in self.extra_fields.items():
            if hasattr(v, "to"):
                v = v.to(device, non_blocking=non_blocking)
            out.add_field(k, v)
        return out

    def pin_memory(self):
        """Pinned copy (DataLoader ``pin_memory=True``) so the trainer's non_blocking copies overlap."""
        out = BoxList(self.bbox.pin_memory(), self.size, self.mode)
        for k, v in self.extra_fields.items():
            out.add_field(k, v.pin_memory() if hasattr(v, "pin_memory") else v)
        return out

    def __getitem__(self, item):
        out = BoxList(self.bbox[item], self.size, self.mode)
        for k, v in self.extra_fields.items():
            out.add_field(k, v[item])
        return out

    def __len__(self):
        return self.bbox.shape[0]

    def copy_with_fields(self, fields, skip_missing=False):
        out = BoxList(self.bbox, self.size, self.mode)
        for field in [fields] if isinstance(fields, str) else fields:
            if self.has_field(field):
                out.add_field(field, self.get_field(field))
            elif not skip_missing:
                raise KeyError(f"field '{field}' not found in {self}")
        return out

    def __repr__(self):
        return (f"BoxList(num_boxes={len(self)}, image_width={self.size[0]}, image_height={self.size[1]}, "
                f"mode={self.mode})")
