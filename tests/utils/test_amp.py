"""The float16 loss scaling against the MLPerf reference's (NVIDIA's v0.7 maskrcnn_benchmark, fp16_optimizer.py:
``cur_scale = 2 ** 16``, ``scale_factor = 2``, ``scale_window = 1000``: the scale halves at an overflow and doubles
after 1000 steps without one)."""
import torch

from maskrcnn_benchmark.utils.amp import make_grad_scaler


def test_the_loss_scale_follows_the_references_dynamic_scaling(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # what the scaler checks; nothing runs on it
    scaler = make_grad_scaler("cuda", "float16")
    assert scaler.is_enabled()
    assert (scaler._init_scale, scaler._growth_factor, scaler._backoff_factor) == (2.0 ** 16, 2.0, 0.5)
    assert scaler._growth_interval == 1000  # torch's default is 2000
    assert not make_grad_scaler("cuda", "float32").is_enabled() and not make_grad_scaler("cpu", "float16").is_enabled()
