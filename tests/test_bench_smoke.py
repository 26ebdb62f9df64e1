import json
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

from helpers import REPO, bench_module
from maskrcnn_benchmark.cli.gpu_check import SMALL_ROI_BUDGET  # 16 mask-head rows per image: every form still runs


@pytest.mark.slow
def test_model_step_bench_prints_every_form_with_the_eager_ratio():
    out = subprocess.run(
        [sys.executable, "bench/model_step.py", "--device", "cpu", "--height", "96", "--width", "128",
         "--batch", "1", "--iters", "1", "--warmup", "0", "--compile-backend", "eager", *SMALL_ROI_BUDGET],
        cwd=REPO, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    rows = [line for line in out.stdout.splitlines() if line.startswith("| ")]
    for name in ("eager", "static eager", "compiled (default)", "torchvision"):
        assert any(r.startswith(f"| {name} ") for r in rows), out.stdout
    assert "compiled (default): ready in" in out.stdout and "round 1:" in out.stdout
    mask_rows = {r.split("|")[1].strip(): r.split("|")[-2].strip() for r in rows}
    # the static forms' fixed rows: the sampler's positive budget (64 x 0.25) for the one image; torchvision: none
    assert mask_rows["static eager"] == mask_rows["compiled (default)"] == "16", out.stdout
    assert mask_rows["torchvision"] == "-" and 1 <= int(mask_rows["eager"]) <= 16, out.stdout
    assert out.stdout.splitlines()[0].endswith("| MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE 64"), out.stdout


@pytest.mark.slow
def test_a_compile_failure_keeps_the_other_figures():
    """An unknown compile backend (as a broken inductor install would): the compiled row is reported FAILED with
    its reason, every other model is measured, in the JSON lines make gpu-check reads."""
    out = subprocess.run(
        [sys.executable, "bench/model_step.py", "--device", "cpu", "--height", "96", "--width", "128",
         "--batch", "1", "--iters", "1", "--warmup", "0", "--models", "eager,compiled,torchvision",
         "--compile-backend", "no_such_backend", "--json", *SMALL_ROI_BUDGET],
        cwd=REPO, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    events = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    failed = [e for e in events if e["event"] == "failed"]
    assert [e["model"] for e in failed] == ["compiled (default)"] and "no_such_backend" in failed[0]["reason"]
    summary = {e["model"]: e for e in events if e["event"] == "summary"}
    assert set(summary) == {"eager", "torchvision"} and all(e["img_s"] > 0 for e in summary.values())


def test_mask_predictor_bench_prints_every_case_with_a_rounding_sized_difference(capsys):
    mask_predictor = bench_module("mask_predictor")
    assert mask_predictor.main(["--scale", "0.02", "--repeats", "1", "--threads", "1"]) == 0
    rows = [line.split("|")[1:-1] for line in capsys.readouterr().out.splitlines() if line.startswith("| ")][1:]
    assert [r[0].strip() for r in rows] == [what + (" fwd + bwd" if bwd else "")
                                          for what, _, _, _, bwd in mask_predictor.CASES]
    assert all(float(r[-1]) < 1e-4 for r in rows)  # logits: float rounding, not a different function


@pytest.mark.slow  # every op case twice (2 s): kept out of make test-fast
def test_ops_ab_bench_runs_every_case_against_another_checkout(capsys, tmp_path):
    """Against this very checkout (the same code on both sides): every case runs and gives the same results.
    Against a checkout whose NMS suppresses at another IoU: the NMS rows say NO, the others yes, and it exits 1."""
    ops_ab = bench_module("ops_ab")
    args = ["--repeats", "1", "--scale", "0.05", "--threads", "1"]
    assert ops_ab.main(["--before", REPO, *args]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")][1:]
    trained = sum("training" in case[0] for case in ops_ab.ROI_CASES)
    assert len(rows) == len(ops_ab.ROI_CASES) + trained + 2 * len(ops_ab.NMS_CASES) + 2, rows
    assert all(row.endswith("| yes |") for row in rows), rows
    for name in ("layers/roi_align.py", "layers/nms.py", "layers/mask_paste.py", "evaluation/postprocess.py"):
        copy = tmp_path / "maskrcnn_benchmark" / name
        copy.parent.mkdir(parents=True, exist_ok=True)
        source = open(os.path.join(REPO, "maskrcnn_benchmark", name)).read()
        if name == "layers/nms.py":  # the bitmask's threshold lowered: other keep sets
            source = source.replace("    thr = _threshold(iou_threshold)\n    out = ",
                                    "    thr = _threshold(iou_threshold) - 0.2\n    out = ")
            assert "- 0.2" in source
        copy.write_text(source)
    assert ops_ab.main(["--before", str(tmp_path), *args]) == 1
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")][1:]
    assert {row.endswith("| NO |") for row in rows if "NMS" in row} == {True}, rows
    assert all(row.endswith("| yes |") for row in rows if "nms" not in row.lower()), rows


@pytest.mark.slow
def test_a_model_step_killed_while_compiling_still_gives_the_eager_figure():
    """gpu-check's cap killed bench/model_step.py during a cold compile (122 s for one mode on an H200) before any
    round was printed, so not even the eager step had a figure. The uncompiled models' rounds now come first."""
    from maskrcnn_benchmark.cli import gpu_check

    code = textwrap.dedent("""
        import os, signal, sys
        sys.path.insert(0, "bench")
        sys.argv = ["model_step.py"] + sys.argv[1:]
        import model_step
        model_step.make_static_step = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)  # the cap, mid-compile
        model_step.main()
    """)
    out = subprocess.run(
        [sys.executable, "-c", code, "--device", "cpu", "--height", "96", "--width", "128", "--batch", "1",
         "--iters", "2", "--warmup", "0", "--models", "eager,compiled", "--json", *SMALL_ROI_BUDGET],
        cwd=REPO, capture_output=True, text=True, timeout=600)
    assert out.returncode == -9, out.stderr
    check = gpu_check.Check("model_step", "t", [], 1, status="NOT RUN (did not finish in its 213 s cap)",
                            output=out.stdout)
    gpu_check.read_model_step(check)
    figure = dict(check.figures).get("training step img/s, eager", "")
    assert figure.endswith("(median of the 2 rounds printed before the cap, before compiling)"), out.stdout


def test_eval_gather_bench_merges_both_forms_into_every_detection(capsys):
    eval_gather = bench_module("eval_gather")
    assert eval_gather.main(["--ranks", "3", "--images", "20", "--dets", "4", "--rounds", "1"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")][1:]
    assert [r.split("|")[1].strip() for r in rows] == ["one object per image", "each rank's images concatenated"]


def _torch_library_strings(library, *needles):
    """The lines of torch's own ``library`` that hold each of ``needles`` (the messages torch really emits)."""
    path = os.path.join(os.path.dirname(torch.__file__), "lib", library)
    if not os.path.exists(path):
        pytest.skip(f"{path} is absent (a torch build without CUDA): its warning texts cannot be read")
    data = open(path, "rb").read()
    found = []
    for needle in needles:
        at = data.find(needle.encode())
        assert at >= 0, f"{needle!r} is not in {path}"
        start, end = data.rfind(b"\0", 0, at) + 1, data.find(b"\0", at)
        found.append(data[start:end].decode())
    return found


def test_host_syncs_counts_the_sync_warning_and_not_the_modes_notice(monkeypatch):
    """torch's sync debug mode warns at each synchronizing call, and once per process, when it is turned on, that it
    "does not yet detect all synchronizing operations" (seen on an H200: counted as a sync, gpu-check failed the
    step). Both texts are read from torch's own libraries."""
    host_syncs = bench_module("host_syncs")
    (sync,) = _torch_library_strings("libc10_cuda.so", host_syncs.SYNC_WARNING)
    (notice,) = _torch_library_strings("libtorch_python.so", "Synchronization debug mode is a prototype")
    monkeypatch.chdir(REPO)  # sites are named relative to the working directory
    caught = [warnings.WarningMessage(UserWarning(text), UserWarning, os.path.join(REPO, "x.py"), line)
              for text, line in ((notice, 1), (sync, 2), (sync, 2), (sync, 3))]
    assert host_syncs.sync_warning_sites(caught) == {"x.py:2": 2, "x.py:3": 1}


@pytest.mark.slow
def test_model_step_reports_a_later_fallback_and_skipped_cuda_graphs(monkeypatch, capsys):
    """Two ways a compiled figure could be an eager or graph-less one: the compiled step falls back to eager in a
    later round (a CUDA-graph replay that fails), or inductor skips the CUDA graphs (it does so silently, counting
    it, at compile time or when it re-records in a later call). A stand-in for CompiledForward does both; the bench
    and gpu-check's report say so."""
    from torch._dynamo.utils import counters

    from maskrcnn_benchmark.cli import gpu_check
    from maskrcnn_benchmark.engine import compile as compile_module

    model_step = bench_module("model_step")

    class StandIn:
        def __init__(self, model, mode, backend="inductor", batch_size=None):
            self.model, self.failure, self.calls = model, None, 0
            self.cudagraphs = mode == "reduce-overhead"

        def __call__(self, images, targets):
            self.calls += 1
            if self.cudagraphs and self.calls in (1, 4):  # compiling at the first call, re-recording in a round
                counters["inductor"]["cudagraph_skips"] += 1  # what inductor counts for a graph on the CPU
            if not self.cudagraphs and self.calls == 4:  # 2 calls to set up, then the second round
                self.failure = RuntimeError("operation not permitted when stream is capturing")
            return self.model(images, targets)

    monkeypatch.setattr(compile_module, "CompiledForward", StandIn)
    assert model_step.main(["--device", "cpu", "--height", "96", "--width", "128", "--batch", "1", "--iters", "3",
                            "--warmup", "0", "--models", "compiled", "--compile-mode", "reduce-overhead,default",
                            "--json", *SMALL_ROI_BUDGET]) == 0
    output = capsys.readouterr().out
    events = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    setup = {e["model"]: e for e in events if e["event"] == "setup"}
    assert setup["compiled (reduce-overhead)"]["cudagraph_skips"] == 1
    assert setup["compiled (default)"]["cudagraph_skips"] is None
    summary = {e["model"]: e for e in events if e["event"] == "summary"}
    assert set(summary) == {"compiled (reduce-overhead)"}
    assert summary["compiled (reduce-overhead)"]["cudagraph_skips"] == 2  # the one in a round too
    check = gpu_check.Check("model_step", "t", [], 1, status="passed", output=output)
    gpu_check.read_model_step(check)
    figures = dict(check.figures)
    assert figures["CUDA graphs, compiled (reduce-overhead)"].startswith("inductor counted 2 skip(s) in all its")
    assert figures["compiled (default)"].startswith("FAILED (RuntimeError: compile failed, fell back to eager")
    assert "training step img/s, compiled (default)" not in figures


def test_model_step_gives_its_cudnn_setting_to_every_process(monkeypatch):
    """The baseline worker and the memory runs are processes of their own: each gets the bench's cuDNN setting
    (the autotuner's workspaces count in a peak), or the figures beside each other were taken two ways."""
    import argparse
    import io

    model_step = bench_module("model_step")
    commands = []

    class Process:
        def __init__(self, cmd, **kwargs):
            commands.append(cmd)
            self.stdout = io.StringIO("ready\n")

    monkeypatch.setattr(model_step.subprocess, "Popen", Process)
    monkeypatch.setattr(model_step.subprocess, "run",
                        lambda cmd, **kwargs: commands.append(cmd) or subprocess.CompletedProcess(cmd, 0, "", ""))
    args = argparse.Namespace(device="cuda", height=96, width=128, batch=1, dtype="float16", nhwc=False, opts=[],
                              cudnn_benchmark=True, memory_batches="", memory_models="", models="eager",
                              compile_backend="inductor", compile_mode=None)
    model_step.Baseline(REPO, args)
    model_step.memory_alone(args, model_step.Out(True))
    assert len(commands) == 2 and all("--cudnn-benchmark" in cmd for cmd in commands), commands
    args.cudnn_benchmark = False
    commands.clear()
    model_step.Baseline(REPO, args)
    model_step.memory_alone(args, model_step.Out(True))
    assert len(commands) == 2 and not any("--cudnn-benchmark" in cmd for cmd in commands), commands


def test_the_bench_pads_polygons_as_a_run_in_its_mode():
    """The bench's compiled (reduce-overhead) step on CUDA took the least polygon padding while a run in that mode
    pads to the CUDA-graph floors: its figure left out that cost."""
    import argparse

    from maskrcnn_benchmark.synthetic.batch import synthetic_batch

    model_step = bench_module("model_step")
    args = argparse.Namespace(height=64, width=96, batch=1, nhwc=False, compile_backend="inductor",
                              opts=["MODEL.DEVICE", "cuda"])  # the config a CUDA bench builds; the batch stays here
    cpu = torch.device("cpu")
    images, targets, _ = synthetic_batch(1, 64, 96, 81)
    shapes = {}
    for mode in (None, "default", "reduce-overhead"):
        _, _, batch = model_step._static_inputs(args, model_step._cfg(args, cpu), cpu, images, targets, mode)
        shapes[mode] = (batch.poly_vertices.shape[1], batch.poly_parts.shape[1])
    assert shapes["reduce-overhead"] == (256, 8)
    assert shapes[None] == shapes["default"] != (256, 8)


@pytest.mark.slow
def test_graph_breaks_bench_runs_to_its_last_line():
    """bench/graph_breaks.py at a small size, with the tests' small model (KEY VALUE overrides): the table and the
    last line ``graph breaks: N (G graphs)``, 0 for the static step. (It had stopped at its last line with a
    NameError: an import removed with a sys.path change.)"""
    from helpers import SMALL_OVERRIDES

    out = subprocess.run(
        [sys.executable, "bench/graph_breaks.py", "--no-torchvision", "--size", "64x96",
         *[str(v) for v in SMALL_OVERRIDES], *SMALL_ROI_BUDGET],
        cwd=REPO, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "| maskrcnn_benchmark (ours, static step)" in out.stdout
    assert out.stdout.splitlines()[-1] == "graph breaks: 0 (1 graphs)", out.stdout


def test_coco_eval_bench_tells_a_class_scored_on_one_side_only():
    """A per-class AP that is NaN on one side only (a class without ground truth there) or a class missing from one
    side was no difference (``max(0, nan)`` is 0), and the bench printed "identical: yes"."""
    coco_eval = bench_module("coco_eval")
    stats = {k: 0.5 for k in coco_eval.STAT_NAMES}

    def scores(per_class):
        return {t: {"stats": dict(stats), "per_class": dict(per_class)} for t in ("bbox", "segm")}

    ref = scores({"circle": float("nan"), "square": 0.25})
    ref_stats, ref_per_class = {t: ref[t]["stats"] for t in ref}, {t: ref[t]["per_class"] for t in ref}
    assert coco_eval.largest_difference(scores({"circle": float("nan"), "square": 0.25}), ref_stats,
                                        ref_per_class) == 0.0
    assert coco_eval.largest_difference(scores({"circle": 0.0, "square": 0.25}), ref_stats, ref_per_class) == \
        float("inf")
    assert coco_eval.largest_difference(scores({"square": 0.25}), ref_stats, ref_per_class) == float("inf")
    assert coco_eval.largest_difference(scores({"circle": float("nan"), "square": 0.2}), ref_stats,
                                        ref_per_class) == pytest.approx(0.05)


def test_input_bench_counts_the_images_of_a_partial_last_batch(monkeypatch):
    """The host rates were batches per second x 8: with 100 images the last batch holds 4, counted as 8."""
    input_pipeline = bench_module("input_pipeline")
    clock = iter(range(100))
    monkeypatch.setattr(input_pipeline.time, "perf_counter", lambda: float(next(clock)))
    assert input_pipeline._rate(lambda batch: None, [[0] * 8, [0] * 4], size=len) == 12.0
