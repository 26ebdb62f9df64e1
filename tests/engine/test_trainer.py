"""The training loop itself, with a tiny stand-in model: LR numbering, the non-finite rules, the scaler."""
import pytest
import torch

from maskrcnn_benchmark.engine.trainer import HookBase, NonFiniteLossError, Trainer
from maskrcnn_benchmark.solver import WarmupMultiStepLR


class _Images:
    image_sizes = [(4, 4)]

    def to(self, device, non_blocking=False):
        return self


class _Model(torch.nn.Module):
    """loss = w^2, or a non-finite value at the iterations listed in ``bad``."""

    def __init__(self, bad=(), value=float("nan")):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(()))
        self.bad, self.value, self.calls = set(bad), value, 0

    def forward(self, images, targets):
        self.calls += 1
        loss = self.w ** 2
        if self.calls in self.bad:
            loss = loss * self.value
        return {"loss": loss}


class _LR(HookBase):
    def __init__(self):
        self.lrs = []

    def before_step(self):
        self.lrs.append(self.trainer.optimizer.param_groups[0]["lr"])


def _trainer(model, iters, **kw):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = WarmupMultiStepLR(opt, (6,), 0.1, warmup_factor=0.02, warmup_iters=5, warmup_method="mlperf_linear")
    data = [(_Images(), [], None)] * iters
    return Trainer(model, opt, sched, data, torch.device("cpu"), iters, 100, **kw)


def test_iteration_k_trains_with_schedule_step_k_minus_1():
    hook = _LR()
    t = _trainer(_Model(), 8, hooks=[hook])
    t.train()
    # NVIDIA v0.7: scheduler.step() after optimizer.step(); iteration k runs at schedule step k - 1. Written out
    # from NVIDIA's mlperf_linear rule (lr = base_lr - (warmup_iters - step) * warmup_factor during the warmup),
    # base LR 0.1, warmup 5 steps of 0.02, x0.1 from step 6: iteration 1 at 0, ramping to 0.1, then 0.01.
    assert hook.lrs == pytest.approx([0.0, 0.02, 0.04, 0.06, 0.08, 0.1, 0.01, 0.01], abs=1e-12)


def test_non_finite_loss_aborts_in_fp32():
    t = _trainer(_Model(bad={3}), 8)
    with pytest.raises(NonFiniteLossError, match="iteration 3"):
        t.train()


def test_fp16_skipped_step_is_not_an_abort_but_a_collapsed_scale_is():
    # float16 runs with an enabled GradScaler; on this CPU we enable one directly (the rule is the same).
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 4)
    model = _Model(bad={3}, value=float("inf"))
    t = _trainer(model, 8, scaler=scaler)
    t.train()  # iteration 3's inf gradients: step skipped, scale halved, training goes on
    assert t.iter == 8 and scaler.get_scale() == 2.0 ** 3
    assert torch.isfinite(model.w).all()  # the overflowing step was not applied
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 4)
    t = _trainer(_Model(bad=set(range(1, 20)), value=float("inf")), 20, scaler=scaler)
    with pytest.raises(NonFiniteLossError, match="loss scale fell"):
        t.train()


class _OverflowedLogit(torch.nn.Module):
    """Binary cross-entropy at a logit that overflowed float16 (inf) at the iterations in ``bad``: the loss is
    infinite, its gradient finite (sigmoid(inf) - 0 = 1 for a negative target)."""

    def __init__(self, bad):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(()))
        self.bad, self.calls = set(bad), 0

    def forward(self, images, targets):
        self.calls += 1
        logits = torch.stack((self.w, self.w + (float("inf") if self.calls in self.bad else 0.0)))
        return {"loss": torch.nn.functional.binary_cross_entropy_with_logits(logits, torch.tensor([1.0, 0.0]))}


