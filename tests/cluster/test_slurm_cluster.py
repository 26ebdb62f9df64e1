"""The Slurm batch scripts on a real 4-node Slurm cluster (slurmctld + 4 slurmd in network namespaces).

Through the read-only image (tests/cluster/container/singularity, bubblewrap with Singularity's semantics): the steps
of docs/cluster.md as written (image, data check, gpu-check job, pilot, the 5 runs with the stand-in trainer
tests/cluster/fake_train.py, the submission folder checked by mlperf-logging), a short real-trainer trial, and the
pyxis command line, bind_launch once per node in a step. On the hosts (CONTAINER=none): a rank killed mid-run, a
trial time limit and a scancel with the real trainer, the 1-node script and tools/submit.py. MASKRCNN_CLUSTER_REAL_TRAINER=0 switches the real-trainer runs
off.

Needs root (skipped otherwise) and slurm-wlm + munge (tests/cluster/install_deps.sh); if the cluster cannot
start, the tests FAIL with the reason. Harness log and daemon logs: $SLURM_SANDBOX_DIR (default
/tmp/maskrcnn-slurm-sandbox), job outputs under its jobs/ folder.
"""

import json
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
STANDIN = HERE / "container" / "singularity"
VENV_BIN = Path(sys.executable).parent

# The one switch for the real-trainer cluster test (the env variable overrides it).
REAL_TRAINER = os.environ.get("MASKRCNN_CLUSTER_REAL_TRAINER", "1") == "1"

pytestmark = pytest.mark.slow

FAKE = "tests/cluster/fake_train.py"
BATCH_8 = "SOLVER.IMS_PER_BATCH 8 TEST.IMS_PER_BATCH 8"  # 8 ranks (4 nodes x 2): the preflight wants it divisible
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
               MLPERF_SUBMISSION_ORG="ci", SITE_CONFIG="/nonexistent", NCCL_CHECK="0")
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


def test_4node_one_rank_killed_job_ends(cluster, tmp_path, synthetic_data):
    out = Path(cluster.workdir) / "jobs" / "kill4"
    piddir = out / "pids"
    env = job_env(NEXP=1, DGXNGPU=2, TRAIN_SCRIPT=FAKE, LOGDIR=out / "results", FAKE_TRAIN_SLEEP=600,
                  FAKE_TRAIN_SLEEP_RANK=5, FAKE_TRAIN_PIDDIR=piddir, DATADIR=synthetic_data, EXTRA_CONFIG=BATCH_8)
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


def test_1node_sbatch(cluster, tmp_path, synthetic_data):
    out = Path(cluster.workdir) / "jobs" / "fake1"
    env = job_env(NEXP=1, DGXNGPU=2, TRAIN_SCRIPT=FAKE, LOGDIR=out / "results", DATADIR=synthetic_data,
                  FAKE_TRAIN_EPOCHS=2, EXTRA_CONFIG=BATCH_8)
    jobid = submit(cluster, "slurm/maskrcnn_1node.sbatch", out, env)
    info = wait_job(cluster, jobid, timeout=120)
    output = job_output(out, jobid)
    assert info["JobState"] == "COMPLETED", f"{info}\n{output[-3000:]}"
    text = check_result_log(out / "results" / "result_0.txt", tmp_path, 2)
    assert "rank 1 done, allreduce=3.0" in text


def test_submitit_4node(cluster, tmp_path, synthetic_data):
    out = Path(cluster.workdir) / "jobs" / "submitit4"
    cmd = [sys.executable, str(ROOT / "tools" / "submit.py"), "--system", "CPU", "--nodes", "4",
           "--gpus-per-node", "2", "--time", "00:05:00", "--image", "none", "--train-script", FAKE, "--nexp", "2",
           "--results", str(out), "--drop-caches-cmd", "true", "--env", "DGXNGPU=2", "--env",
           "MLPERF_SUBMISSION_ORG=ci", "--env", "FAKE_TRAIN_EPOCHS=2", "--env", f"EXTRA_CONFIG={BATCH_8}",
           "--data", str(synthetic_data)]
    r = cluster.run(cmd, check=False, timeout=300, cwd=str(tmp_path), env=job_env())
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert "2/2 runs succeeded" in r.stdout
    for i in range(2):
        check_result_log(out / f"result_{i}.txt", tmp_path, 8)
        hosts = set()
        for node in range(4):
            hosts |= set(re.findall(r"host=(node\d)", (out / f"run_{i}" / f"node{node}.log").read_text()))
        assert hosts == set(NODES)


