"""The automatic values of a run's config (engine/resolve.py) follow what was measured on each device."""
from helpers import r50_cfg
from maskrcnn_benchmark.engine.resolve import resolve


def test_cuda_runs_the_eager_step_unless_compile_is_asked_for():
    """On an H200 (torch 2.11, 800x1333, 12 images, float16, channels_last; docs/benchmarks.md) the eager step
    ran 89 img/s, the compiled static step (inductor, default mode) 66, and with CUDA graphs (reduce-overhead) the
    step failed: CUDA defaults to eager. COMPILE True without a mode compiles without CUDA graphs."""
    cfg = resolve(r50_cfg(), "cuda")
    assert cfg.COMPILE is False and cfg.DATALOADER.HYBRID is True
    asked = r50_cfg("COMPILE", True)
    assert resolve(asked, "cuda").COMPILE_MODE == "default"
    cpu = resolve(r50_cfg(), "cpu")
    assert cpu.COMPILE is False and cpu.COMPILE_MODE == "default" and cpu.DATALOADER.HYBRID is False
