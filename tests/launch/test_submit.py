"""tools/submit.py with submitit's local executor (the Slurm path runs in tests/cluster)."""

import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from maskrcnn_benchmark.cli import exit_codes

ROOT = Path(__file__).resolve().parents[2]
SUBMIT = ROOT / "slurm" / "submit.py"
submit = runpy.run_path(str(SUBMIT), run_name="slurm_submit")
submit = type("submit", (), {k: staticmethod(v) if callable(v) else v for k, v in submit.items()
                             if not k.startswith("__")})


def test_walltime_minutes():
    assert submit.walltime_minutes("04:00:00") == 240
    assert submit.walltime_minutes("00:20:30") == 21
    assert submit.walltime_minutes("1-02:00:00") == 1560
    assert submit.walltime_minutes("45") == 45


@pytest.mark.slow
def test_read_config_defaults_and_overrides():
    cfg = submit.read_config("DGXA100_4x8x4", {"PATH": "/usr/bin:/bin"})
    # 5 trials of (33 + 5) min + 25 % = 47 min each, + 15 min
    assert (cfg["DGXNNODES"], cfg["DGXNGPU"], cfg["TRIAL_MINUTES"], cfg["WALLTIME"]) == ("4", "8", "47", "04:10:00")
    cfg = submit.read_config("DGXA100_4x8x4", {"PATH": "/usr/bin:/bin", "DGXNGPU": "4"})
    assert cfg["DGXNGPU"] == "4"


def coco_layout(root):
    """What the preflight looks for (nothing is read: the stand-in trainer trains on nothing)."""
    for d in ("train2017", "val2017", "annotations"):
        (root / d).mkdir(parents=True, exist_ok=True)
    for split in ("train", "val"):
        (root / "annotations" / f"instances_{split}2017.json").write_text("{}")
    return root


def run_submit(tmp_path, *extra, env=None):
    cmd = [sys.executable, str(ROOT / "tools" / "submit.py"), "--cluster", "local", "--system", "CPU",
           "--image", "none", "--train-script", "tests/cluster/fake_train.py", "--results", str(tmp_path / "res"),
           "--data", str(coco_layout(tmp_path / "coco")), "--drop-caches-cmd", "true", "--env", "DGXNGPU=2",
           "--env", "MLPERF_SUBMISSION_ORG=ci", *extra]
    return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)


