import pytest
import torch

from helpers import small_cfg
from maskrcnn_benchmark.config import merge_cfg_from_list
from maskrcnn_benchmark.modeling import build_detection_model
from maskrcnn_benchmark.solver import WarmupMultiStepLR, make_lr_scheduler, make_optimizer


def _sched(method, factor, warmup=10, steps=(20, 30), base=0.1):
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=base)
    return WarmupMultiStepLR(opt, steps, 0.1, warmup_factor=factor, warmup_iters=warmup, warmup_method=method)


@pytest.mark.parametrize("method,factor,expected", [
    # iteration:             0      5      9      10    19     20     29      30
    ("constant", 0.1, [0.01, 0.01, 0.01, 0.1, 0.1, 0.01, 0.01, 0.001]),
    ("linear", 0.1, [0.01, 0.055, 0.091, 0.1, 0.1, 0.01, 0.01, 0.001]),
    ("mlperf_linear", 0.01, [0.0, 0.05, 0.09, 0.1, 0.1, 0.01, 0.01, 0.001]),
])
def test_warmup_values_at_chosen_iterations(method, factor, expected):
    s = _sched(method, factor)
    got = [s.lr_at(0.1, it) for it in (0, 5, 9, 10, 19, 20, 29, 30)]
    assert got == pytest.approx(expected)


def test_nvidia_dgx1_mlperf_linear_ramp():
    # config_DGX1.sh: BASE_LR 0.06, WARMUP_ITERS 625, WARMUP_FACTOR 0.000096 -> 0 at it 0, 0.03 at it 312.5
    s = _sched("mlperf_linear", 0.000096, warmup=625, steps=(24000, 32000), base=0.06)
    assert s.lr_at(0.06, 0) == pytest.approx(0.0, abs=1e-12)
    assert s.lr_at(0.06, 325) == pytest.approx(0.06 - 300 * 0.000096)
    assert s.lr_at(0.06, 24000) == pytest.approx(0.006)


def test_optimizer_lr_follows_reference_iteration_numbering():
    # NVIDIA v0.7 (maskrcnn_benchmark/engine/trainer.py) calls scheduler.step() after optimizer.step(): the
    # scheduler's constructor sets lr_at(0), so iteration k (1-based) trains with lr_at(k - 1).
    s = _sched("mlperf_linear", 0.01)
    opt = s.optimizer
    lrs = []
    for _ in range(12):
        lrs.append(opt.param_groups[0]["lr"])  # LR used by iteration k = 1, 2, ...
        opt.step()
        s.step()
    assert lrs == pytest.approx([s.lr_at(0.1, k - 1) for k in range(1, 13)])
    assert lrs[0] == 0.0 and lrs[10] == pytest.approx(0.1)  # iteration 1 at progress 0; 11 is the first at base


def test_bad_schedule_is_rejected():
    with pytest.raises(ValueError, match="WARMUP_METHOD"):
        _sched("cosine", 0.1)
    with pytest.raises(ValueError, match="STEPS"):
        _sched("linear", 0.1, steps=(30, 20))


def test_param_groups_bias_lr_and_decay():
    cfg = small_cfg()
    merge_cfg_from_list(cfg, ["SOLVER.BASE_LR", 0.02, "SOLVER.WEIGHT_DECAY", 1e-4])
    model = build_detection_model(cfg)
    opt = make_optimizer(cfg, model)
    weights, biases = opt.param_groups
    assert weights["lr"] == 0.02 and weights["weight_decay"] == 1e-4
    assert biases["lr"] == pytest.approx(0.04) and biases["weight_decay"] == 0
    assert all(p.requires_grad for g in opt.param_groups for p in g["params"])
    assert isinstance(make_lr_scheduler(cfg, opt), WarmupMultiStepLR)