def test_fp16_infinite_loss_with_finite_gradients_is_stepped_as_the_reference_does():
    """The scaler reads gradients, not the loss (docs/numerics.md, float16): an infinite loss whose gradients are
    finite is neither skipped nor an abort, and the weights stay finite; in float32 the same loss aborts."""
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 4)
    model = _OverflowedLogit(bad={3})
    t = _trainer(model, 6, scaler=scaler)
    t.train()
    assert t.iter == 6 and scaler.get_scale() == 2.0 ** 4  # no step was skipped
    assert torch.isfinite(model.w) and model.calls == 6
    with pytest.raises(NonFiniteLossError, match="iteration 3"):
        _trainer(_OverflowedLogit(bad={3}), 6).train()


def test_a_float16_run_as_a_gpu_runs_it_trains_through_its_skipped_first_steps(monkeypatch):
    """The GPU's float16 on the CPU (which maps DTYPE float16 to bfloat16; forced here): the real model under
    float16 autocast, the GradScaler from 2^16, torch's fused SGD (a compiled run's optimizer). Its first steps
    overflow and are skipped, by design; the run goes on with finite losses and weights that moved. Before the
    fused optimizer got zero momentum buffers, the skipped first step left them uninitialised and the weights
    went NaN a few steps later (an H200 run, and this test: ``empty_like`` returns NaN here, which uninitialised
    memory may hold, so the test does not depend on what the allocator hands out)."""
    import maskrcnn_benchmark.engine.trainer as trainer_module
    from helpers import shapes_image, small_cfg, uninitialised_memory_is_nan
    from maskrcnn_benchmark.modeling import build_detection_model
    from maskrcnn_benchmark.modeling.compat import target_batch
    from maskrcnn_benchmark.solver import make_lr_scheduler, make_optimizer
    from maskrcnn_benchmark.structures import to_image_list

    uninitialised_memory_is_nan(monkeypatch)
    monkeypatch.setattr(trainer_module, "autocast_dtype", lambda device, dtype: torch.float16)
    torch.manual_seed(0)
    cfg = small_cfg("SOLVER.BASE_LR", 0.01, "SOLVER.WARMUP_ITERS", 0)
    model = build_detection_model(cfg).train()
    start = [p.detach().clone() for p in model.parameters()]
    optimizer = make_optimizer(cfg, model, fused=True)
    img, target = shapes_image()
    batch = (to_image_list([img, img.flip(-1)], 32), target_batch([target, target.transpose(0)]), None)
    scaler = torch.amp.GradScaler("cpu")
    t = Trainer(model, optimizer, make_lr_scheduler(cfg, optimizer), [batch] * 8, torch.device("cpu"), 8, 100,
                dtype="float16", scaler=scaler, clip_grad_norm=10.0)
    t.train()
    skipped = int(torch.log2(torch.tensor(2.0 ** 16 / scaler.get_scale())))
    assert 1 <= skipped < 8, scaler.get_scale()  # some first steps overflowed, the later ones trained
    assert all(torch.isfinite(v) for v in t.storage.latest("loss").values())
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert any(not torch.equal(p, p0) for p, p0 in zip(model.parameters(), start))


def test_no_checkpoint_or_evaluation_runs_on_weights_a_non_finite_step_corrupted():
    """On CUDA the non-finite check reads its flag every 20 iterations: a NaN loss at iteration 3 put NaN into the
    weights, and the checkpoint of iteration 5 (and an epoch end's evaluation) were made of them before the check
    at 20 stopped the run. The check also runs before every checkpoint and at every epoch end."""
    from maskrcnn_benchmark.engine.hooks import CheckpointHook

    model, saved = _Model(bad={3}), []

    class Checkpointer:
        def save(self, name, **kwargs):
            saved.append((name, bool(torch.isfinite(model.w))))

    t = _trainer(model, 10, nan_check_period=20, hooks=[CheckpointHook(Checkpointer(), 5, save_final=False)])
    with pytest.raises(NonFiniteLossError, match="iteration 5"):
        t.train()
    assert saved == []
    model = _Model(bad={2})
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = WarmupMultiStepLR(opt, (6,), 0.1, warmup_factor=0.02, warmup_iters=5, warmup_method="mlperf_linear")
    t = Trainer(model, opt, sched, [(_Images(), [], None)] * 10, torch.device("cpu"), 10, 4, nan_check_period=20)
    with pytest.raises(NonFiniteLossError, match="iteration 4"):  # the epoch end (4 iterations per epoch)
        t.train()


