import json
import subprocess
import sys

import pytest

from helpers import REPO
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