@pytest.fixture(scope="module")
def image(cluster):
    """The read-only image, built from singularity/maskrcnn.def by singularity/build.sh with the stand-in."""
    path = Path(cluster.workdir) / "image" / "maskrcnn.sif"
    if not path.exists():
        env = dict(os.environ, SINGULARITY=str(STANDIN), SINGULARITY_STANDIN_BASE_PATH=str(VENV_BIN))
        r = subprocess.run([str(ROOT / "singularity" / "build.sh"), str(path)], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
    return path


@pytest.fixture(scope="module")
def runtime_bin(cluster):
    """A folder putting the stand-in on PATH as singularity and apptainer."""
    d = Path(cluster.workdir) / "runtime-bin"
    d.mkdir(exist_ok=True)
    for name in ("singularity", "apptainer"):
        if not (d / name).exists():
            (d / name).symlink_to(STANDIN)
    return d


# sbatch --wait polls the controller at growing intervals (2, 8, 32 s: a job of 20 s is seen done after 42 s); the
# steps test waits for three jobs that way. This stand-in submits without waiting and polls every half second,
# returning what sbatch --wait returns (the submission's output, then the job's exit code).
FAST_WAIT_SBATCH = """#!/bin/bash
real="$(PATH="${PATH#*:}" command -v sbatch)"
if [[ -z "${SBATCH_WAIT:-}" ]]; then exec "${real}" "$@"; fi
unset SBATCH_WAIT
out="$("${real}" "$@")" || exit $?
echo "${out}"
jobid="$(echo "${out}" | awk '{print $NF}' | cut -d';' -f1)"
while :; do
  info="$(scontrol show job -o "${jobid}")"
  state="$(sed -n 's/.* JobState=\\([A-Z_]*\\).*/\\1/p' <<< "${info}")"
  case "${state}" in PENDING|CONFIGURING|RUNNING|COMPLETING|"") sleep 0.5 ;; *) break ;; esac
done
code="$(sed -n 's/.* ExitCode=\\([0-9]*\\):.*/\\1/p' <<< "${info}")"
if [[ "${state}" != COMPLETED && "${code:-0}" == 0 ]]; then exit 1; fi
exit "${code:-0}"
"""


def _git_state():
    """Every changed, new or ignored file of the checkout (Python's bytecode caches aside: the host-side programs
    of the steps write those, as anywhere)."""
    out = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--ignored", "--untracked-files=all"],
                         capture_output=True, text=True).stdout
    return sorted(line for line in out.splitlines() if "__pycache__" not in line)


def _steps_block():
    text = (ROOT / "docs" / "cluster.md").read_text()
    block = re.search(r"<!-- steps -->\n```bash\n(.*?)```\n<!-- /steps -->", text, re.S)
    assert block, "docs/cluster.md lost its steps markers"
    return block.group(1)