def test_a_stop_at_the_target_stands_when_a_later_step_was_not_finite():
    """Epoch 1's scores meet the target while epoch 2 trains (background scoring); a non-finite step in between
    (on CUDA the flag is read every 20 iterations) made the loop's last check raise: run_stop aborted, exit 2, for
    a run whose log already holds the qualifying eval_accuracy of weights checked finite at their epoch end. The
    outcome stands; the final checkpoint of the later, corrupted weights is not written (one error line)."""
    from maskrcnn_benchmark.engine.hooks import CheckpointHook

    model, saved = _Model(bad={6}), []

    class Checkpointer:
        def save(self, name, **kwargs):
            saved.append(name)

    class ScoresArrive(HookBase):  # epoch 1's scores, in during epoch 2: the stop before iteration 7
        def before_step(self):
            if self.trainer.iter == 6:
                self.trainer.request_stop("target reached")

    t = _trainer(model, 12, nan_check_period=20, hooks=[ScoresArrive(), CheckpointHook(Checkpointer(), 0)])
    t.storage.iters_per_epoch = 4
    t.train()
    assert t.error is None and t.iter == 6 and saved == []


def test_the_final_checkpoint_waits_for_no_later_epochs_scores():
    """The final checkpoint is written after run_stop: it waited for the scores of epochs still being computed
    (settle) and logged their eval_accuracy after run_stop, out of the log's order. It keeps the scores known."""
    from maskrcnn_benchmark.engine.events import EpochScores
    from maskrcnn_benchmark.engine.hooks import CheckpointHook

    saved, known = [], [EpochScores(1, 0.40, 0.35)]

    class Checkpointer:
        def save(self, name, **kwargs):
            saved.append((name, kwargs["scores"]))

    class Evaluation:
        scores, failure = known, None

        def settle(self):
            raise AssertionError("waited for a later epoch's scores after run_stop")

    t = _trainer(_Model(), 3, hooks=[CheckpointHook(Checkpointer(), 0, evaluation=Evaluation())])
    t.train()
    assert saved == [("model_final", [[1, 0.40, 0.35]])]


def test_the_last_iteration_is_checked_before_the_hooks_evaluate_it():
    """PER_EPOCH_EVAL False evaluates once, after the last iteration, which is neither a multiple of the check's
    period nor an epoch end: a NaN in the last steps on CUDA was inferred from and its eval_accuracy logged,
    and only then did the loop's last check abort the run."""
    model, seen = _Model(bad={8}), []

    class EvaluateAtTheEnd(HookBase):
        def after_step(self):
            if self.trainer.iter >= self.trainer.max_iter:
                seen.append(bool(torch.isfinite(model.w)))

    t = _trainer(model, 10, nan_check_period=20, hooks=[EvaluateAtTheEnd()])
    with pytest.raises(NonFiniteLossError, match="iteration 10"):
        t.train()
    assert seen == []


def test_a_warning_raised_in_the_step_is_shown_once_not_every_iteration():
    """The step silenced one torch warning with warnings.catch_warnings() at every iteration; entering it resets
    Python's record of the warnings already shown, so any warning of the model, autocast or torch printed again at
    every iteration of the run. Only the schedule's first step can raise the silenced one."""
    import warnings

    class Warns(_Model):
        def forward(self, images, targets):
            warnings.warn("a note from the model", UserWarning)
            return super().forward(images, targets)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        _trainer(Warns(), 5).train()
    assert [str(w.message) for w in caught].count("a note from the model") == 1


