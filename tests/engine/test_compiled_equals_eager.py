"""The whole static training step compiled against the same step in eager mode: three optimizer steps from the same
weights and seed (forward, backward, fused SGD). With ``aot_eager`` (graph capture and autograd tracing, no code
generation) losses, gradients and updated weights are bitwise equal; with inductor (generated kernels) the whole
step's losses agree within 1e-2 relative and the continuous parts within 1e-4. Also: a failed CUDA-graph capture
is a compile failure that falls back to the eager step, and graph partition is set explicitly for CUDA graphs."""
import gc
import logging
import weakref

import pytest
import torch

from helpers import shapes_image, small_cfg
from maskrcnn_benchmark.engine.compile import CompiledForward, precompute_anchors
from maskrcnn_benchmark.modeling.compat import target_batch
from maskrcnn_benchmark.modeling import build_detection_model
from maskrcnn_benchmark.solver import make_optimizer
from maskrcnn_benchmark.structures import to_image_list

SIZE = (96, 128)


def _batch(seed=0):
    gen = torch.Generator().manual_seed(seed)
    images, targets = [], []
    for i in range(2):
        img, t = shapes_image(128, 96)
        images.append(img + torch.randn(img.shape, generator=gen) * (5 + i))
        targets.append(t)
    return to_image_list(images, 32, fixed_sizes=[SIZE]), target_batch(targets, max_gt=96)