def test_cluster_md_steps_run_as_written(cluster, synthetic_data, runtime_bin):
    """docs/cluster.md's steps, run as written on the 4-node cluster with a site file for the sandbox: the image,
    the data check, gpu-check in the image, a pilot trial, the 5 runs through the read-only image (stand-in
    trainer: valid MLPerf logs), and the submission folder that mlperf-logging's package checker accepts."""
    w = Path(cluster.workdir) / "jobs" / "steps"
    (w / "models").mkdir(parents=True, exist_ok=True)
    # a Detectron pickle (download_coco reads the weights it finds: a file that is not one is fetched again)
    import numpy as np
    import pickle

    (w / "models" / "R-50.pkl").write_bytes(pickle.dumps({"blobs": {"conv1_w": np.zeros((1, 3, 1, 1), np.float32)}},
                                                         protocol=2))
    system_json = w / "system.json"
    system_json.write_text(json.dumps({"host_processors_per_node": "1", "accelerators_per_node": "1",
                                       "host_processor_core_count": "2", "accelerator_model_name": "none (CPU)"}))
    site = w / "site.sh"
    site.write_text(f"""
export MLPERF_SUBMISSION_ORG=ci MLPERF_SUBMISSION_PLATFORM=4xCPU-sandbox
GPU_REQUEST="--gpus-per-node=1"
CONTAINER_RUNTIME=singularity
CONTAINER={w}/image/maskrcnn.sif
DATADIR={synthetic_data}
WEIGHTS_DIR={w}/models
RESULTS_ROOT={w}/results
SYSTEM_JSON={system_json}
export DGXSYSTEM=CPU DGXNNODES=4 DGXNGPU=1 OMP_NUM_THREADS=1
export TRAIN_SCRIPT=tests/cluster/fake_train.py
export DROP_CACHES_CMD=true SBATCH_OUTPUT={w}/slurm-%x-%j.out
export SINGULARITY_STANDIN_BASE_PATH={VENV_BIN}
""")
    script = w / "steps.sh"
    script.write_text("set -euo pipefail\nset -x\n" + _steps_block() + "\necho \"STEPS DONE JOBID=$JOBID\"\n")
    before = _git_state()
    fast_wait = w / "fast-wait-bin"
    fast_wait.mkdir(exist_ok=True)
    (fast_wait / "sbatch").write_text(FAST_WAIT_SBATCH)
    (fast_wait / "sbatch").chmod(0o755)
    env = job_env(SITE_CONFIG=site, SBATCH_WAIT=1,
                  PATH=f"{fast_wait}:{runtime_bin}:{VENV_BIN}:{os.environ['PATH']}")
    for k in ("CONTAINER", "NCCL_CHECK", "DGXSYSTEM", "MLPERF_SUBMISSION_ORG", "DROP_CACHES_CMD", "PYTHON"):
        env.pop(k, None)  # the site file's to set
    t0 = time.monotonic()
    r = cluster.run(["bash", str(script)], check=False, timeout=900, cwd=str(ROOT), env=env)
    outputs = "\n".join(p.read_text(errors="replace") for p in sorted(w.glob("slurm-*.out")))
    assert r.returncode == 0 and "STEPS DONE" in r.stdout, f"{r.stdout[-4000:]}\n{r.stderr[-6000:]}\n{outputs[-9000:]}"
    jobid = re.search(r"STEPS DONE JOBID=(\d+)", r.stdout).group(1)
    logs = w / "results" / f"maskrcnn_4node-{jobid}"
    assert sorted(p.name for p in logs.glob("result_*.txt")) == [f"result_{i}.txt" for i in range(5)]
    for i in range(5):
        text = (logs / f"result_{i}.txt").read_text()
        hosts = set(re.findall(r"fake_train: rank=\d+/4 local_rank=0 host=(\w+)", text))
        assert hosts == set(NODES), text[-3000:]
        assert (logs / f"trial_{i}" / "mlperf_log.txt").is_file()  # the trainer wrote into the bound LOGDIR
    assert "make gpu-check exit code 0" in outputs and "no NVIDIA GPU on this machine" in outputs
    assert "all-reduce across 2 nodes" in outputs and re.search(r"allreduce: 2 ranks, .* busbw", outputs)
    assert "gpu-check across nodes exit code 0" in outputs
    [gpu_report] = (w / "results").glob("gpu_check-*/gpu-check/report.md")
    across = gpu_report.read_text()  # no GPU: the node's checks wrote nothing; the 2-node verdicts are there
    assert "| bus bandwidth floor | 0.01 GB/s (NCCL_MIN_BUSBW) |" in across, across  # config_CPU.sh's floor
    assert re.search(r"\| all-reduce between 2 nodes \| passed \| inter-node all-reduce \| 2 ranks, 256 MB", across)
    assert re.search(r"\| training step on 2 nodes, 20 iterations \| passed \| 2-node training throughput \| "
                     r"[\d.]+ img/s", across), across
    two_node = (gpu_report.parent / "training_2node.log").read_text()
    two_hosts = set(re.findall(r"fake_train: rank=\d+/2 local_rank=0 host=(\w+)", two_node))
    assert len(two_hosts) == 2 and two_hosts <= set(NODES), two_node[-3000:]
    assert "SOLVER.MAX_ITER 20" in two_node
    assert re.search(r"pilot: time to train [\d.]+ min, init [\d.]+ min: set DGXRUNMINUTES=\d+", outputs)
    assert "package checker (3.1.0, on this folder): PASS" in r.stdout and "result summarizer score:" in r.stdout
    org = w / "results" / f"submission-{jobid}" / "ci"
    assert sorted(p.name for p in (org / "results" / "4xCPU-sandbox" / "maskrcnn").glob("result_*")) == \
        [f"result_{i}.txt" for i in range(5)]
    assert (org / "systems" / "4xCPU-sandbox.json").is_file()
    assert _git_state() == before, "a job wrote into the checkout (it is read-only inside the image)"
    print(f"docs/cluster.md steps: {time.monotonic() - t0:.0f} s")


