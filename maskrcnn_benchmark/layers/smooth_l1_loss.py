import torch


def smooth_l1_loss(input, target, beta=1.0 / 9, size_average=True):
    """Huber-style loss of the reference: quadratic below ``beta``, linear above (Detectron's beta = 1/9)."""
    n = torch.abs(input - target)
    loss = torch.where(n < beta, 0.5 * n ** 2 / beta, n - 0.5 * beta)
    return loss.mean() if size_average else loss.sum()