def _steps(backend, steps=3):
    """Losses, gradients and weights after ``steps`` optimizer steps; ``backend`` None: eager."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    cfg = small_cfg("SOLVER.BASE_LR", 0.01)
    model = build_detection_model(cfg).train()
    precompute_anchors(model, [SIZE], torch.device("cpu"))
    optimizer = make_optimizer(cfg, model, fused=True)
    forward = model if backend is None else CompiledForward(model, "default", backend, batch_size=2)
    torch.manual_seed(1)  # the samplers' draws: the same in both runs
    losses, grads = [], []
    for step in range(steps):
        images, targets = _batch(step)
        loss_dict = forward(images, targets)
        assert getattr(forward, "failure", None) is None, forward.failure
        optimizer.zero_grad(set_to_none=True)
        sum(loss_dict.values()).backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
        optimizer.step()
        losses.append({k: v.detach().clone() for k, v in loss_dict.items()})
    weights = {n: p.detach().clone() for n, p in model.named_parameters()}
    torch._dynamo.reset()
    return losses, grads, weights


@pytest.fixture(scope="module")
def eager():
    return _steps(None)


@pytest.mark.slow  # traces the step with dynamo and AOTAutograd (about a minute on 2 cores)
def test_aot_eager_step_is_bitwise_the_eager_step(eager):
    losses, grads, weights = _steps("aot_eager")
    for step, (a, b) in enumerate(zip(losses, eager[0])):
        assert a.keys() == b.keys()
        for k in a:
            assert torch.equal(a[k], b[k]), (step, k, float(a[k]), float(b[k]))
    for step, (a, b) in enumerate(zip(grads, eager[1])):
        assert a.keys() == b.keys()
        for n in a:
            assert torch.equal(a[n], b[n]), (step, n)
    for n in weights:
        assert torch.equal(weights[n], eager[2][n]), n


@pytest.mark.slow  # inductor generates and compiles C++ for the whole step (a few minutes on 2 cores)
def test_inductor_step_agrees_with_the_eager_step(eager):
    """Inductor's kernels round differently in the last bits; a last-bit difference can flip a discrete decision
    (an IoU at a threshold, a tie among low-quality matches) and with it the samples, so the whole step's losses
    are bounded at 1e-2 relative. The samplers draw from the eager generator (``fallback_random``): inductor's
    own random stream would draw other, equally valid samples, a difference of another kind than rounding."""
    from torch._inductor import config

    config.fallback_random = True
    try:
        losses, _, _ = _steps("inductor", steps=3)
    finally:
        config.fallback_random = False
    for step, (a, b) in enumerate(zip(losses, eager[0])):
        for k in a:
            ref = float(b[k])
            assert abs(float(a[k]) - ref) <= 1e-2 * max(abs(ref), 1e-3), (step, k, float(a[k]), ref)


@pytest.mark.slow
def test_inductor_continuous_parts_within_1e4():
    """The parts with no discrete decision, compiled with inductor: backbone + FPN + RPN head on the batch, and the
    box and mask heads on fixed ROIs, within 1e-4 of eager (relative to each output's scale)."""
    torch.manual_seed(0)
    model = build_detection_model(small_cfg()).train()
    images, _ = _batch()

    def trunk(x):
        features = model.backbone(x)
        logits, deltas = model.rpn.head(features)
        return features, logits, deltas

    rois = torch.tensor([[0, 10.0, 20.0, 60.0, 70.0], [1, 0.0, 0.0, 127.0, 95.0], [0, 30.0, 10.0, 90.0, 50.0]])

    def heads(features):
        box = model.roi_heads.box.predictor(model.roi_heads.box.feature_extractor(features, rois))
        mask = model.roi_heads.mask.predictor(model.roi_heads.mask.feature_extractor(features, rois))
        return box, mask

    torch._dynamo.reset()
    eager_out = trunk(images.tensors)
    compiled_out = torch.compile(trunk, backend="inductor", dynamic=False)(images.tensors)
    features = [f.detach() for f in eager_out[0]]
    eager_heads = heads(features)
    compiled_heads = torch.compile(heads, backend="inductor", dynamic=False)(features)
    torch._dynamo.reset()
    flat = lambda out: [t for part in out for t in (part if isinstance(part, (list, tuple)) else [part])]  # noqa
    for a, b in zip(flat(compiled_out) + flat(compiled_heads), flat(eager_out) + flat(eager_heads)):
        scale = float(b.abs().max()) or 1.0
        assert float((a - b).abs().max()) <= 1e-4 * scale


CUDA_GRAPH_ERRORS = [
    "CUDA error: operation not permitted when stream is capturing",
    # what the static R-50 step raised under reduce-overhead on an H200 (torch 2.11), while its graphs were set up
    "Error: accessing tensor output of CUDAGraphs that has been overwritten by a subsequent run. Stack trace: File "
    "\"maskrcnn_benchmark/modeling/detector/generalized_rcnn.py\", line 38, in forward"]


def _replaced_capture_error():
    """A real capture failure: torch.cuda.graph's exit ends the capture, and cudaStreamEndCapture's own error
    replaces the op's, which survives only as its __context__."""
    try:
        raise RuntimeError("CUDA error: operation not permitted when stream is capturing")
    except RuntimeError:  # the graph's __exit__, ending the capture
        raise RuntimeError("CUDA error: unspecified launch failure\nCUDA kernel errors ...")


def _raising(message):
    def raise_it():
        raise RuntimeError(message + "\nCUDA kernel errors ...")
    return raise_it


@pytest.mark.parametrize("fail,shown", [(_raising(m), m) for m in CUDA_GRAPH_ERRORS] + [
    (_replaced_capture_error, "CUDA error: unspecified launch failure")],
    ids=["capture", "overwritten output", "capture replaced by another CUDA error"])
def test_a_failed_cuda_graph_capture_falls_back_to_eager(caplog, fail, shown):
    """The capture error of an op that syncs inside a CUDA graph ("operation not permitted when stream is
    capturing"), or CUDA-graph trees refusing an output a later replay overwrote, is a compile failure: one
    warning, then the eager step, the same losses. Also when the capture's error is only the context of the one
    raised (only the outer message was read: the run failed)."""
    torch.manual_seed(0)
    model = build_detection_model(small_cfg()).train()
    forward = CompiledForward(model, "default", "eager", batch_size=2)
    forward.compiled = lambda *args, **kwargs: fail()
    images, targets = _batch()
    with caplog.at_level(logging.WARNING):
        torch.manual_seed(3)
        fell_back = forward(images, targets)
        torch.manual_seed(3)
        again = forward(images, targets)
    torch.manual_seed(3)
    direct = model(images, targets)
    assert forward.failure is not None
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        f"torch.compile failed (RuntimeError: {shown}): the run continues with the eager model"]
    for k in direct:
        assert torch.equal(fell_back[k], direct[k]) and torch.equal(again[k], direct[k])