@pytest.mark.slow
def test_local_submit_collects_compliant_log(tmp_path):
    r = run_submit(tmp_path, "--nexp", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1/1 runs succeeded" in r.stdout
    log = tmp_path / "res" / "result_0.txt"
    text = log.read_text()
    assert '"key": "cache_clear"' in text and "RESULT,OBJECT_DETECTION,," in text
    chk = subprocess.run([sys.executable, "-m", "mlperf_logging.compliance_checker", "--usage", "training",
                          "--ruleset", "0.7.0", str(log)], cwd=tmp_path, capture_output=True, text=True)
    assert chk.returncode == 0, chk.stdout + chk.stderr


@pytest.mark.slow
def test_without_an_image_the_weights_dir_is_the_trainers(tmp_path):
    """--image none: --data reached the trainer, --weights-dir did not (MODEL.WEIGHT stayed /coco/models/R-50.pkl,
    the image's bind target): a site with its weights elsewhere got exit 12 from the preflight."""
    weights = tmp_path / "models"
    weights.mkdir()
    (weights / "R-50.pkl").write_bytes(b"")
    r = run_submit(tmp_path, "--nexp", "1", "--system", "DGXH100", "--gpus-per-node", "1", "--allow-non-rcp",
                   "--weights-dir", str(weights), "--env",
                   "EXTRA_CONFIG=SOLVER.IMS_PER_BATCH 4 TEST.IMS_PER_BATCH 1 MODEL.DEVICE cpu")
    assert "does not exist" not in r.stdout + r.stderr
    assert "data and weights found" in r.stdout + r.stderr, r.stdout + r.stderr


@pytest.mark.slow
def test_a_login_node_without_gpus_submits_a_cuda_recipe(tmp_path):
    """--cluster slurm: the preflight runs on the host that submits, a login node without GPUs as a rule. It judged
    the recipe, data and weights there, and the GPUs too: every CUDA config ended in exit 15 (no GPU), nothing
    submitted. The GPUs are the job's nodes' (the trainer checks them before init_start); the local executors
    train on this host, so there the check stays."""
    if torch.cuda.is_available():
        pytest.skip("this host has a GPU: the login node's case needs a host without one")
    weights = tmp_path / "models"
    weights.mkdir()
    (weights / "R-50.pkl").write_bytes(b"")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "sbatch").write_text("#!/bin/bash\necho 'Submitted batch job 4242'\n")
    (fake / "sbatch").chmod(0o755)
    env = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}")
    cuda_recipe = ("--system", "DGXH100", "--gpus-per-node", "8", "--allow-non-rcp", "--weights-dir", str(weights),
                   "--env", "EXTRA_CONFIG=SOLVER.IMS_PER_BATCH 8 TEST.IMS_PER_BATCH 8", "--env", "DGXNGPU=8")
    r = run_submit(tmp_path, *cuda_recipe, "--cluster", "slurm", "--no-wait", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "the GPUs are checked on the job's nodes" in r.stdout
    assert "run 0 -> job 4242" in r.stdout
    # submitted from inside a 2-node srun step (srun --pty bash): the preflight judged the step's 2 nodes, not the
    # job's 1 (run_and_time.sh reads SLURM_STEP_NUM_NODES first): 8 images on 16 GPUs, refused, nothing submitted
    r = run_submit(tmp_path, *cuda_recipe, "--cluster", "slurm", "--no-wait",
                   env=dict(env, SLURM_STEP_NUM_NODES="2", SLURM_JOB_NUM_NODES="2"))
    assert r.returncode == 0 and "run 1 -> job 4242" in r.stdout, r.stdout + r.stderr  # the next index
    r = run_submit(tmp_path, *cuda_recipe, "--results", str(tmp_path / "local"), env=env)
    assert r.returncode == exit_codes.NO_GPU.code, r.stdout + r.stderr
    assert "nothing submitted" in r.stderr


@pytest.mark.slow
def test_a_run_that_does_not_converge_ends_every_node_quietly(tmp_path):
    """Not converged is every node's outcome: the nodes exit 0 for it (NOT_CONVERGED_EXIT_CODE, as the batch
    scripts ask), so that srun's --kill-on-bad-exit does not kill the others mid-exit, and the run is reported
    as not converged. submit.py left the nodes exiting 3."""
    r = run_submit(tmp_path, "--nexp", "1", "--env", "DGXNGPU=1", "--env", "FAKE_TRAIN_EXIT=3")  # one rank: all
    assert r.returncode == 1, r.stdout + r.stderr
    assert re.search(r"submit: run 0 job \S+: not converged \(SOLVER.MAX_ITER reached without the targets\)",
                     r.stdout), r.stdout
    assert "0/1 runs succeeded" in r.stdout


@pytest.mark.slow
def test_local_submit_reports_failure(tmp_path):
    r = run_submit(tmp_path, "--env", "FAKE_TRAIN_EXIT=7")  # a crash (3, "not converged", is every rank's together)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "FAILED" in r.stdout and "0/1 runs succeeded" in r.stdout
    assert "training exited with code 7" in (tmp_path / "res" / "run_0" / "node0.log").read_text()


@pytest.mark.slow
def test_a_run_that_cannot_drop_the_caches_does_not_train(tmp_path):
    """MLPerf requires the page cache flushed before every run: a failed --drop-caches-cmd fails the run before
    training (it used to train and log cache_clear false, which cannot be submitted)."""
    r = run_submit(tmp_path, "--drop-caches-cmd", "echo 'Permission denied' >&2; false")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "0/1 runs succeeded" in r.stdout
    node0 = (tmp_path / "res" / "run_0" / "node0.log").read_text()
    assert "dropping the page cache failed on node 0" in node0 and "Permission denied" in node0
    assert ":::MLLOG" not in node0
    r = run_submit(tmp_path, "--drop-caches-cmd", "false", "--no-clear-caches", "--results", str(tmp_path / "r2"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert '"key": "cache_clear", "value": false' in (tmp_path / "r2" / "result_0.txt").read_text()


@pytest.mark.slow
def test_multinode_needs_slurm(tmp_path):
    r = run_submit(tmp_path, "--nodes", "2")
    assert r.returncode != 0 and "runs one node only" in r.stderr


class _Job:
    def __init__(self, job_id, result=None, error=None, done=True):
        self.job_id, self._result, self._error, self._done, self.cancelled = job_id, result, error, done, False

    def done(self):
        self.polls = getattr(self, "polls", 0) + 1
        return self._done or self.polls > 50  # a run not cancelled ends by itself (the test does not hang)

    def exception(self):
        return self._error

    def results(self):
        if self._error:
            raise self._error
        return [self._result]

    def cancel(self, check=True):
        self.cancelled = True
        self._done = True


def test_two_runs_that_did_not_converge_cancel_the_rest():
    """The nodes exit 0 for a run that did not converge (NOT_CONVERGED_EXIT_CODE): wait_all counted only runs that
    raised, so two non-converged runs of five no longer cancelled the runs not yet done."""
    jobs = [_Job("1", {"node": 0, "rc": 0, "not_converged": True}),
            _Job("2", {"node": 0, "rc": 0, "not_converged": True}), _Job("3", done=False)]
    submit.wait_all(jobs, "local", poll=0.01)
    assert jobs[2].cancelled
    jobs = [_Job("1", {"node": 0, "rc": 0, "not_converged": True}), _Job("2", {"node": 0, "rc": 0}),
            _Job("3", {"node": 0, "rc": 0})]
    submit.wait_all(jobs, "local", poll=0.01)  # one of five may fail: nothing to cancel, all done
    assert not any(j.cancelled for j in jobs)



class _Stuck(_Job):
    """A Slurm job that wait_all gave up on (cancelled before it started, or its node died): submitit never sees
    it done without accounting, and its results() waits for ever."""

    def done(self):
        return False

    def results(self):
        raise AssertionError("submitit's results() would wait for ever here")


def test_the_runs_wait_all_gave_up_on_are_failed_without_waiting(tmp_path, capsys):
    """After two failures wait_all cancels the queued runs and returns; main then asked each job for its results,
    and submitit waits for a cancelled job's result for ever on a cluster without sacct: submit.py hung."""
    (tmp_path / "run_0").mkdir()
    (tmp_path / "run_0" / "node0.log").write_text("RESULT,OBJECT_DETECTION,,1234,ci,2026\n")
    jobs = [_Job("1", {"node": 0, "rc": 0}), _Stuck("2", done=False)]
    assert submit.collect(jobs, [0, 1], tmp_path) == 1
    out = capsys.readouterr().out
    assert "run 0 job 1: ok 1234 s" in out
    assert "run 1 job 2: FAILED (cancelled, or left the queue without a result)" in out


@pytest.mark.slow
def test_a_second_submission_before_the_first_runs_takes_the_next_indices(tmp_path):
    """Each run's folder is made when its job starts: with --no-wait, a second submission into the same --results
    while the first's jobs still queued took the same indices, and the two runs wrote one result_<k>.txt."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "sbatch").write_text("#!/bin/bash\necho 'Submitted batch job 4242'\n")
    (fake / "sbatch").chmod(0o755)
    env = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}")
    queued = ("--cluster", "slurm", "--no-wait", "--nexp", "2", "--env", "DGXNGPU=1", "--gpus-per-node", "0")
    first = run_submit(tmp_path, *queued, env=env)
    assert first.returncode == 0, first.stdout + first.stderr
    assert re.findall(r"submit: run (\d+) -> job", first.stdout) == ["0", "1"]
    second = run_submit(tmp_path, *queued, env=env)
    assert second.returncode == 0, second.stdout + second.stderr
    assert re.findall(r"submit: run (\d+) -> job", second.stdout) == ["2", "3"]


@pytest.mark.slow
def test_the_signal_before_the_time_limit_does_not_cut_the_log(tmp_path):
    """submitit asks Slurm for USR2 90 s before the time limit (--signal=USR2@90), to every process of the step: the
    trainer stops on it and logs run_stop aborted, while submitit's handler raised UncompletedJobError in the task
    reading the trainer's output, so those last lines never reached node0.log (result_<k>.txt: not compliant)."""
    script = tmp_path / "trainer.sh"
    script.write_text('trap \'echo "trainer: stopped, run_stop aborted"; exit 0\' USR2\necho "trainer: ready"\n'
                      'kill -USR2 "$PPID"; sleep 0.3; kill -USR2 $$\nsleep 5 & wait\n')
    code = f"""
import runpy, signal
submit = runpy.run_path({str(SUBMIT)!r}, run_name="slurm_submit")
def submitits(signum, frame):  # what submitit's SignalHandler.checkpoint_and_try_requeue does on a timed-out job
    raise RuntimeError("UncompletedJobError: Job not requeued because: timed-out and not checkpointable")
signal.signal(signal.SIGUSR2, submitits)
task = submit["NodeTask"](0, {str(tmp_path)!r}, "none", {{}}, None, None, False, "true")
task.command = lambda: ["bash", {str(script)!r}]
print(task())
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    log = (tmp_path / "run_0" / "node0.log").read_text()
    assert "trainer: stopped, run_stop aborted" in log, log
