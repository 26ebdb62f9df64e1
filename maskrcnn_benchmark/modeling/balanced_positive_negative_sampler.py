import torch


class BalancedPositiveNegativeSampler:
    """Samples up to ``batch_size_per_image`` examples per image with a ``positive_fraction`` cap on positives.

    Works on a padded ``(N, P)`` label matrix (``1`` positive, ``0`` negative, ``-1`` ignored) and returns boolean
    ``(pos_mask, neg_mask)`` of the same shape: a random subset via random keys + ``topk`` per row, so the whole
    batch is sampled in a few kernels without a host sync. Like the reference, negatives fill what positives
    leave of the per-image budget. The sample does not depend on padding at the end of the rows.
    """

    def __init__(self, batch_size_per_image, positive_fraction):
        self.batch_size_per_image = batch_size_per_image
        self.positive_fraction = positive_fraction

    def _pick(self, keys, candidates, count):
        k = min(self.batch_size_per_image, candidates.shape[1])
        _, idx = keys.masked_fill(~candidates, -1.0).topk(k, dim=1)
        chosen = torch.arange(k, device=candidates.device)[None, :] < count[:, None]
        mask = torch.zeros_like(candidates)
        return mask.scatter_(1, idx, chosen)

    def __call__(self, labels):
        positive = labels >= 1
        negative = labels == 0
        num_pos = positive.sum(1).clamp(max=int(self.batch_size_per_image * self.positive_fraction))
        num_neg = negative.sum(1).minimum(self.batch_size_per_image - num_pos)
        # One key per candidate serves both draws (positives and negatives are disjoint). Drawn column-major: the
        # key of (image i, candidate j) is random number j * n + i whatever the number of candidates after j, so
        # padding the rows (the ground-truth slots appended to the proposals of a static step) changes no draw.
        n, p = labels.shape
        keys = torch.rand((p, n), device=labels.device).t()
        return self._pick(keys, positive, num_pos), self._pick(keys, negative, num_neg)
