"""`make demo` end to end: synthetic data, CPU training to the MLPerf targets, compliance checker SUCCESS."""
import os
import re
import subprocess

import pytest

from helpers import REPO


@pytest.mark.slow
def test_demo_reaches_target_and_checker_succeeds(tmp_path):
    env = dict(os.environ, DEMO_DIR=str(tmp_path / "demo"), DATADIR=str(tmp_path / "synthetic"),
               PYTHON=os.path.join(REPO, ".venv", "bin", "python"))
    r = subprocess.run(["bash", os.path.join(REPO, "tools", "demo.sh")], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=1800)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    m = re.search(r"time to train: ([\d.]+) s .*reached box AP >= 0\.377 and mask AP >= 0\.339 at epoch (\d+)", out)
    assert m, out[-4000:]
    assert re.search(r"^RESULT,OBJECT_DETECTION,,\d+,", out, re.M)
    assert "SUCCESS" in out.split("MLPerf compliance checker")[-1]
    assert os.path.exists(tmp_path / "demo" / "result_0.txt")