def test_an_error_of_the_step_itself_is_not_a_compile_failure():
    """A CUDA error not raised while a capture failed is the step's: raised, not hidden by a fallback."""
    forward = CompiledForward(build_detection_model(small_cfg()).train(), "default", "eager", batch_size=2)
    forward.compiled = lambda *a, **k: _raising("CUDA error: unspecified launch failure")()
    with pytest.raises(RuntimeError, match="unspecified launch failure"):
        forward(*_batch())
    assert forward.failure is None


class _Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(3))

    def forward(self, images, targets):
        return {"loss": (self.w * images).sum()}


def test_a_stop_signal_that_lands_in_the_compiler_stops_the_run():
    """SIGTERM (a Slurm time limit, scancel) during the minutes of the warm-up's compile raised Stopped inside
    dynamo or inductor, which wrapped it (BackendCompilerFailed, InductorError): the run took it for a compile
    failure, warned, went on eagerly, and ignored every later stop signal (its handler had set them aside). The
    Stopped is raised, from the forward and from the backward."""
    import signal

    from torch._inductor.exc import InductorError

    from maskrcnn_benchmark.utils.signals import Stopped

    def stopped_while_compiling(gm, example_inputs):
        raise Stopped(signal.SIGTERM)

    torch._dynamo.reset()
    forward = CompiledForward(_Tiny(), "default", "eager")
    forward.compiled = torch.compile(forward.model, backend=stopped_while_compiling)
    with pytest.raises(Stopped):
        forward(torch.ones(3), [None])
    assert forward.failure is None
    torch._dynamo.reset()
    forward = CompiledForward(_Tiny(), "default", "eager")
    forward.last_call_compiled = True
    with pytest.raises(Stopped):
        forward.fail_backward(InductorError(Stopped(signal.SIGTERM), ""))
    assert forward.failure is None


def test_an_error_of_the_step_itself_is_not_swallowed():
    torch.manual_seed(0)
    model = build_detection_model(small_cfg()).train()
    forward = CompiledForward(model, "default", "eager", batch_size=2)

    def bad_target(*args, **kwargs):
        raise RuntimeError("shape mismatch in a target")

    forward.compiled = bad_target
    with pytest.raises(RuntimeError, match="shape mismatch"):
        forward(*_batch())


@pytest.fixture
def inductor_config():
    """Inductor's config, its graph_partition restored after the test to what it was (torch's default is on).
    Not pytest's monkeypatch: its undo deletes a module attribute it did not find in the module's __dict__, and
    torch's config module then hides the key, so the next compile fails with "graph_partition does not exist"."""
    from torch._inductor import config

    if not hasattr(config, "graph_partition"):
        yield config
        return
    saved = config.graph_partition
    try:
        yield config
    finally:
        config.graph_partition = saved


def test_graph_partition_is_set_for_cuda_graphs(inductor_config):
    if not hasattr(inductor_config, "graph_partition"):
        pytest.skip(f"torch {torch.__version__} has no inductor graph partition")
    inductor_config.graph_partition = False
    CompiledForward(torch.nn.Linear(2, 2), "reduce-overhead", "inductor")  # compiles nothing until called
    assert inductor_config.graph_partition is True


