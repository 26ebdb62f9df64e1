"""Helpers of the padded batch tensors the hot paths use, and between them and per-image BoxLists."""
import torch


def image_sizes_tensor(image_sizes, device):
    """``(N, 2)`` float tensor of ``(height, width)``."""
    return torch.tensor(image_sizes, dtype=torch.float32, device=device).reshape(-1, 2)


def pad_boxes(boxlists, fields=(), device=None):
    """Pad the ``xyxy`` boxes of N BoxLists to ``(N, M, 4)``.

    Returns ``(boxes, valid, {field: (N, M) padded with 0})``; ``valid`` marks real boxes.
    """
    device = device or boxlists[0].bbox.device
    counts = [len(b) for b in boxlists]
    m = max(max(counts, default=0), 1)  # at least one (invalid) slot keeps gathers well-defined
    n = len(boxlists)
    boxes = torch.zeros((n, m, 4), device=device)
    valid = torch.zeros((n, m), dtype=torch.bool, device=device)
    out_fields = {}
    for f in fields:
        ref = boxlists[0].get_field(f)
        out_fields[f] = torch.zeros((n, m) + tuple(ref.shape[1:]), dtype=ref.dtype, device=device)
    for i, (b, c) in enumerate(zip(boxlists, counts)):
        if c:
            boxes[i, :c] = b.convert("xyxy").bbox
            valid[i, :c] = True
            for f in fields:
                out_fields[f][i, :c] = b.get_field(f)
    return boxes, valid, out_fields


class Compaction:
    """The chosen entries of each row of ``chosen (N, M)`` (bool) moved to its front, in order, into ``capacity``
    slots: :meth:`take` moves values there (the other slots get ``fill``), :attr:`index` is the position each slot
    came from (0 for an empty slot), :attr:`valid` which slots are filled.

    Each chosen entry's slot is the number of chosen entries before it (a cumulative sum), and values move by one
    scatter (unchosen entries, and chosen ones beyond ``capacity``, go to a spill slot that is dropped): linear, no
    sort, no host read. Scattering the values themselves rather than gathering them through :attr:`index` is
    deliberate: inductor (torch 2.12, CPU) compiled the gather form wrongly inside the whole training step (wrong
    box-head samples; tests/engine/test_compiled_equals_eager.py), the scatter form correctly."""

    def __init__(self, chosen, capacity):
        self.chosen = chosen
        self.capacity = capacity
        position = torch.cumsum(chosen.to(torch.int64), 1) - 1
        self.slot = torch.where(chosen & (position < capacity), position, torch.full_like(position, capacity))

    def take(self, values, fill=0):
        """``values (N, M, ...)`` -> ``(N, capacity, ...)``, the chosen entries first."""
        n, m = self.chosen.shape
        out = values.new_full((n, self.capacity + 1, *values.shape[2:]), fill)
        index = self.slot.view(n, m, *([1] * (values.dim() - 2))).expand_as(values)
        return out.scatter(1, index, values)[:, : self.capacity]

    @property
    def index(self):
        n, m = self.chosen.shape
        return self.take(torch.arange(m, device=self.chosen.device).expand(n, m))

    @property
    def valid(self):
        return self.take(self.chosen, False)


def compact(chosen, capacity=None):
    """The :class:`Compaction` of ``chosen (N, M)``: the one implementation of "compact the chosen rows" (RPN
    proposals, box-head samples, mask-head positives). ``capacity``: fixed (a static step: shapes that do not
    depend on the data; slots beyond M stay empty), or None: the largest count of a row, at least 1 (one host
    read: what an eager step uses, so it computes no more rows than it needs)."""
    if capacity is None:
        capacity = max(int(chosen.sum(1).max()), 1) if chosen.shape[0] else 1
    return Compaction(chosen, int(capacity))


def gather_rows(values, index):
    """``values (N, M, ...)`` at ``index (N, C)`` along dim 1: ``(N, C, ...)``."""
    return values.gather(1, index.view(*index.shape, *([1] * (values.dim() - 2))).expand(
        *index.shape, *values.shape[2:]))


def rois_from_boxlists(boxlists):
    """``(K, 5)`` ROIs (image index, x1, y1, x2, y2) from a list of BoxLists (evaluation: the detections)."""
    boxes = [b.convert("xyxy").bbox for b in boxlists]
    idx = [torch.full((len(b), 1), i, dtype=b.dtype, device=b.device) for i, b in enumerate(boxes)]
    return torch.cat((torch.cat(idx), torch.cat(boxes)), dim=1)


def rank_within_groups(groups):
    """For a 1-D tensor of group ids, the position of each element among the elements of its group
    (elements earlier in the tensor rank first). Lets "top-k per group" run as one masked select."""
    if groups.numel() == 0:
        return groups.clone()
    sorted_groups, perm = torch.sort(groups, stable=True)
    first = torch.searchsorted(sorted_groups, sorted_groups)
    rank = torch.empty_like(perm)
    rank[perm] = torch.arange(groups.numel(), device=groups.device) - first
    return rank


def split_by_image(image_idx, num_images):
    """Permutation grouping elements by image (stable) and the per-image counts (one host sync)."""
    order = torch.sort(image_idx, stable=True).indices
    counts = torch.bincount(image_idx, minlength=num_images).tolist()
    return order, counts