def test_a_resumed_run_draws_from_the_seed_it_logs():
    """Resumed without --seed, the run takes the checkpoint's seed, logs it (ml.seed, the log line) and gives it
    to the data loader; its processes had been seeded with the fresh random seed drawn before, and where the
    checkpoint's random states are not restored (another world size) every draw followed a seed in no log."""
    from helpers import small_cfg
    from maskrcnn_benchmark.engine.run import MLPerfRun, RunOptions, process_seed

    class Resumes:
        def resume(self, path):
            return {"iteration": 2, "seed": 5}

    torch.manual_seed(1234)  # the fresh seed's seeding
    run = MLPerfRun(small_cfg(), RunOptions(resume="model_0000002.pth"), rank=0)
    assert run._load_weights(Resumes(), 1234)[:2] == (2, 5)
    assert torch.initial_seed() == process_seed(5, 0)


def test_every_hook_closes_when_a_hook_fails_before_or_after_training():
    """HookBase promises after_train "also when training failed": a hook failing in before_train (a resumed run's
    re-evaluation, stopped) skipped every after_train (the profiler, the epoch marks, the stop decision). And a
    hook failing in after_train (the stop hook's final decision: evaluation failed, a rank lost) left the error
    unset for the hooks after it: the final checkpoint was written, its collectives waiting on a lost rank."""
    closed, saw = [], []

    class Fails(HookBase):
        def __init__(self, where):
            self.where = where

        def before_train(self):
            if self.where == "before":
                raise RuntimeError("before_train failed")

        def after_train(self):
            closed.append("fails")
            if self.where == "after":
                raise RuntimeError("after_train failed")

    class Records(HookBase):
        def after_train(self):
            closed.append("records")
            saw.append(self.trainer.error)

    for where in ("before", "after"):
        closed.clear(), saw.clear()
        t = _trainer(_Model(), 3, hooks=[Fails(where), Records()])
        with pytest.raises(RuntimeError, match=f"{where}_train failed"):
            t.train()
        assert closed == ["fails", "records"], where
        assert isinstance(saw[0], RuntimeError) and str(saw[0]) == f"{where}_train failed"


def test_the_metrics_line_says_the_time_left(caplog):
    """The reference's metrics line says the time left (eta) and its peak memory; this one said neither, so a
    run's end was the user's arithmetic. The time left is MAX_ITER's at the run's mean time per iteration."""
    import logging
    import re

    from maskrcnn_benchmark.engine.hooks import MetricsHook

    t = _trainer(_Model(), 4, hooks=[MetricsHook(2, reduce=False)])
    with caplog.at_level(logging.INFO, logger="maskrcnn_benchmark.engine.hooks"):
        t.train()
    lines = [r.getMessage() for r in caplog.records if "images/s:" in r.getMessage()]
    assert [int(re.search(r"iter: (\d+)", ln).group(1)) for ln in lines] == [2, 4]
    assert re.search(r"eta: 0:00:0\d$", lines[0]) and lines[1].endswith("eta: 0:00:00"), lines
    assert "max mem" not in lines[0]  # the CPU: no allocator counter


def test_a_stop_signal_while_the_profile_is_written_is_the_runs():
    """The profiler hook reports a trace it cannot write and fails nothing; a stop signal landing while it writes
    is not such a failure (it was logged as one, and the run went on with every later signal ignored)."""
    import signal

    from maskrcnn_benchmark.engine.hooks import ProfilerHook
    from maskrcnn_benchmark.utils.signals import Stopped

    hook = ProfilerHook()

    class Writing:
        def step(self, it):
            pass

        def close(self):
            raise Stopped(signal.SIGTERM)

    hook.profiler = Writing()
    with pytest.raises(Stopped):
        _trainer(_Model(), 2, hooks=[hook]).train()


def test_an_mlperf_epoch_has_the_references_iterations_at_every_recipe_batch():
    """ceil(images / batch) here, images // batch + 1 in code derived from NVIDIA's: equal on COCO 2017's 117,266
    training images at every recipe batch (docs/numerics.md), different only where a batch divides the set."""
    from maskrcnn_benchmark.engine.trainer import iterations_per_epoch

    for batch in (48, 64, 96, 128, 256, 272):
        assert iterations_per_epoch(117266, batch) == 117266 // batch + 1
    assert iterations_per_epoch(600, 4) == 150  # the synthetic demo's
