"""The Slurm batch scripts on a real 4-node Slurm cluster (slurmctld + 4 slurmd in network namespaces).

Container-less mode (CONTAINER=none) with config_CPU.sh. By default training is tests/cluster/fake_train.py
(a gloo all-reduce program printing a minimal MLPerf log); test_4node_real_trainer runs the real trainer on the
synthetic dataset to the MLPerf targets (MASKRCNN_CLUSTER_REAL_TRAINER=0 switches it off).

Needs root (skipped otherwise) and slurm-wlm + munge (tests/cluster/install_deps.sh); if the cluster cannot
start, the tests FAIL with the reason. Harness log and daemon logs: $SLURM_SANDBOX_DIR (default
/tmp/maskrcnn-slurm-sandbox), job outputs under its jobs/ folder.
"""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .slurm_sandbox import SandboxError, SlurmSandbox

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

# The one switch for the real-trainer cluster test (the env variable overrides it).
REAL_TRAINER = os.environ.get("MASKRCNN_CLUSTER_REAL_TRAINER", "1") == "1"

pytestmark = pytest.mark.slow

FAKE = "tests/cluster/fake_train.py"
NODES = ["node1", "node2", "node3", "node4"]


@pytest.fixture(scope="module")
def cluster():
    if os.geteuid() != 0:
        pytest.skip("the Slurm sandbox needs root (network namespaces, daemons)")
    sb = SlurmSandbox()
    try:
        sb.up()
    except (SandboxError, OSError, subprocess.SubprocessError) as e:
        logs = sb.tail_logs()
        try:
            sb.down()
        finally:
            pytest.fail(f"Slurm sandbox could not start: {e}\n{logs}\n(harness log: {sb.log_path})", pytrace=False)
    try:
        yield sb
    finally:
        sb.down()


def job_env(**overrides):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_"))}
    for k in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "PROFILE"):
        env.pop(k, None)
    env.update(CONTAINER="none", DGXSYSTEM="CPU", PYTHON=sys.executable, DROP_CACHES_CMD="true",
               SUBMISSION_ORG="ci")
    env.update({k: str(v) for k, v in overrides.items()})
    return env


def submit(sb, script, outdir, env, extra=()):
    outdir.mkdir(parents=True, exist_ok=True)
    r = sb.run(["sbatch", "--parsable", "--gpus-per-node=2", "-o", str(outdir / "slurm-%j.out"), *extra, script],
               check=False, cwd=str(ROOT), env=env)
    assert r.returncode == 0, f"sbatch failed: {r.stdout}{r.stderr}"
    return r.stdout.strip().split(";")[0]


def job_info(sb, jobid):
    r = sb.run(["scontrol", "show", "job", "-o", jobid], check=False)
    fields = dict(re.findall(r"(\w+)=(\S+)", r.stdout))
    return fields


