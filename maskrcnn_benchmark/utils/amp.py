"""Mixed precision from the config's ``DTYPE``: the one place that maps it to autocast.

``float32``: no autocast. ``float16``: autocast to float16 on GPU (with a GradScaler in training); on CPU, where
autocast has no useful float16 path, bfloat16 instead. ``bfloat16``: autocast to bfloat16 (no scaler needed).
"""
import logging

import torch

logger = logging.getLogger(__name__)
_warned = set()


def autocast_dtype(device, dtype):
    """The autocast dtype for ``DTYPE`` on ``device``, or None for float32."""
    if dtype in (None, "float32", torch.float32):
        return None
    dt = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    device_type = torch.device(device).type
    if device_type == "cpu" and dt == torch.float16:
        if "cpu-fp16" not in _warned:
            _warned.add("cpu-fp16")
            logger.warning("DTYPE float16 on CPU: using bfloat16 autocast instead")
        return torch.bfloat16
    return dt


def autocast(device, dtype):
    """The autocast context of ``DTYPE`` on ``device`` (disabled for float32)."""
    device_type = torch.device(device).type
    dt = autocast_dtype(device, dtype)
    if dt is None:
        return torch.autocast(device_type, enabled=False)
    return torch.autocast(device_type, dtype=dt)


def make_grad_scaler(device, dtype):
    """The GradScaler of a run: enabled for float16 on GPU only (CPU float16 runs as bfloat16, which needs none).
    The reference's dynamic loss scaling (NVIDIA's v0.7 fp16_optimizer.py): start at 2^16, halve at an overflow,
    double after 1000 steps without one (torch's default waits 2000). Unlike the reference, whose scale stops at 1
    and skips every step that still overflows, a run whose scale falls below 1 stops (engine/trainer.py)."""
    device_type = torch.device(device).type
    return torch.amp.GradScaler(device_type, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5,
                                growth_interval=1000, enabled=dtype == "float16" and device_type == "cuda")
