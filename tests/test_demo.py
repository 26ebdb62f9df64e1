"""`make demo` end to end: synthetic data, CPU training to the MLPerf targets, compliance checker SUCCESS."""
import os
import re
import signal

import pytest

from helpers import REPO
from live_runs import Run, kill_scorer, mllog_events, scorer_pid, wait_for_event, wait_until_idle


@pytest.mark.slow  # about 5 minutes in make test (the one run of the suite that trains the demo to its target)
def test_demo_reaches_target_and_checker_succeeds_even_when_its_scorer_dies(tmp_path):
    """``tools/demo.sh`` (what ``make demo`` runs) reaches the targets and the compliance checker says SUCCESS,
    although the same run also serves the check that a dead scoring process costs nothing: the COCO scorer is
    killed twice while idle, once during epoch 2's evaluation (stopped after epoch 1, killed once epoch 2's
    evaluation has begun: the trainer finds it dead when it hands epoch 2 over, restarts it and sends epoch 2 to the
    new one, a death that costs epoch 2 none of its restarts) and once between evaluations (noticed at the next
    iteration, restarted); no epoch's scores are lost. A death while scoring an epoch: tests/evaluation."""
    env = dict(DEMO_DIR=str(tmp_path / "demo"), DEMO_DATADIR=str(tmp_path / "synthetic"),
               DATADIR="/nonexistent/real-coco",  # exported for real COCO: not the demo's
               PYTHON=os.path.join(REPO, ".venv", "bin", "python"))
    # the OpenMP threads as the suite sets them (one per program when two pytest workers share the cores)
    run = Run(["bash", os.path.join(REPO, "tools", "demo.sh")], REPO, env=env, threads=None)
    try:
        wait_for_event(run, "eval_accuracy", 1)  # epoch 1 scored: the scorer is idle
        os.kill(scorer_pid(run.proc.pid), signal.SIGSTOP)
        wait_for_event(run, "eval_start", 2)
        kill_scorer(run)                                # dies before it is handed epoch 2
        wait_for_event(run, "eval_accuracy", 2, timeout=300)
        wait_until_idle(run)
        kill_scorer(run)                                # dies while idle
        code, stdout, stderr = run.finish(timeout=1800)
    finally:
        if run.proc.poll() is None:
            os.killpg(run.proc.pid, signal.SIGKILL)  # its session: the launcher, the trainer, a stopped scorer
    out = stdout + stderr
    assert code == 0, out[-4000:]
    m = re.search(r"time to train: ([\d.]+) s .*reached box AP >= 0\.377 and mask AP >= 0\.339 at epoch (\d+)", out)
    assert m, out[-4000:]
    assert re.search(r"^RESULT,OBJECT_DETECTION,,\d+,", out, re.M)
    assert "SUCCESS" in out.split("MLPerf compliance checker")[-1]
    assert os.path.exists(tmp_path / "demo" / "result_0.txt")
    assert out.count("the COCO scoring process died (exit code -9) while idle: restarted") == 2, out[-4000:]
    assert "while scoring epoch" not in out
    accuracy = [e for e in mllog_events(stdout) if e["key"] == "eval_accuracy"]
    assert [e["metadata"]["epoch_num"] for e in accuracy] == list(range(1, int(m.group(2)) + 1))  # none lost