def wait_job(sb, jobid, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = job_info(sb, jobid)
        if info.get("JobState") not in (None, "PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
            return info
        time.sleep(1)
    sb.run(["scancel", jobid], check=False)
    raise AssertionError(f"job {jobid} still {job_info(sb, jobid).get('JobState')} after {timeout}s\n"
                         f"{sb.tail_logs()}")


def job_output(outdir, jobid):
    p = outdir / f"slurm-{jobid}.out"
    return p.read_text(errors="replace") if p.exists() else "(no output)"


def compliance(log, tmp_path):
    r = subprocess.run([sys.executable, "-m", "mlperf_logging.compliance_checker", "--usage", "training",
                        "--ruleset", "0.7.0", str(log)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout + r.stderr


def check_result_log(log, tmp_path, nranks):
    text = log.read_text(errors="replace")
    rc, out = compliance(log, tmp_path)
    assert rc == 0, f"compliance checker failed on {log}:\n{out}\n--- log:\n{text[-4000:]}"
    assert len(re.findall(r"^RESULT,OBJECT_DETECTION,,\d+,ci,", text, re.M)) == 1, text[-3000:]
    assert '"key": "cache_clear"' in text
    return text


def test_4node_fake_training_completes_and_is_compliant(cluster, tmp_path):
    out = Path(cluster.workdir) / "jobs" / "fake4"
    env = job_env(NEXP=2, DGXNGPU=2, TRAIN_SCRIPT=FAKE, LOGDIR=out / "results")
    t0 = time.monotonic()
    jobid = submit(cluster, "slurm/maskrcnn_4node.sbatch", out, env)
    info = wait_job(cluster, jobid, timeout=240)
    output = job_output(out, jobid)
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", f"{info}\n{output[-5000:]}"
    assert time.monotonic() - t0 < 240
    for i in range(2):
        text = check_result_log(out / "results" / f"result_{i}.txt", tmp_path, 8)
        hosts = set(re.findall(r"fake_train: rank=\d+/8 local_rank=\d host=(\w+)", text))
        assert hosts == set(NODES), text[-3000:]
        done = set(re.findall(r"fake_train: rank (\d+) done, allreduce=36.0 expected=36.0", text))
        assert done == {str(r) for r in range(8)}
    assert "master=node1" in output


def test_4node_one_rank_killed_job_ends(cluster, tmp_path):
    out = Path(cluster.workdir) / "jobs" / "kill4"
    piddir = out / "pids"
    env = job_env(NEXP=1, DGXNGPU=2, TRAIN_SCRIPT=FAKE, LOGDIR=out / "results", FAKE_TRAIN_SLEEP=600,
                  FAKE_TRAIN_SLEEP_RANK=5, FAKE_TRAIN_PIDDIR=piddir)
    jobid = submit(cluster, "slurm/maskrcnn_4node.sbatch", out, env)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and not all((piddir / f"rank{r}.pid").exists() for r in range(8)):
        assert job_info(cluster, jobid).get("JobState") in ("PENDING", "CONFIGURING", "RUNNING"), \
            job_output(out, jobid)[-3000:]
        time.sleep(0.5)
    assert all((piddir / f"rank{r}.pid").exists() for r in range(8)), job_output(out, jobid)[-3000:]
    time.sleep(2)  # let the other ranks block in their first all-reduce
    assert (piddir / "rank5.host").read_text() == "node3"
    pids = {r: int((piddir / f"rank{r}.pid").read_text()) for r in range(8)}
    t_kill = time.monotonic()
    os.kill(pids[5], signal.SIGKILL)
    info = wait_job(cluster, jobid, timeout=90)
    elapsed = time.monotonic() - t_kill
    output = job_output(out, jobid)
    assert elapsed < 60, f"job took {elapsed:.0f}s to end after the kill\n{output[-3000:]}"
    assert info["JobState"] == "FAILED" and info["ExitCode"] != "0:0", f"{info}\n{output[-3000:]}"
    assert "local rank 1 exited with code 137" in output, output[-3000:]
    time.sleep(1)
    left = [r for r, p in pids.items() if os.path.exists(f"/proc/{p}") and
            "Z" not in open(f"/proc/{p}/status").read().split("State:")[1].split()[0]]
    assert not left, f"ranks {left} still running after the job ended"


def test_1node_sbatch(cluster, tmp_path):
    out = Path(cluster.workdir) / "jobs" / "fake1"
    env = job_env(NEXP=1, DGXNGPU=2, TRAIN_SCRIPT=FAKE, LOGDIR=out / "results")
    jobid = submit(cluster, "slurm/maskrcnn_1node.sbatch", out, env)
    info = wait_job(cluster, jobid, timeout=120)
    output = job_output(out, jobid)
    assert info["JobState"] == "COMPLETED", f"{info}\n{output[-3000:]}"
    text = check_result_log(out / "results" / "result_0.txt", tmp_path, 2)
    assert "rank 1 done, allreduce=3.0" in text


def test_submitit_4node(cluster, tmp_path):
    out = Path(cluster.workdir) / "jobs" / "submitit4"
    cmd = [sys.executable, str(ROOT / "tools" / "submit.py"), "--system", "CPU", "--nodes", "4",
           "--gpus-per-node", "2", "--time", "00:05:00", "--image", "none", "--train-script", FAKE, "--nexp", "2",
           "--results", str(out), "--drop-caches-cmd", "true", "--env", "DGXNGPU=2", "--env", "SUBMISSION_ORG=ci"]
    r = cluster.run(cmd, check=False, timeout=300, cwd=str(tmp_path), env=job_env())
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert "2/2 runs succeeded" in r.stdout
    for i in range(2):
        check_result_log(out / f"result_{i}.txt", tmp_path, 8)
        hosts = set()
        for node in range(4):
            hosts |= set(re.findall(r"host=(node\d)", (out / f"run_{i}" / f"node{node}.log").read_text()))
        assert hosts == set(NODES)


def test_4node_real_trainer(cluster, tmp_path):
    if not REAL_TRAINER:
        pytest.skip("real-trainer cluster run switched off (set REAL_TRAINER = True in this file or "
                    "MASKRCNN_CLUSTER_REAL_TRAINER=1)")
    needed = [ROOT / "tools/train_mlperf.py", ROOT / "tools/make_synthetic_coco.py",
              ROOT / "configs/e2e_mask_rcnn_synthetic_cpu.yaml"]
    missing = [str(p.relative_to(ROOT)) for p in needed if not p.exists()]
    if missing:
        pytest.skip(f"the trainer is not there yet: missing {', '.join(missing)}")
    out = Path(cluster.workdir) / "jobs" / "real4"
    data = out / "data"
    subprocess.run([sys.executable, "tools/make_synthetic_coco.py", "--out", str(data)], cwd=ROOT, check=True,
                   timeout=600)
    timeout = float(os.environ.get("MASKRCNN_CLUSTER_REAL_TIMEOUT", "1200"))
    # The four "nodes" share this machine's cores: one thread per process, or they oversubscribe them.
    env = job_env(NEXP=1, DGXNGPU=1, LOGDIR=out / "results", DATADIR=data, OMP_NUM_THREADS=1)
    jobid = submit(cluster, "slurm/maskrcnn_4node.sbatch", out, env)
    info = wait_job(cluster, jobid, timeout=timeout)
    output = job_output(out, jobid)
    assert info["JobState"] == "COMPLETED", f"{info}\n{output[-5000:]}"
    check_result_log(out / "results" / "result_0.txt", tmp_path, 4)


def _tagged_processes(tag):
    """Processes (on any of the sandbox's nodes: they share this kernel) whose environment carries ``tag``."""
    found = []
    needle = f"MASKRCNN_TEST_TAG={tag}".encode()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    with open(f"/proc/{pid}/status") as s:
                        if "zombie" not in s.read():
                            found.append(int(pid))
        except OSError:
            pass
    return found


def _assert_nothing_left(tag, within=15):
    deadline = time.monotonic() + within
    while _tagged_processes(tag) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = _tagged_processes(tag)
    assert not left, [open(f"/proc/{p}/cmdline", "rb").read().replace(b"\0", b" ")[:200] for p in left]


@pytest.fixture(scope="module")
def synthetic_data(cluster):
    data = Path(cluster.workdir) / "jobs" / "data"
    if not (data / "annotations").exists():
        subprocess.run([sys.executable, "tools/make_synthetic_coco.py", "--out", str(data), "--train", "200",
                        "--val", "40"], cwd=ROOT, check=True, timeout=600)
    return data


def _real_job(cluster, name, data, **env):
    out = Path(cluster.workdir) / "jobs" / name
    tag = f"{name}-{time.monotonic_ns()}"
    e = job_env(NEXP=1, DGXNGPU=1, LOGDIR=out / "results", DATADIR=data, OMP_NUM_THREADS=1, MASKRCNN_TEST_TAG=tag,
                EXTRA_CONFIG=f"OUTPUT_DIR {out / 'output'} SOLVER.MAX_ITER 100000", **env)
    return out, tag, submit(cluster, "slurm/maskrcnn_4node.sbatch", out, e)


def _wait_for_training(out, jobid, cluster, timeout=240):
    log = out / "results" / "result_0.txt"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and "iter: 20" in log.read_text(errors="replace"):
            return
        assert job_info(cluster, jobid).get("JobState") in ("PENDING", "CONFIGURING", "RUNNING"), \
            job_output(out, jobid)[-3000:]
        time.sleep(1)
    raise AssertionError(f"training did not start\n{job_output(out, jobid)[-3000:]}")


def _assert_aborted_cleanly(out, job_log=True):
    """The trainer's own MLPerf log (rank 0 writes it) ends in run_stop aborted; with ``job_log`` the trial's
    result file (teed by the batch script, which a scancel kills too) also has the one-line reason."""
    mllog = (out / "output" / "mlperf_log.txt").read_text(errors="replace")
    stops = re.findall(r'"key": "run_stop".*?"status": "(\w+)"', mllog)
    assert stops == ["aborted"], mllog[-3000:]
    if job_log:
        text = (out / "results" / "result_0.txt").read_text(errors="replace")
        assert "error: stopped by SIGTERM; run_stop logged as aborted" in text, text[-3000:]
        assert "Traceback" not in text


def test_4node_trial_time_limit_expires_mid_run(cluster, synthetic_data):
    """TRIAL_MINUTES=1: Slurm stops the trial's step at its limit (SIGTERM); the trainer logs run_stop aborted,
    the job ends, nothing is left on any node."""
    if not REAL_TRAINER:
        pytest.skip("real-trainer cluster runs switched off")
    out, tag, jobid = _real_job(cluster, "timelimit4", synthetic_data, TRIAL_MINUTES=1)
    t0 = time.monotonic()
    info = wait_job(cluster, jobid, timeout=240)
    output = job_output(out, jobid)
    assert time.monotonic() - t0 < 200, output[-3000:]
    assert info["JobState"] in ("FAILED", "COMPLETED"), f"{info}\n{output[-3000:]}"
    assert "trial 1 exit code" in output and "trial limit=1 min" in output, output[-3000:]
    _assert_aborted_cleanly(out)
    _assert_nothing_left(tag)


def test_4node_scancel_mid_run(cluster, synthetic_data):
    if not REAL_TRAINER:
        pytest.skip("real-trainer cluster runs switched off")
    out, tag, jobid = _real_job(cluster, "scancel4", synthetic_data)
    _wait_for_training(out, jobid, cluster)
    cluster.run(["scancel", jobid], check=False)
    info = wait_job(cluster, jobid, timeout=60)
    assert info["JobState"] == "CANCELLED", info
    mllog = out / "output" / "mlperf_log.txt"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and '"key": "run_stop"' not in mllog.read_text():
        time.sleep(0.5)
    _assert_aborted_cleanly(out, job_log=False)
    _assert_nothing_left(tag)
