"""The automatic values of a run's config (engine/resolve.py) follow what was measured on each device."""
from helpers import r50_cfg
from maskrcnn_benchmark.engine.resolve import resolve


def test_cuda_runs_the_eager_step_unless_compile_is_asked_for():
    """On an H200 (torch 2.11, 800x1333, 12 images, float16, channels_last; docs/benchmarks.md) the eager step
    ran 96.8 img/s, the compiled static step 82.0 with CUDA graphs (reduce-overhead, in the bench only) and 59.6
    without: CUDA defaults to eager. COMPILE True without a mode compiles without CUDA graphs."""
    cfg = resolve(r50_cfg(), "cuda")
    assert cfg.COMPILE is False and cfg.DATALOADER.HYBRID is True
    asked = r50_cfg("COMPILE", True)
    assert resolve(asked, "cuda").COMPILE_MODE == "default"
    cpu = resolve(r50_cfg(), "cpu")
    assert cpu.COMPILE is False and cpu.COMPILE_MODE == "default" and cpu.DATALOADER.HYBRID is False


def test_cuda_graphs_pad_polygons_to_larger_floors():
    """CUDA graphs record one graph per distinct polygon padding of a batch (the counts are dynamic dimensions of
    the compiled step): with them, floors most batches fit in; without, the least padding. A given value stays."""
    assert resolve(r50_cfg("COMPILE", True, "COMPILE_MODE", "reduce-overhead"),
                   "cuda").DATALOADER.STATIC_POLYGON_SLOTS == (256, 8)
    assert resolve(r50_cfg("COMPILE", True), "cuda").DATALOADER.STATIC_POLYGON_SLOTS == (16, 4)
    assert resolve(r50_cfg(), "cpu").DATALOADER.STATIC_POLYGON_SLOTS == (16, 4)
    assert resolve(r50_cfg("COMPILE", True, "COMPILE_MODE", "reduce-overhead"),
                   "cpu").DATALOADER.STATIC_POLYGON_SLOTS == (16, 4)  # inductor records no CUDA graph on the CPU
    assert resolve(r50_cfg("COMPILE", True, "COMPILE_MODE", "reduce-overhead", "COMPILE_BACKEND", "aot_eager"),
                   "cuda").DATALOADER.STATIC_POLYGON_SLOTS == (16, 4)  # no code generation, no CUDA graphs
    given = r50_cfg("COMPILE", True, "COMPILE_MODE", "reduce-overhead", "DATALOADER.STATIC_POLYGON_SLOTS", (64, 4))
    assert resolve(given, "cuda").DATALOADER.STATIC_POLYGON_SLOTS == (64, 4)
