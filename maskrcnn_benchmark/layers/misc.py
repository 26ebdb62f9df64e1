import torch
from torch import nn


def group_norm(num_channels, num_groups=32, dim_per_group=-1, eps=1e-5):
    """GroupNorm following maskrcnn-benchmark's MODEL.GROUP_NORM keys (groups fixed or channels per group)."""
    if dim_per_group > 0:
        num_groups = num_channels // dim_per_group
    num_groups = max(1, min(num_groups, num_channels))
    while num_channels % num_groups:
        num_groups -= 1
    return nn.GroupNorm(num_groups, num_channels, eps=eps)


def cat(tensors, dim=0):
    """``torch.cat`` that skips the copy for a single tensor."""
    return tensors[0] if len(tensors) == 1 else torch.cat(tensors, dim)
