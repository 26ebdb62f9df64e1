"""The ground truth of a batch in fixed-shape tensors: what the training step computes on.

A list of per-image :class:`~maskrcnn_benchmark.structures.bounding_box.BoxList` targets holds as many boxes as
each image has; :class:`TargetBatch` pads them to ``G`` slots per image with a validity mask, and lays out the
polygons of every slot padded to ``V`` vertices and ``P`` parts (:func:`~maskrcnn_benchmark.layers.rasterize.
pad_polygons`: the counts are read here, on the host, and travel as shapes), so the mask targets are computed on
the device with no size read back. With ``G`` fixed, a compiled training step sees the same box shapes at every
iteration; ``V`` and ``P`` (powers of two) only feed the mask-target op and are marked dynamic.

Padding never changes a result: padded boxes are invalid (no anchor or proposal matches them), padded polygon
vertices start no edge. ``G`` is ``max_gt`` (``DATALOADER.MAX_ANNOTATIONS_PER_IMAGE``, NVIDIA's name and COCO
value 96) unless an image has more: then the batch takes the next multiple of 32, one more shape for a compiled
step, and the count is logged once.
"""
import logging
import math

import torch

from ..layers.rasterize import pad_polygons
from .packing import map_storages, packed_empty

logger = logging.getLogger(__name__)
_warned = set()


class TargetBatch:
    """``boxes (N, G, 4)`` xyxy, ``labels (N, G)``, ``valid (N, G)``, ``image_wh (N, 2)`` the targets' image sizes;
    the polygons of slot ``n * G + g``: ``poly_vertices (N*G, V, 2)``, ``poly_next (N*G, V)`` (the vertex each
    vertex's edge goes to), ``poly_part (N*G, V)`` (the edge's part, -1: none) and ``poly_parts (N*G, P)`` (True
    for the parts that exist: the part count travels as this shape). ``bitmaps (N, G, H, W)`` instead of polygons
    for datasets annotated with RLE masks.

    ``static``: the batch is padded to fixed shapes (``G`` = ``max_gt`` slots), and the ROI heads keep fixed shapes
    for it too: ``BATCH_SIZE_PER_IMAGE`` box-head slots and the sampler's positive budget of mask-head rows per
    image. Otherwise (an eager step) they trim both to the rows in use, one host read each. Static or not is
    the batch's padding, chosen by the collator (``DATALOADER.MAX_ANNOTATIONS_PER_IMAGE`` for a compiled step),
    not a setting of the model."""

    def __init__(self, boxes, labels, valid, image_wh, poly_vertices=None, poly_next=None, poly_part=None,
                 poly_parts=None, bitmaps=None, static=False):
        self.boxes, self.labels, self.valid, self.image_wh = boxes, labels, valid, image_wh
        self.poly_vertices, self.poly_next, self.poly_part, self.poly_parts = (poly_vertices, poly_next, poly_part,
                                                                                poly_parts)
        self.bitmaps = bitmaps
        self.static = bool(static)

    @property
    def num_slots(self):
        return self.boxes.shape[1]

    @property
    def has_polygons(self):
        return self.poly_vertices is not None

    @classmethod
    def from_boxlists(cls, targets, max_gt=0, device=None, polygon_slots=(16, 4)):
        """Pad ``targets`` (BoxLists with ``labels`` and, optionally, ``masks``). ``max_gt`` > 0: a static batch of
        that many slots; 0: the batch's largest count (no fixed shape: what an eager step needs).

        Called by the loader's collator (:class:`~maskrcnn_benchmark.data.collate_batch.BatchCollator`) and by
        the compatibility adapters for the reference's BoxList interfaces (:mod:`maskrcnn_benchmark.modeling.
        compat`), nowhere else."""
        device = device or targets[0].bbox.device
        n = len(targets)
        counts = [len(t) for t in targets]
        g = max(counts, default=0)
        if max_gt:
            if g > max_gt:
                if g not in _warned:
                    _warned.add(g)
                    logger.warning("an image has %d annotations, more than DATALOADER.MAX_ANNOTATIONS_PER_IMAGE %d: "
                                   "its batch keeps them all in %d slots, a shape a compiled step recompiles for on "
                                   "this rank (the others wait in the gradient all-reduce); raise the key above the "
                                   "data's largest count", g, max_gt, 32 * math.ceil(g / 32))
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
        if masks and any(m is None for m in masks) and any(m is not None for m in masks):
            raise ValueError(f"image {masks.index(None)} of the batch has no 'masks' field, the others have: "
                             "a batch's targets all have masks or none has")
        if not masks or any(m is None for m in masks):
            return cls(boxes, labels, valid, image_wh, static=max_gt > 0)
        if all(m.mode == "poly" for m in masks):
            packed = [m.packed_polygons() for m in masks]
            vertices = torch.cat([p[0].cpu() for p in packed]).float().reshape(-1, 2)
            lengths = torch.cat([p[1].cpu() for p in packed])
            instance = torch.cat([p[2].cpu() + i * g for i, p in enumerate(packed)])
            slot, nxt, part, num_parts = pad_polygons(lengths, instance, n * g, *polygon_slots)
            padded = torch.zeros((n * g * nxt.shape[1], 2), dtype=torch.float32)
            padded[slot] = vertices
            parts = torch.arange(num_parts)[None, :] < torch.bincount(instance, minlength=n * g)[:, None]
            return cls(boxes, labels, valid, image_wh, padded.view(n * g, -1, 2).to(device), nxt.to(device),
                       part.to(device), parts.to(device), static=max_gt > 0)
        h = max(m.size[1] for m in masks)
        w = max(m.size[0] for m in masks)
        bitmaps = torch.zeros((n, g, h, w), dtype=torch.uint8, device=device)
        for i, m in enumerate(masks):
            t = m.convert("mask").get_mask_tensor().to(device)
            bitmaps[i, : t.shape[0], : t.shape[1], : t.shape[2]] = t
        return cls(boxes, labels, valid, image_wh, bitmaps=bitmaps, static=max_gt > 0)

    def _fields(self):
        return (self.boxes, self.labels, self.valid, self.image_wh, self.poly_vertices, self.poly_next,
                self.poly_part, self.poly_parts, self.bitmaps)

    def tensors(self):
        return [t for t in self._fields() if t is not None]

    def packed(self):
        """The same batch with its tensors in one buffer (:mod:`~maskrcnn_benchmark.structures.packing`): what the
        loader's collator sends, so ``pin_memory`` and ``to`` make one copy each."""
        fields = self._fields()
        views = iter(packed_empty([(t.shape, t.dtype) for t in fields if t is not None]))
        return TargetBatch(*(None if t is None else next(views).copy_(t) for t in fields), static=self.static)

    def _map(self, fn):
        fields = self._fields()
        moved = iter(map_storages([t for t in fields if t is not None], fn))  # once per storage: once if packed
        return TargetBatch(*(None if t is None else next(moved) for t in fields), static=self.static)

    def to(self, device, non_blocking=False):
        return self._map(lambda t: t.to(device, non_blocking=non_blocking))

    def pin_memory(self):
        return self._map(lambda t: t.pin_memory())

    def __len__(self):
        """The number of images."""
        return self.boxes.shape[0]
