"""The automatic values of a run's config (engine/resolve.py) follow what was measured on each device."""
from helpers import r50_cfg
from maskrcnn_benchmark.engine.resolve import resolve


def test_cuda_runs_the_eager_step_unless_compile_is_asked_for():
    """Measured (docs/benchmarks.md): the eager step is the fastest on CUDA (H100, torch 2.11, 800x1333, 12 images,
    float16, channels_last: eager 85.3 img/s, the compiled static step 70.3 with CUDA graphs and 54.1 without; an
    H200 before: 96.8, 82.0, 59.6), so CUDA runs eagerly unless COMPILE is asked for. Asked for, it compiles with
    CUDA graphs (reduce-overhead), which a 100-iteration training run on the H100 ran without a fallback."""
    cfg = resolve(r50_cfg(), "cuda")
    assert cfg.COMPILE is False and cfg.DATALOADER.HYBRID is True
    assert cfg.COMPILE_MODE == "default"  # not compiling: nothing records CUDA graphs
    asked = r50_cfg("COMPILE", True)
    assert resolve(asked, "cuda").COMPILE_MODE == "reduce-overhead"
    # several GPUs with CUDA graphs have not run (a failed capture of the backward ends such a run): without them
    assert resolve(asked, "cuda", world_size=8).COMPILE_MODE == "default"
    assert resolve(r50_cfg("COMPILE", True, "COMPILE_MODE", "reduce-overhead"), "cuda",
                   world_size=8).COMPILE_MODE == "reduce-overhead"  # given: kept
    assert resolve(r50_cfg("COMPILE", True, "COMPILE_BACKEND", "aot_eager"), "cuda").COMPILE_MODE == "default"
    assert resolve(r50_cfg("COMPILE", True, "COMPILE_MODE", "default"), "cuda").COMPILE_MODE == "default"  # given
    cpu = resolve(r50_cfg(), "cpu")
    assert cpu.COMPILE is False and cpu.COMPILE_MODE == "default" and cpu.DATALOADER.HYBRID is False
    assert resolve(r50_cfg("COMPILE", True), "cpu").COMPILE_MODE == "default"  # no CUDA graphs on the CPU


def test_cuda_graphs_pad_polygons_to_larger_floors():
    """CUDA graphs record one graph per distinct polygon padding of a batch (the counts are dynamic dimensions of
    the compiled step): with them, floors most batches fit in; without, the least padding. A given value stays."""
    assert resolve(r50_cfg("COMPILE", True, "COMPILE_MODE", "reduce-overhead"),
                   "cuda").DATALOADER.STATIC_POLYGON_SLOTS == (256, 8)
    assert resolve(r50_cfg("COMPILE", True), "cuda").DATALOADER.STATIC_POLYGON_SLOTS == (256, 8)  # auto: CUDA graphs
    assert resolve(r50_cfg("COMPILE", True, "COMPILE_MODE", "default"),
                   "cuda").DATALOADER.STATIC_POLYGON_SLOTS == (16, 4)
    assert resolve(r50_cfg(), "cpu").DATALOADER.STATIC_POLYGON_SLOTS == (16, 4)
    assert resolve(r50_cfg("COMPILE", True, "COMPILE_MODE", "reduce-overhead"),
                   "cpu").DATALOADER.STATIC_POLYGON_SLOTS == (16, 4)  # inductor records no CUDA graph on the CPU
    assert resolve(r50_cfg("COMPILE", True, "COMPILE_MODE", "reduce-overhead", "COMPILE_BACKEND", "aot_eager"),
                   "cuda").DATALOADER.STATIC_POLYGON_SLOTS == (16, 4)  # no code generation, no CUDA graphs
    given = r50_cfg("COMPILE", True, "COMPILE_MODE", "reduce-overhead", "DATALOADER.STATIC_POLYGON_SLOTS", (64, 4))
    assert resolve(given, "cuda").DATALOADER.STATIC_POLYGON_SLOTS == (64, 4)