class _Backward(torch.autograd.Function):
    """The identity; its backward, the first node of the loss's backward, records whether the parameters came in
    with gradients (a CUDA-graph replay's gradient outputs are invalid once the next call has begun, so nothing
    may accumulate into them) and raises a CUDA-graph capture error when told to."""

    @staticmethod
    def forward(ctx, x, params, log, fail):
        ctx.params, ctx.log, ctx.fail = params, log, fail
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        ctx.log.append(all(p.grad is None for p in ctx.params))
        if ctx.fail:
            raise RuntimeError("operation not permitted when stream is capturing\nCUDA kernel errors ...")
        return grad, None, None, None


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_warm_up_records_cuda_graphs_before_the_clock_and_survives_a_backward_capture_error(mode, caplog,
                                                                                            monkeypatch,
                                                                                            inductor_config):
    """torch's CUDA-graph trees run a compiled function's first call as a warm-up and record its graphs at the
    second: with CUDA graphs the warm-up calls the compiled step twice per image size, so the recording happens
    before run_start (once in the default mode), each backward starting without gradients, as the trainer's
    does. A capture error raised by the backward (outside the compiled call; here at the call that records) is
    a compile failure too: one warning, and the remaining calls run eagerly, as many as the compiled ones would
    have been (with several ranks, the same all-reduces on every rank)."""
    model = build_detection_model(small_cfg()).train()
    params = [p for p in model.parameters() if p.requires_grad]
    forward = CompiledForward(model, mode, "inductor", batch_size=2)
    sizes = [(96, 128), (128, 96), (128, 128)]
    repeats = 2 if mode == "reduce-overhead" else 1
    fail_at = repeats  # the call that records the first size's graphs (the default mode: its only call)
    calls, eager_calls, clean_backward = [], [], []
    step = model.forward

    def compiled(images, targets):
        calls.append(tuple(images.tensors.shape[-2:]))
        losses = step(images, targets)
        return {k: _Backward.apply(v, params, clean_backward, len(calls) == fail_at and k == "loss_mask")
                for k, v in losses.items()}

    def eager(images, targets):
        eager_calls.append(tuple(images.tensors.shape[-2:]))
        return step(images, targets)

    forward.compiled = compiled
    monkeypatch.setattr(model, "forward", eager)
    with caplog.at_level(logging.WARNING):
        forward.warm_up(sizes, 2, torch.device("cpu"), max_gt=4)
    assert calls == [sizes[0]] * repeats
    assert eager_calls == [s for s in sizes[1:] for _ in range(repeats)]
    assert clean_backward and all(clean_backward)
    assert forward.failure is not None
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        "torch.compile failed (RuntimeError: operation not permitted when stream is capturing): the run continues "
        "with the eager model"]
    assert all(p.grad is None for p in model.parameters())


@pytest.mark.slow
def test_warm_up_compiles_every_size_past_dynamos_recompile_limit():
    """dynamo compiles one frame for at most ``recompile_limit`` input shapes (8 by default) and runs every later
    shape eagerly with a log line only: DATALOADER.STATIC_SHAPES_PER_ORIENTATION 5 gives 10 sizes, and the last two
    would run the static step eagerly all run long. Here the limit is 2 and the warm-up has 3 sizes."""
    from torch._dynamo.utils import counters

    name = "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"
    with torch._dynamo.config.patch(**{name: 2}):  # (pytest's monkeypatch deletes a config key on undo)
        torch._dynamo.reset()
        model = build_detection_model(small_cfg()).train()
        forward = CompiledForward(model, "default", "eager", batch_size=2)
        sizes = [(96, 128), (128, 96), (128, 128)]
        before = counters["stats"]["unique_graphs"]
        forward.warm_up(sizes, 2, torch.device("cpu"), max_gt=4)
        assert forward.failure is None
        assert counters["stats"]["unique_graphs"] - before == len(sizes)
    torch._dynamo.reset()


