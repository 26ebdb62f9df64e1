"""The ground truth of a batch in fixed-shape tensors: what the training step computes on.

A list of per-image :class:`~maskrcnn_benchmark.structures.bounding_box.BoxList` targets holds as many boxes as
each image has; :class:`TargetBatch` pads them to ``G`` slots per image with a validity mask, and packs every
polygon part of the batch into three flat tensors (padded too). With ``G`` and the polygon buffers of fixed
sizes, a compiled training step sees the same shapes at every iteration.

Padding never changes a result: padded boxes are invalid (no anchor or proposal matches them), padded polygon
parts have no vertices. ``G`` is ``max_gt`` (``DATALOADER.MAX_ANNOTATIONS_PER_IMAGE``, NVIDIA's name and COCO
value 96) unless an image has more: then the batch takes the next multiple of 32, one more shape for a compiled
step, and the count is logged once.
"""
import logging
import math

import torch

logger = logging.getLogger(__name__)
_warned = set()


def _bucket(n, minimum):
    """The buffer size for ``n`` items: the next power of two, at least ``minimum``."""
    return max(int(minimum), 1 << max(int(n) - 1, 0).bit_length())


class TargetBatch:
    """``boxes (N, G, 4)`` xyxy, ``labels (N, G)``, ``valid (N, G)``; polygons packed over the batch:
    ``vertices (V, 2)``, ``part_lengths (P,)`` (0 for padding), ``part_instance (P,)`` (global instance
    ``n * G + g``); ``image_wh (N, 2)`` the targets' image sizes. ``bitmaps (N, G, H, W)`` instead of polygons for
    datasets annotated with RLE masks."""

    def __init__(self, boxes, labels, valid, image_wh, vertices=None, part_lengths=None, part_instance=None,
                 bitmaps=None):
        self.boxes, self.labels, self.valid, self.image_wh = boxes, labels, valid, image_wh
        self.vertices, self.part_lengths, self.part_instance = vertices, part_lengths, part_instance
        self.bitmaps = bitmaps

    @property
    def num_slots(self):
        return self.boxes.shape[1]

    @property
    def has_polygons(self):
        return self.vertices is not None

    @classmethod
    def from_boxlists(cls, targets, max_gt=0, device=None, min_vertices=1024, min_parts=128):
        """Pad ``targets`` (BoxLists with ``labels`` and, optionally, ``masks``). ``max_gt`` 0: the batch's
        largest count (no fixed shape: what an eager step needs)."""
        device = device or targets[0].bbox.device
        n = len(targets)
        counts = [len(t) for t in targets]
        g = max(counts, default=0)
        if max_gt:
            if g > max_gt:
                if g not in _warned:
                    _warned.add(g)
                    logger.info("an image has %d annotations, more than MAX_ANNOTATIONS_PER_IMAGE %d: this batch "
                                "is padded to %d", g, max_gt, 32 * math.ceil(g / 32))
                g = 32 * math.ceil(g / 32)
            else:
                g = max_gt
        g = max(g, 1)  # one (invalid) slot at least keeps gathers well defined
        boxes = torch.zeros((n, g, 4), dtype=torch.float32, device=device)
        labels = torch.zeros((n, g), dtype=torch.int64, device=device)
        valid = torch.zeros((n, g), dtype=torch.bool, device=device)
        for i, (t, c) in enumerate(zip(targets, counts)):
            if c:
                boxes[i, :c] = t.convert("xyxy").bbox.to(device)
                if t.has_field("labels"):
                    labels[i, :c] = t.get_field("labels").to(device)
                valid[i, :c] = True
        image_wh = torch.tensor([t.size for t in targets], dtype=torch.float32, device=device).reshape(-1, 2)
        masks = [t.get_field("masks") if t.has_field("masks") else None for t in targets]
        if not masks or any(m is None for m in masks):
            return cls(boxes, labels, valid, image_wh)
        if all(m.mode == "poly" for m in masks):
            packed = [m.packed_polygons() for m in masks]
            vertices = torch.cat([p[0].to(device) for p in packed]) if packed else torch.zeros((0, 2))
            lengths = torch.cat([p[1].to(device) for p in packed])
            instance = torch.cat([p[2].to(device) + i * g for i, p in enumerate(packed)])
            if max_gt:  # fixed buffers: pad with parts of no vertex
                nv, np_ = _bucket(vertices.shape[0], min_vertices), _bucket(lengths.shape[0], min_parts)
                vertices = torch.cat((vertices, vertices.new_zeros((nv - vertices.shape[0], 2))))
                lengths = torch.cat((lengths, lengths.new_zeros(np_ - lengths.shape[0])))
                # padding parts belong to instance n * g, after every real one: an instance's parts stay contiguous
                instance = torch.cat((instance, instance.new_full((np_ - instance.shape[0],), n * g)))
            return cls(boxes, labels, valid, image_wh, vertices, lengths, instance)
        h = max(m.size[1] for m in masks)
        w = max(m.size[0] for m in masks)
        bitmaps = torch.zeros((n, g, h, w), dtype=torch.uint8, device=device)
        for i, m in enumerate(masks):
            t = m.convert("mask").get_mask_tensor().to(device)
            bitmaps[i, : t.shape[0], : t.shape[1], : t.shape[2]] = t
        return cls(boxes, labels, valid, image_wh, bitmaps=bitmaps)

    def _fields(self):
        return (self.boxes, self.labels, self.valid, self.image_wh, self.vertices, self.part_lengths,
                self.part_instance, self.bitmaps)

    def tensors(self):
        return [t for t in self._fields() if t is not None]

    def _map(self, fn):
        return TargetBatch(*(None if t is None else fn(t) for t in self._fields()))

    def to(self, device, non_blocking=False):
        return self._map(lambda t: t.to(device, non_blocking=non_blocking))

    def pin_memory(self):
        return self._map(lambda t: t.pin_memory())

    def __len__(self):
        """The number of images."""
        return self.boxes.shape[0]