def test_4node_container_real_trainer_short_run(cluster, synthetic_data, image, runtime_bin):
    """The real trainer on 4 nodes in the read-only image: a short run (not converged: exit 3, an outcome), its
    MLPerf log compliant, everything it wrote under the bound LOGDIR. One whole epoch (200 images at a global batch
    of 4: 50 iterations), evaluated: a MAX_ITER inside an epoch is not."""
    if not REAL_TRAINER:
        pytest.skip("real-trainer cluster runs switched off (MASKRCNN_CLUSTER_REAL_TRAINER is not 1)")
    out = Path(cluster.workdir) / "jobs" / "real4"
    before = _git_state()
    env = job_env(NEXP=1, DGXNGPU=1, LOGDIR=out / "results", DATADIR=synthetic_data, OMP_NUM_THREADS=1,
                  CONTAINER=image, CONTAINER_RUNTIME="singularity", EXTRA_CONFIG="SOLVER.MAX_ITER 50",
                  PATH=f"{runtime_bin}:{os.environ['PATH']}")
    env.pop("PYTHON")  # the image's python
    jobid = submit(cluster, "slurm/maskrcnn_4node.sbatch", out, env)
    info = wait_job(cluster, jobid, timeout=600)
    output = job_output(out, jobid)
    assert info["JobState"] == "FAILED" and info["ExitCode"] == "3:0", f"{info}\n{output[-5000:]}"
    log = out / "results" / "result_0.txt"
    text = log.read_text(errors="replace")
    rc, checker = compliance(log, out)
    # a run that did not converge fails exactly one check, the target's (MLPerf accepts one such run of five)
    complaints = [ln for ln in checker.splitlines() if ln.startswith(("WARNING", "ERROR"))]
    assert rc != 0 and complaints == [
        "WARNING -  Failed checks for eval_accuracy : v['value']['BBOX'] >= 0.377 and v['value']['BBOX'] < 1.0 and "
        "v['value']['SEGM'] >= 0.339 and v['value']['SEGM'] < 1.0", "ERROR - FAILED"], checker
    assert re.findall(r'"key": "run_stop".*?"status": "(\w+)"', text) == ["aborted"]
    assert "did NOT reach the target" in text and "Traceback" not in text
    trial = out / "results" / "trial_0"
    assert {"mlperf_log.txt", "log.txt"} <= {p.name for p in trial.iterdir()}
    assert _git_state() == before, "the trainer wrote into the checkout (read-only in the image)"


