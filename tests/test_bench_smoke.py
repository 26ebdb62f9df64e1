import subprocess
import pytest
import sys

from helpers import REPO


@pytest.mark.slow
def test_model_step_bench_prints_table_with_torchvision_ratio():
    out = subprocess.run(
        [sys.executable, "bench/model_step.py", "--device", "cpu", "--height", "96", "--width", "128",
         "--batch", "1", "--iters", "1", "--warmup", "0"],
        cwd=REPO, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    for needle in ("backbone fwd", "backward", "maskrcnn_benchmark (ours)", "torchvision maskrcnn_resnet50_fpn",
                   "speed-up"):
        assert needle in out.stdout
