import logging

import torch

from .lr_scheduler import WarmupMultiStepLR

logger = logging.getLogger(__name__)


def _fused_sgd():
    try:
        from apex.optimizers import FusedSGD  # optional accelerator
    except Exception:
        return None
    return FusedSGD


def make_optimizer(cfg, model):
    """SGD with momentum; biases get ``BIAS_LR_FACTOR`` x LR and ``WEIGHT_DECAY_BIAS`` (reference groups).

    apex's FusedSGD is used only when ``SOLVER.USE_FUSED_SGD`` is set and apex imports; otherwise torch's SGD
    (with its multi-tensor ``foreach`` implementation).
    """
    s = cfg.SOLVER
    weights, biases = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (biases if name.endswith("bias") else weights).append(p)
    groups = [
        {"params": weights, "lr": s.BASE_LR, "weight_decay": s.WEIGHT_DECAY},
        {"params": biases, "lr": s.BASE_LR * s.BIAS_LR_FACTOR, "weight_decay": s.WEIGHT_DECAY_BIAS},
    ]
    groups = [g for g in groups if g["params"]]
    if s.USE_FUSED_SGD:
        fused = _fused_sgd()
        if fused is not None:
            logger.info("optimizer: apex FusedSGD")
            return fused(groups, lr=s.BASE_LR, momentum=s.MOMENTUM)
        logger.warning("SOLVER.USE_FUSED_SGD is set but apex is not importable: using torch.optim.SGD")
    return torch.optim.SGD(groups, lr=s.BASE_LR, momentum=s.MOMENTUM)


def make_lr_scheduler(cfg, optimizer):
    s = cfg.SOLVER
    return WarmupMultiStepLR(optimizer, s.STEPS, s.GAMMA, warmup_factor=s.WARMUP_FACTOR,
                             warmup_iters=s.WARMUP_ITERS, warmup_method=s.WARMUP_METHOD)