def test_pyxis_command_line(cluster, synthetic_data, image, tmp_path):
    """CONTAINER_RUNTIME=pyxis: the job passes the image, the binds and the working folder to srun
    (--container-image, --container-mounts, --container-workdir); an srun standing in for pyxis records the command
    line and runs it in the stand-in image as the plugin would: the job's environment passed in, the image's own
    (a Docker image's ENV) over it but no %environment (enroot images have none), no /tmp, home or working folder
    from the host (pyxis binds only --container-mounts). The host's Python settings stay out: a PYTHON or
    PYTHONPATH set for CONTAINER=none runs (pyxis passes the whole environment in) named the host's interpreter
    inside the image, exit 127. Only the host's: the image's own PYTHONPATH (the stand-in's, for its editable
    install) reaches the run; unset inside the image, it was gone and tools/preflight.py could not import the
    package."""
    shim_dir = Path(cluster.workdir) / "pyxis-bin"
    shim_dir.mkdir(exist_ok=True)
    record = Path(cluster.workdir) / "jobs" / "pyxis" / "srun_calls"
    record.parent.mkdir(parents=True, exist_ok=True)
    shim = shim_dir / "srun"
    shim.write_text(f"""#!/usr/bin/env python3
import os, sys
args = sys.argv[1:]
if args == ["--help"]:
    print("      --container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH   [pyxis] the image to use")
    sys.exit(0)
open({str(record)!r}, "a").write(" ".join(args) + "\\n")
image = mounts = workdir = None
rest = []
for a in args:
    if a.startswith("--container-image="): image = a.split("=", 1)[1]
    elif a.startswith("--container-mounts="): mounts = a.split("=", 1)[1]
    elif a.startswith("--container-workdir="): workdir = a.split("=", 1)[1]
    elif a.startswith("--no-container-mount-home"): pass
    else: rest.append(a)
n = next((i for i, a in enumerate(rest) if not a.startswith("-")), len(rest))
opts, cmd = rest[:n], rest[n:]  # srun's options, then the command (whose own options, bash -c, stay its)
if image:
    cmd = [{str(STANDIN)!r}, "exec", "--contain", "--no-home", "-B", mounts, "--pwd", workdir, image, *cmd]
    os.environ["SINGULARITY_STANDIN_ENV_SCRIPTS"] = "10-*.sh"
os.execv("/usr/bin/srun", ["srun", *opts, *cmd])
""")
    shim.chmod(0o755)
    out = Path(cluster.workdir) / "jobs" / "pyxis"
    env = job_env(NEXP=1, DGXNGPU=1, TRAIN_SCRIPT=FAKE, LOGDIR=out / "results", DATADIR=synthetic_data,
                  CONTAINER=image, CONTAINER_RUNTIME="pyxis", FAKE_TRAIN_EPOCHS=2,
                  PATH=f"{shim_dir}:{os.environ['PATH']}", PYTHONPATH="/opt/host-site")
    env["PYTHON"] = "/opt/host-venv/bin/python"  # the host's, for CONTAINER=none runs: not a path in the image
    jobid = submit(cluster, "slurm/maskrcnn_4node.sbatch", out, env)
    info = wait_job(cluster, jobid, timeout=300)
    output = job_output(out, jobid)
    assert info["JobState"] == "COMPLETED", f"{info}\n{output[-5000:]}"
    calls = record.read_text().splitlines()
    trial = [c for c in calls if c.endswith("./run_and_time.sh") and "--nodes=4" in c]
    assert len(trial) == 1, calls
    assert f"--container-image={image}" in trial[0] and "--container-workdir=/workspace/object_detection" in trial[0]
    assert f"--container-mounts={ROOT}:/workspace/object_detection:ro,{synthetic_data}:/data:ro," \
           f"{out / 'results'}:/results" in trial[0]
    check_result_log(out / "results" / "result_0.txt", tmp_path, 4)
    # the caches were dropped on the hosts (srun without the image) before the trial
    assert '"key": "cache_clear", "value": true' in (out / "results" / "result_0.txt").read_text()


def test_bind_launch_runs_once_per_node_in_a_step(cluster, tmp_path):
    """Slurm's own environment: in a 2-node job's batch script (no step) bind_launch refuses with one line; in an
    srun step of one task per node it takes the node count and rank from the step."""
    out = Path(cluster.workdir) / "jobs" / "bind"
    out.mkdir(parents=True, exist_ok=True)
    script = out / "probe.sh"
    launch = f"{sys.executable} -m bind_launch --nproc_per_node=1 --binding=none --dry-run tools/train_mlperf.py"
    script.write_text(f"#!/bin/bash\ncd {ROOT}\n{launch}; echo \"batch rc=$?\"\n"
                      f"srun --ntasks-per-node=1 {launch}; echo \"step rc=$?\"\n")
    script.chmod(0o755)
    jobid = submit(cluster, str(script), out, job_env(), extra=("-N", "2"))
    wait_job(cluster, jobid, timeout=120)
    text = job_output(out, jobid)
    assert "batch rc=1" in text and "started bind_launch outside an srun step" in text, text  # bad input: 1
    assert "step rc=0" in text and text.count("world_size=2") == 2, text


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
    assert not left, [_cmdline(p).replace(b"\0", b" ")[:200] for p in left]


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


