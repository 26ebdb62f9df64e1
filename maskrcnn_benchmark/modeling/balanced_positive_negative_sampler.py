import torch


class BalancedPositiveNegativeSampler:
    """Samples up to ``batch_size_per_image`` examples per image with a ``positive_fraction`` cap on positives.

    Works on a padded ``(N, P)`` label matrix (``1`` positive, ``0`` negative, ``-1`` ignored) and returns boolean
    ``(pos_mask, neg_mask)`` of the same shape: a random subset via random keys + ``topk`` per row, so the whole
    batch is sampled in a few kernels without a host sync. Like the reference, negatives fill what positives
    leave of the per-image budget.
    """

    def __init__(self, batch_size_per_image, positive_fraction):
        self.batch_size_per_image = batch_size_per_image
        self.positive_fraction = positive_fraction

    def _pick(self, candidates, count):
        n, p = candidates.shape
        k = min(self.batch_size_per_image, p)
        keys = torch.rand((n, p), device=candidates.device).masked_fill(~candidates, -1.0)
        _, idx = keys.topk(k, dim=1)
        chosen = torch.arange(k, device=candidates.device)[None, :] < count[:, None]
        mask = torch.zeros_like(candidates)
        return mask.scatter_(1, idx, chosen)

    def __call__(self, labels):
        positive = labels >= 1
        negative = labels == 0
        num_pos = positive.sum(1).clamp(max=int(self.batch_size_per_image * self.positive_fraction))
        num_neg = negative.sum(1).minimum(self.batch_size_per_image - num_pos)
        return self._pick(positive, num_pos), self._pick(negative, num_neg)