@pytest.mark.slow
def test_warm_up_warns_when_inductor_leaves_graphs_without_cuda_graphs(caplog, inductor_config):
    """Inductor skips CUDA graphs with no error (it counts them): a run asked for reduce-overhead would train
    compiled but not graphed, and say nothing. The warm-up warns once with the count."""
    from torch._dynamo.utils import counters

    model = build_detection_model(small_cfg()).train()
    forward = CompiledForward(model, "reduce-overhead", "inductor", batch_size=2)

    def compiled(images, targets):
        counters["inductor"]["cudagraph_skips"] += 1  # as inductor does for a graph with a CPU tensor in it
        return model(images, targets)

    forward.compiled = compiled
    with caplog.at_level(logging.WARNING):
        forward.warm_up([(96, 128)], 2, torch.device("cpu"), max_gt=4)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and warnings[0].startswith("CUDA graphs: inductor left 2 compiled graph(s) without")


@pytest.mark.parametrize("ranks", [1, 2])
def test_a_backward_capture_error_on_the_clock_reruns_the_step_eagerly(ranks, caplog, monkeypatch):
    """A batch shape the warm-up did not record is recorded on the clock; its backward's capture error escaped the
    trainer (the fallback covered the forward and the warm-up only) and ended the run. In a single process it is
    the compile failure now (one warning) and the step runs again eagerly, its update made; with several ranks the
    others wait in that backward's all-reduces, so the error ends the run."""
    from maskrcnn_benchmark.engine import compile as compile_module
    from maskrcnn_benchmark.engine.trainer import Trainer
    from maskrcnn_benchmark.solver import make_lr_scheduler

    monkeypatch.setattr(compile_module.comm, "get_world_size", lambda: ranks)
    cfg = small_cfg()
    model = build_detection_model(cfg).train()
    params = [p for p in model.parameters() if p.requires_grad]
    forward = CompiledForward(model, "reduce-overhead", "inductor", batch_size=2)
    step, eager_calls, failed_attempt = model.forward, [], []

    def compiled(images, targets):  # keeps a weak reference to a tensor of the failed attempt, to see it freed
        losses = {k: _Backward.apply(v, params, [], k == "loss_mask") for k, v in step(images, targets).items()}
        failed_attempt.append(weakref.ref(losses["loss_mask"]))
        return losses

    def eager(images, targets):
        gc.collect()
        # the rerun starts once the failed attempt's graph is gone (the error's frames held it: twice the memory)
        eager_calls.append(all(ref() is None for ref in failed_attempt))
        return step(images, targets)

    forward.compiled = compiled
    monkeypatch.setattr(model, "forward", eager)
    optimizer = make_optimizer(cfg, model, fused=True)
    trainer = Trainer(model, optimizer, make_lr_scheduler(cfg, optimizer), None, torch.device("cpu"), 1, 100,
                      forward=forward)
    images, targets = _batch()
    before = [p.detach().clone() for p in params]
    if ranks > 1:
        with pytest.raises(RuntimeError, match="operation not permitted when stream is capturing"):
            trainer.run_step(images, targets)
        assert forward.failure is None and not eager_calls
        return
    with caplog.at_level(logging.WARNING):
        trainer.run_step(images, targets)
    assert forward.failure is not None and eager_calls == [True]
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        "torch.compile failed (RuntimeError: operation not permitted when stream is capturing): the run continues "
        "with the eager model"]
    assert any(not torch.equal(p, b) for p, b in zip(params, before))  # the step's update was made


def test_an_eager_batchs_capture_error_is_not_taken_for_the_compiled_steps():
    """A short batch runs eagerly: an error of its backward is the step's own, even one that reads like a capture
    error; compiling stays on and the error ends the step."""
    model = build_detection_model(small_cfg()).train()
    forward = CompiledForward(model, "reduce-overhead", "inductor", batch_size=4)  # the batches here hold 2
    forward.compiled = lambda images, targets: pytest.fail("a short batch ran the compiled step")
    images, targets = _batch()
    forward(images, targets)
    assert not forward.last_call_compiled
    error = RuntimeError("operation not permitted when stream is capturing")
    assert forward.fail_backward(error) is False and forward.failure is None
