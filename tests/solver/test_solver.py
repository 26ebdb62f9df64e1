import pytest
import torch

from helpers import small_cfg, uninitialised_memory_is_nan
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


def _sgd_under_a_scaler(optimizer_for, overflow=(), steps=4):
    """``steps`` SGD steps of a small two-layer model under a float16 run's GradScaler (on the CPU: the same rules,
    the scale starting at 2^16), unscaled before the step as the trainer does when it clips; the loss is made
    infinite at the iterations in ``overflow``. Returns the model, its optimizer and the final scale."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    optimizer = optimizer_for(model)
    scaler = torch.amp.GradScaler("cpu")
    data = torch.Generator().manual_seed(1)
    for i in range(1, steps + 1):
        loss = model(torch.randn(4, 8, generator=data)).square().sum()
        if i in overflow:
            loss = loss * float("inf")
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        scaler.step(optimizer)
        scaler.update()
    return model, optimizer, scaler.get_scale()


def _solver_cfg():
    cfg = small_cfg()
    merge_cfg_from_list(cfg, ["SOLVER.BASE_LR", 0.02, "SOLVER.WEIGHT_DECAY", 1e-4, "SOLVER.MOMENTUM", 0.9])
    return cfg


def test_fused_sgd_survives_the_float16_scalers_skipped_first_steps(monkeypatch):
    """A float16 run's first steps overflow (the scale starts at 2^16 and halves until the gradients fit). With
    torch's fused SGD the scaler still calls ``step`` (the skip is decided on the device), and torch's fused step
    allocated its momentum buffers with ``empty_like`` and left them unset when it skipped: every later step then
    added that memory into the weights (an H200 float16 run, 2026-11-26, and the CPU with float16 autocast
    diverged at once). ``empty_like`` is made to return NaN here, one of the contents uninitialised memory may
    have, so the test does not depend on what the allocator happens to hand out."""
    uninitialised_memory_is_nan(monkeypatch)
    cfg = _solver_cfg()
    fused, fused_opt, fused_scale = _sgd_under_a_scaler(lambda m: make_optimizer(cfg, m, fused=True), overflow={1, 2})
    # the oracle: torch's SGD unfused, which the scaler does not call at all when the gradients overflow
    plain, _, plain_scale = _sgd_under_a_scaler(lambda m: make_optimizer(cfg, m, fused=False), overflow={1, 2})
    assert fused_scale == plain_scale == 2.0 ** 14
    for group in fused_opt.param_groups:
        assert all(torch.isfinite(fused_opt.state[p]["momentum_buffer"]).all() for p in group["params"])
    # not bitwise: torch's fused kernel rounds its multiply-adds once (one float32 ulp per step, ~1e-7 here)
    for a, b in zip(fused.parameters(), plain.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_fused_sgd_with_zero_momentum_buffers_is_torchs_fused_sgd_bitwise():
    """The zero buffers change nothing when no step is skipped: against torch's own fused SGD (its first step
    copies the gradient into the buffer; ours computes 0.9 * 0 + g), the same weights bitwise."""
    cfg = _solver_cfg()
    ours, ours_opt, _ = _sgd_under_a_scaler(lambda m: make_optimizer(cfg, m, fused=True))

    def torch_fused(model):
        groups = [{"params": g["params"], "lr": g["lr"].clone(), "weight_decay": g["weight_decay"]}
                  for g in make_optimizer(cfg, model, fused=True).param_groups]
        return torch.optim.SGD(groups, lr=groups[0]["lr"], momentum=0.9, fused=True)

    theirs, _, _ = _sgd_under_a_scaler(torch_fused)
    for a, b in zip(ours.parameters(), theirs.parameters()):
        assert torch.equal(a, b)
    # a loaded state without buffers (saved before any step, here by an unfused optimizer) gets zero ones
    model = torch.nn.Linear(4, 2)
    fused = make_optimizer(cfg, model, fused=True)
    fused.load_state_dict(make_optimizer(cfg, model, fused=False).state_dict())
    assert all(torch.equal(fused.state[p]["momentum_buffer"], torch.zeros_like(p)) for p in model.parameters())


@pytest.mark.parametrize("saved_fused,resumed_fused", [(False, True), (True, False)])
def test_resuming_from_the_other_sgd_keeps_the_optimizers_own_implementation(saved_fused, resumed_fused):
    """A checkpoint's optimizer state carries its run's ``fused``/``foreach`` flags, and torch's load_state_dict
    copies them into the groups: a fused optimizer resumed from an unfused run's state then failed its first
    float16 step (the scaler hands a fused optimizer its scale and inf flag, the unfused step asserts they are
    None). After the load each optimizer steps as itself; the oracle is the same run never interrupted, in the
    resumed implementation (one float32 ulp per step apart when the implementations differ: torch's fused kernel
    rounds its multiply-adds once)."""
    cfg = _solver_cfg()

    def steps(model, optimizer, scaler, n, data):
        for _ in range(n):
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(model(torch.randn(4, 8, generator=data)).square().sum()).backward()
            scaler.step(optimizer)
            scaler.update()

    torch.manual_seed(0)
    model = torch.nn.Linear(8, 3)
    start = {k: v.clone() for k, v in model.state_dict().items()}
    saved = make_optimizer(cfg, model, fused=saved_fused)
    data = torch.Generator().manual_seed(1)
    steps(model, saved, torch.amp.GradScaler("cpu"), 2, data)
    resumed = make_optimizer(cfg, model, fused=resumed_fused)
    resumed.load_state_dict(saved.state_dict())
    assert [g["fused"] for g in resumed.param_groups] == [True if resumed_fused else None] * 2
    assert all(isinstance(g["lr"], torch.Tensor) == resumed_fused for g in resumed.param_groups)
    steps(model, resumed, torch.amp.GradScaler("cpu"), 2, data)

    oracle = torch.nn.Linear(8, 3)
    oracle.load_state_dict(start)
    data = torch.Generator().manual_seed(1)
    steps(oracle, make_optimizer(cfg, oracle, fused=resumed_fused), torch.amp.GradScaler("cpu"), 4, data)
    for a, b in zip(model.parameters(), oracle.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_apex_fused_sgd_resumed_from_torchs_fused_state_gets_its_lr_as_a_number(monkeypatch):
    """With apex importable (NGC images) make_optimizer returns apex's FusedSGD, which reads its LR as a number: a
    state saved by torch's fused SGD (no apex at save time) carries device-tensor LRs, which apex would read
    back from the device every step. A stand-in for apex's class (torch's unfused SGD: apex is not installed
    here) shows the hook."""
    import maskrcnn_benchmark.solver.build as build

    class ApexStandIn(torch.optim.SGD):
        pass

    cfg = _solver_cfg()
    model = torch.nn.Linear(4, 2)
    saved = make_optimizer(cfg, model, fused=True)  # torch's fused SGD: LR tensors
    monkeypatch.setattr(build, "_fused_sgd", lambda: ApexStandIn)
    apex = make_optimizer(cfg, model, fused=True)
    assert isinstance(apex, ApexStandIn)
    apex.load_state_dict(saved.state_dict())
    # the saved float32 values (the schedule writes the exact ones from initial_lr at its next step)
    assert [g["lr"] for g in apex.param_groups] == [float(torch.tensor(0.02)), float(torch.tensor(0.04))]
    assert all(type(g["lr"]) is float and not g["fused"] for g in apex.param_groups)


def test_an_apex_without_its_cuda_extensions_falls_back_to_torchs_fused_sgd(monkeypatch, caplog):
    """apex installed without its CUDA extensions (pip install apex, no --cuda_ext) imports, and its FusedSGD's
    constructor raises ('apex.optimizers.FusedSGD requires cuda extensions'); every compiled run asks for a fused
    optimizer, so such a run died where torch's fused SGD does the same. So did apex for a CPU run's parameters
    (its constructor makes a CUDA tensor)."""
    import logging

    import maskrcnn_benchmark.solver.build as build

    class ApexWithoutExtensions(torch.optim.SGD):
        def __init__(self, *args, **kwargs):
            raise RuntimeError("apex.optimizers.FusedSGD requires cuda extensions")

    monkeypatch.setattr(build, "_fused_sgd", lambda: ApexWithoutExtensions)
    with caplog.at_level(logging.WARNING):
        optimizer = make_optimizer(_solver_cfg(), torch.nn.Linear(4, 2), fused=True)
    assert type(optimizer) is torch.optim.SGD and optimizer.defaults["fused"]
    assert "apex's FusedSGD cannot be used (RuntimeError: apex.optimizers.FusedSGD requires cuda extensions)" \
        in caplog.text


def test_a_stop_signal_while_apex_is_tried_is_the_runs(monkeypatch):
    """The fallback took any exception of apex's constructor for apex's failure, a stop signal's too: the run
    went on training, every later stop signal already set to be ignored."""
    import maskrcnn_benchmark.solver.build as build
    from maskrcnn_benchmark.utils.signals import Stopped
    import signal

    class Interrupted(torch.optim.SGD):
        def __init__(self, *args, **kwargs):
            raise Stopped(signal.SIGTERM)

    monkeypatch.setattr(build, "_fused_sgd", lambda: Interrupted)
    with pytest.raises(Stopped):
        make_optimizer(_solver_cfg(), torch.nn.Linear(4, 2), fused=True)


def test_mlperf_linear_warmup_takes_the_same_amount_off_every_group():
    """The reference's mlperf_linear warmup subtracts ``(WARMUP_ITERS - it) * WARMUP_FACTOR`` from each group's base
    LR (NVIDIA v0.7 solver/lr_scheduler.py: ``base_lr - delta``), not a fraction of it: under the DGX A100 recipe
    the weights start at 0 and the biases (BIAS_LR_FACTOR 2, base 0.16) at 0.08. A ratio for the biases would
    train them at half the reference's LR through the warmup; NVIDIA's logs print the first group's LR only."""
    cfg = small_cfg()
    merge_cfg_from_list(cfg, ["SOLVER.BASE_LR", 0.08, "SOLVER.WARMUP_ITERS", 800, "SOLVER.WARMUP_FACTOR", 0.0001,
                              "SOLVER.WARMUP_METHOD", "mlperf_linear", "SOLVER.STEPS", (18000, 24000)])
    opt = make_optimizer(cfg, build_detection_model(cfg))
    sched = make_lr_scheduler(cfg, opt)
    seen = {}
    for it in range(1, 802):  # iteration it trains with these LRs
        if it in (1, 401, 801):
            seen[it] = [g["lr"] for g in opt.param_groups]
        opt.step()
        sched.step()
    assert seen[1] == pytest.approx([0.0, 0.08], abs=1e-12)
    assert seen[401] == pytest.approx([0.04, 0.12])
    assert seen[801] == pytest.approx([0.08, 0.16])