def _wait_for_run_start(out, jobid, cluster, timeout=240):
    """True once rank 0 has logged run_start (the run is under way, its clock started); False if the job ended
    first."""
    mllog = out / "output" / "mlperf_log.txt"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if mllog.exists() and '"key": "run_start"' in mllog.read_text(errors="replace"):
            return True
        if job_info(cluster, jobid).get("JobState") not in ("PENDING", "CONFIGURING", "RUNNING"):
            return False
        time.sleep(0.5)
    raise AssertionError(f"no run_start after {timeout} s\n{job_output(out, jobid)[-3000:]}")


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


def _pause_ranks_once_running(cluster, out, jobid, tag):
    """Once rank 0 has logged run_start, SIGSTOP the 4 trainer ranks (bind_launch's children) and return their
    pids; [] if the job ended first. A step that reaches its time limit gets SIGCONT, then SIGTERM, then SIGKILL
    after KillWait from slurmd (it resumes suspended tasks before it terminates them), so a paused rank meets the
    limit as a running one does, mid-run; it only stops burning the 2 cores for the rest of the minute (4 ranks:
    about 140 CPU-seconds the other tests of the suite get instead)."""
    if not _wait_for_run_start(out, jobid, cluster, timeout=120):
        return []
    ranks = [p for p in _tagged_processes(tag) if b"train_mlperf" in _cmdline(p)]
    for pid in ranks:
        try:
            os.kill(pid, signal.SIGSTOP)
        except ProcessLookupError:
            pass
    return ranks


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


# Over 60 s (about 75 s): Slurm's time limit is given in whole minutes, so the trial runs its one minute.
def test_4node_trial_time_limit_expires_mid_run(cluster, synthetic_data):
    """TRIAL_MINUTES=1: Slurm stops the trial's step at its limit (SIGTERM); the trainer logs run_stop aborted,
    the job ends, nothing is left on any node."""
    if not REAL_TRAINER:
        pytest.skip("real-trainer cluster runs switched off")
    out, tag, jobid = _real_job(cluster, "timelimit4", synthetic_data, TRIAL_MINUTES=1)
    t0 = time.monotonic()
    paused = _pause_ranks_once_running(cluster, out, jobid, tag)
    info = wait_job(cluster, jobid, timeout=240)
    output = job_output(out, jobid)
    assert time.monotonic() - t0 < 200, output[-3000:]
    assert info["JobState"] in ("FAILED", "COMPLETED"), f"{info}\n{output[-3000:]}"
    assert "trial 1 exit code" in output and "trial limit=1 min" in output, output[-3000:]
    assert paused, f"the ranks never logged run_start\n{output[-3000:]}"
    _assert_aborted_cleanly(out)
    _assert_nothing_left(tag)


def test_4node_scancel_mid_run(cluster, synthetic_data):
    if not REAL_TRAINER:
        pytest.skip("real-trainer cluster runs switched off")
    out, tag, jobid = _real_job(cluster, "scancel4", synthetic_data)
    assert _wait_for_run_start(out, jobid, cluster), job_output(out, jobid)[-3000:]  # mid-run from here on
    cluster.run(["scancel", jobid], check=False)
    info = wait_job(cluster, jobid, timeout=60)
    assert info["JobState"] == "CANCELLED", info
    mllog = out / "output" / "mlperf_log.txt"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and '"key": "run_stop"' not in mllog.read_text():
        time.sleep(0.5)
    _assert_aborted_cleanly(out, job_log=False)
    _assert_nothing_left(tag)
