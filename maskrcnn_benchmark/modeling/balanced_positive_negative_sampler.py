import torch


class BalancedPositiveNegativeSampler:
    """Samples up to ``batch_size_per_image`` examples per image with a ``positive_fraction`` cap on positives.

    Works on a padded ``(N, P)`` label matrix (``1`` positive, ``0`` negative, ``-1`` ignored) and returns boolean
    ``(pos_mask, neg_mask)`` of the same shape: a random subset via random keys (:func:`position_keys`) + ``topk``
    per row, so the whole batch is sampled in a few kernels without a host sync (0 in the whole step:
    tests/utils/test_host_syncs.py, bench/host_syncs.py). Like the reference, negatives fill what positives leave of
    the per-image budget. The sample does not depend on padding at the end of the rows, on any device.
    """

    def __init__(self, batch_size_per_image, positive_fraction):
        self.batch_size_per_image = batch_size_per_image
        self.positive_fraction = positive_fraction

    def _pick(self, keys, candidates, count):
        k = min(self.batch_size_per_image, candidates.shape[1])
        _, idx = keys.masked_fill(~candidates, -1).topk(k, dim=1)
        chosen = torch.arange(k, device=candidates.device)[None, :] < count[:, None]
        mask = torch.zeros_like(candidates)
        return mask.scatter_(1, idx, chosen)

    def __call__(self, labels):
        positive = labels >= 1
        negative = labels == 0
        num_pos = positive.sum(1).clamp(max=int(self.batch_size_per_image * self.positive_fraction))
        num_neg = negative.sum(1).minimum(self.batch_size_per_image - num_pos)
        # One key per candidate serves both draws (positives and negatives are disjoint).
        keys = position_keys(*labels.shape, device=labels.device)
        return self._pick(keys, positive, num_pos), self._pick(keys, negative, num_neg)


_MASK32 = 0xFFFFFFFF
_MIX = 0x45D9F3B  # odd: the multiplication is a bijection of 32-bit words (and x * _MIX < 2**63: no overflow)


def position_keys(n, p, device=None):
    """``(n, p)`` int64 random keys, distinct within a call: a bijective 32-bit mix of one random base plus each
    candidate's position ``j * n + i`` (image i, candidate j). A key depends on the base and its position alone,
    so padding the rows (the ground-truth slots appended to the proposals of a static step) changes no draw, and
    the generator advances by one number whatever the size. (``torch.rand`` keys did neither on CUDA, whose
    generator hands elements to threads by the tensor's size.)"""
    base = torch.randint(0, _MASK32 + 1, (1,), device=device)
    x = (torch.arange(p, device=device)[None, :] * n + torch.arange(n, device=device)[:, None] + base) & _MASK32
    x = ((x >> 16) ^ x) * _MIX & _MASK32
    x = ((x >> 16) ^ x) * _MIX & _MASK32
    return (x >> 16) ^ x
