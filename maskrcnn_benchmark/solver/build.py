import logging

import torch

from ..utils.signals import Stopped
from .lr_scheduler import WarmupMultiStepLR

logger = logging.getLogger(__name__)


def _fused_sgd():
    try:
        from apex.optimizers import FusedSGD  # optional accelerator
    except Exception:
        return None
    return FusedSGD


def make_optimizer(cfg, model, fused=None):
    """SGD with momentum; biases get ``BIAS_LR_FACTOR`` x LR and ``WEIGHT_DECAY_BIAS`` (reference groups).

    ``fused`` (default: ``SOLVER.USE_FUSED_SGD``; a compiled run asks for it): apex's FusedSGD when apex imports
    and builds one (NGC images; not without its CUDA extensions or a GPU), else torch's fused SGD with the learning rate as a tensor on the parameters' device, so the LR
    schedule writes it in place (no host sync; 0 in the whole step: tests/utils/test_host_syncs.py,
    bench/host_syncs.py) and the gradient scaler's unscale and inf check stay on the device (torch's fused SGD takes
    them as tensors; with apex the scaler reads its inf flag once per float16 step). Unfused: torch's SGD with its
    multi-tensor ``foreach`` implementation, as before. The three compute the same update.
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
    if fused is None:
        fused = s.USE_FUSED_SGD
    if not fused or not groups:
        optimizer = torch.optim.SGD(groups, lr=s.BASE_LR, momentum=s.MOMENTUM)
        optimizer.register_load_state_dict_post_hook(_keep_own_implementation)
        return optimizer
    apex_sgd = _fused_sgd()
    if apex_sgd is not None:
        try:  # apex without its CUDA extensions imports, and its constructor raises (so it does without a GPU)
            optimizer = apex_sgd(groups, lr=s.BASE_LR, momentum=s.MOMENTUM)
        except Stopped:  # a stop signal is the run's
            raise
        except Exception as e:  # noqa: BLE001 - any failure of the optional accelerator: torch's fused SGD
            logger.warning("optimizer: apex's FusedSGD cannot be used (%s: %s); torch's fused SGD instead",
                           type(e).__name__, str(e).splitlines()[0] if str(e) else "")
        else:
            logger.info("optimizer: apex FusedSGD")
            optimizer.register_load_state_dict_post_hook(_keep_own_implementation)
            return optimizer
    device = groups[0]["params"][0].device
    for g in groups:
        g["initial_lr"] = float(g["lr"])  # the schedule's base, exact (a float32 tensor would round it)
        g["lr"] = torch.tensor(g["initial_lr"], dtype=torch.float32, device=device)
    logger.info("optimizer: torch fused SGD (apex not importable), learning rate a %s tensor", device.type)
    optimizer = torch.optim.SGD(groups, lr=groups[0]["lr"], momentum=s.MOMENTUM, fused=True)
    zero_momentum_buffers(optimizer)
    optimizer.register_load_state_dict_post_hook(_keep_own_implementation)
    optimizer.register_load_state_dict_post_hook(_lr_on_device)
    optimizer.register_load_state_dict_post_hook(zero_momentum_buffers)
    return optimizer


def _keep_own_implementation(optimizer):
    """torch's ``load_state_dict`` gives every group the saved run's settings, its ``fused``/``foreach`` flags
    included, while the optimizer object keeps its own: a fused optimizer resumed from an unfused run's checkpoint
    (``COMPILE`` or ``SOLVER.USE_FUSED_SGD`` changed, or apex present at save time only) still tells the gradient
    scaler that it unscales and skips by itself, and its groups' unfused step then refuses the scaler's arguments
    (an AssertionError at the first float16 step). The groups get this optimizer's own flags back, and an unfused
    or apex one its LR as a number (torch's fused run saves a tensor)."""
    for g in optimizer.param_groups:
        g["fused"], g["foreach"] = optimizer.defaults.get("fused"), optimizer.defaults.get("foreach")
        if not optimizer.defaults.get("fused") and isinstance(g["lr"], torch.Tensor):
            g["lr"] = float(g["lr"])


def _lr_on_device(optimizer):
    """A loaded state (of any run, fused or not) puts plain or host-tensor LRs in the groups: back to tensors on
    the parameters' device, which the fused step reads and the schedule writes in place."""
    for g in optimizer.param_groups:
        device = g["params"][0].device
        if not (isinstance(g["lr"], torch.Tensor) and g["lr"].device == device):
            g["lr"] = torch.tensor(float(g["lr"]), dtype=torch.float32, device=device)


def zero_momentum_buffers(optimizer):
    """Give every parameter a zero momentum buffer before torch's fused SGD steps (any torch fused SGD: the benches
    build their own).

    Without one, the fused step's first call allocates the buffers with ``empty_like`` and leaves their first
    value to the kernel; when the gradient scaler has found an overflow, the kernel skips the whole update (the
    scaler hands it ``found_inf`` on the device and calls ``step`` anyway: that is what keeps it sync-free), so
    the buffers keep whatever memory they got and every later step adds it into the weights. A float16 run
    overflows at its first steps by design (the scale starts at 2^16), so such a run diverged at once. With zero
    buffers the first update is ``0.9 * 0 + g = g``, the value torch's first step copies: the same weights,
    bitwise, when no step is skipped (tests/solver/test_solver.py). A loaded state without buffers (saved before
    any step) gets them too. Not with dampening (never set here): torch's first step copies ``g``, a zero buffer
    would give ``(1 - dampening) g``."""
    for g in optimizer.param_groups:
        if g["momentum"] == 0 or g.get("dampening", 0) != 0:
            continue
        for p in g["params"]:
            state = optimizer.state[p]
            if state.get("momentum_buffer") is None:
                state["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)


def make_lr_scheduler(cfg, optimizer):
    s = cfg.SOLVER
    return WarmupMultiStepLR(optimizer, s.STEPS, s.GAMMA, warmup_factor=s.WARMUP_FACTOR,
                             warmup_iters=s.WARMUP_ITERS, warmup_method=s.WARMUP_METHOD)
