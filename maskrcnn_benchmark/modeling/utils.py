"""Helpers to move between per-image BoxLists and padded batch tensors (the form the hot paths use)."""
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
