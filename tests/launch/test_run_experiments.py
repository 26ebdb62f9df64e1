"""slurm/run_experiments.sh (the body of the batch scripts) on one machine, with an ``srun`` that runs the command
here: the checks on the batch host with their own exit codes, the 5-run rule, result files never overwritten, the
pilot, the time budget from make gpu-check's projection. The same script on a real Slurm cluster, through the
container stand-in: tests/cluster/test_slurm_cluster.py."""
import json
import os
import re
import shutil
import sys
import textwrap
from pathlib import Path

import pytest

from maskrcnn_benchmark.cli import exit_codes

from .test_scripts import ROOT, clean_env

pytestmark = pytest.mark.slow
FAKE = "tests/cluster/fake_train.py"
STANDIN = ROOT / "tests" / "cluster" / "container" / "singularity"


def coco_layout(root):
    for d in ("train2017", "val2017", "annotations"):
        (root / d).mkdir(parents=True, exist_ok=True)
    for split in ("train", "val"):
        (root / "annotations" / f"instances_{split}2017.json").write_text("{}")
    return root


def local_srun(tmp_path):
    """``srun`` that drops its options and runs the command on this machine (one node); a failed task gets srun's
    summary line on stderr, as the real one prints it."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    (bindir / "srun").write_text('#!/bin/bash\nwhile [[ "${1:-}" == -* ]]; do shift; done\n"$@"\nrc=$?\n'
                                 'if [[ $rc -ne 0 ]]; then echo "srun: error: $(hostname): task 0: Exited with exit '
                                 'code $rc" >&2; fi\nexit $rc\n')
    (bindir / "srun").chmod(0o755)
    return bindir


def run_job(tmp_path, path_dirs=(), **env):
    import subprocess

    bindir = local_srun(tmp_path)
    base = dict(DGXSYSTEM="CPU", CONTAINER="none", NEXP=1, PYTHON=sys.executable, LOGDIR=tmp_path / "logs",
                REPO=ROOT, TRAIN_SCRIPT=FAKE, DATADIR=coco_layout(tmp_path / "coco"), DROP_CACHES_CMD="true",
                FAKE_TRAIN_EPOCHS=2, MLPERF_SUBMISSION_ORG="ci", SITE_CONFIG=tmp_path / "no-site.sh",
                PATH=":".join([*map(str, path_dirs), str(bindir), os.environ["PATH"]]))
    base.update(env)
    base = {k: v for k, v in base.items() if v is not None}  # None: not in the job's environment
    return subprocess.run([str(ROOT / "slurm/run_experiments.sh")], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env=clean_env(**base))


def errors(r):
    return [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]


def test_launch_exit_codes_are_the_tables():
    text = (ROOT / "slurm/run_experiments.sh").read_text()
    codes = dict(re.findall(r"(EXIT_\w+)=(\d+)", text.split("readonly", 1)[1].splitlines()[0]))
    assert codes == {"EXIT_BAD_INPUT": str(exit_codes.BAD_INPUT.code),
                     "EXIT_RUNTIME_MISSING": str(exit_codes.RUNTIME_MISSING.code),
                     "EXIT_IMAGE_UNREADABLE": str(exit_codes.IMAGE_UNREADABLE.code),
                     "EXIT_BIND_SOURCE_MISSING": str(exit_codes.BIND_SOURCE_MISSING.code),
                     "EXIT_CACHES_NOT_DROPPED": str(exit_codes.CACHES_NOT_DROPPED.code)}


def test_runtime_missing(tmp_path):
    r = run_job(tmp_path, CONTAINER=tmp_path / "img.sif", CONTAINER_RUNTIME="apptainer",
                PATH=f"{local_srun(tmp_path)}:/usr/bin:/bin")
    assert r.returncode == exit_codes.RUNTIME_MISSING.code, r.stderr
    assert errors(r) == [f"error: the container runtime 'apptainer' is not on the PATH of the batch host "
                         f"({os.uname().nodename}): load its module, set CONTAINER_RUNTIME, or CONTAINER=none"]


def test_image_unreadable(tmp_path):
    bindir = tmp_path / "rt"
    bindir.mkdir()
    (bindir / "singularity").symlink_to(STANDIN)
    r = run_job(tmp_path, [bindir], CONTAINER=tmp_path / "missing.sif", CONTAINER_RUNTIME="singularity")
    assert r.returncode == exit_codes.IMAGE_UNREADABLE.code, r.stderr
    assert len(errors(r)) == 1 and "container image" in errors(r)[0] and "missing.sif" in errors(r)[0]


def test_bind_source_missing(tmp_path):
    bindir = tmp_path / "rt"
    bindir.mkdir()
    (bindir / "singularity").symlink_to(STANDIN)
    image = tmp_path / "img.sif"
    image.mkdir()
    r = run_job(tmp_path, [bindir], CONTAINER=image, CONTAINER_RUNTIME="singularity", DATADIR=tmp_path / "nope")
    assert r.returncode == exit_codes.BIND_SOURCE_MISSING.code, r.stderr
    assert errors(r) == [f"error: the bind source '{tmp_path / 'nope'}' (for /data:ro) does not exist on "
                         f"{os.uname().nodename}: check DATADIR, WEIGHTS_DIR, CONTAINER_MOUNTS"]


def test_a_missing_config_is_named(tmp_path):
    r = run_job(tmp_path, DGXSYSTEM="MYSITE")
    assert r.returncode == 1 and errors(r) == [f"error: no config_MYSITE.sh in {ROOT} (DGXSYSTEM=MYSITE; the "
                                               "configs are config_*.sh)"]


def test_a_missing_dataset_stops_the_job_before_any_trial(tmp_path):
    r = run_job(tmp_path, DATADIR=tmp_path / "empty")
    assert r.returncode == exit_codes.DATASET_MISSING.code, r.stderr
    assert "the preflight failed with exit code 11" in r.stderr
    assert not list((tmp_path / "logs").glob("result_*"))


def test_a_job_that_cannot_drop_the_caches_starts_no_trial(tmp_path):
    """The rules require the page cache flushed before every run; as a user who is not root the default command
    fails, and five trials logging cache_clear false could not be submitted."""
    r = run_job(tmp_path, NEXP=5, DROP_CACHES_CMD="echo 'Permission denied' >&2; false")
    assert r.returncode == exit_codes.CACHES_NOT_DROPPED.code, r.stderr
    assert errors(r) == ["error: dropping the page cache failed on the nodes (DROP_CACHES_CMD='echo 'Permission "
                         "denied' >&2; false': Permission denied): MLPerf requires it before every run; run the job "
                         "as root, set DROP_CACHES_CMD='sudo /sbin/sysctl vm.drop_caches=3', or CLEAR_CACHES=0 for "
                         "runs not to be submitted (their logs say cache_clear false)"]
    assert not list((tmp_path / "logs").glob("result_*"))
    # asked not to: the trials run, and the job says what their logs will say
    r = run_job(tmp_path, NEXP=1, CLEAR_CACHES=0, DROP_CACHES_CMD="false")
    assert r.returncode == 0, r.stderr
    assert "CLEAR_CACHES=0: the page cache is not dropped" in r.stderr
    assert '"key": "cache_clear", "value": false' in (tmp_path / "logs" / "result_0.txt").read_text()


def _squeue(tmp_path, left):
    """``squeue`` answering ``-o %L`` (the job's time left) with ``left``."""
    d = tmp_path / "squeue-bin"
    d.mkdir(exist_ok=True)
    (d / "squeue").write_text(f'#!/bin/bash\necho "{left}"\n')
    (d / "squeue").chmod(0o755)
    return d


def test_only_the_trials_that_fit_in_the_job_start(tmp_path):
    """A job whose --time is shorter than its config's WALLTIME (the batch script's default time with another
    DGXSYSTEM): Slurm would kill the trial running at the job's end, an aborted run. The CPU config's trials are
    (15 + 5) x 5/4 = 25 min: 1:30:00 left holds 3 of 5."""
    r = run_job(tmp_path, [_squeue(tmp_path, "1:30:00")], NEXP=5, SLURM_JOB_ID=77)
    assert r.returncode == 0, r.stderr
    assert re.search(r"the job has 90 min left after \d+ min of checks: 3 of the 5 trials of 25 min fit; running 3",
                     r.stderr), r.stderr
    assert sorted(p.name for p in (tmp_path / "logs").glob("result_*")) == [f"result_{i}.txt" for i in range(3)]
    # the rest go to the same folder only with its LOGDIR (the default folder is the job's own): the warning said
    # "submit again" alone, and the 2 missing runs landed in another folder, a set of 3 + 2 no checker takes
    assert f"submit again with LOGDIR={tmp_path / 'logs'} NEXP=2 for the rest" in r.stderr, r.stderr


def test_a_trial_is_not_started_when_the_time_left_no_longer_holds_it(tmp_path):
    """The trials that fit were counted once, before the first: cache drops (up to CACHE_DROP_MINUTES each) and
    trials near their limit can leave the last one less than its time, and Slurm killed it at the job's end, an
    aborted run. The time left is asked again before each trial."""
    d = tmp_path / "squeue-bin"
    d.mkdir()
    (d / "squeue").write_text('#!/bin/bash\nn=$(cat "$0.calls" 2>/dev/null || echo 0); echo $((n + 1)) > "$0.calls"\n'
                              'if [[ $n -eq 0 ]]; then echo 1:30:00; else echo 20:00; fi\n')
    (d / "squeue").chmod(0o755)
    r = run_job(tmp_path, [d], NEXP=3, SLURM_JOB_ID=77, FAKE_TRAIN_EPOCHS=1)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (tmp_path / "logs").glob("result_*")) == ["result_0.txt"]
    assert re.search(r"the job has 20 min left, less than the 30 min a trial may take \(its limit and its cache "
                     r"drop's\): trial 2 of 3 not started \(submit again "
                     rf"with LOGDIR={re.escape(str(tmp_path / 'logs'))} NEXP=2 for the rest\)", r.stderr), r.stderr


def test_a_job_shorter_than_one_trial_starts_none(tmp_path):
    r = run_job(tmp_path, [_squeue(tmp_path, "10:00")], NEXP=5, SLURM_JOB_ID=77)
    assert r.returncode == 1, r.stderr
    assert errors(r) == ["error: the job has 10 min left, less than one trial of 25 min (TRIAL_MINUTES, "
                         "config_CPU.sh): submit with --time=02:20:00 (WALLTIME) or through slurm/submit.sh, which "
                         "takes it from the config"]
    assert not list((tmp_path / "logs").glob("result_*"))
    # exactly five trials' time: all five run
    r = run_job(tmp_path, [_squeue(tmp_path, "2:05:00")], NEXP=5, SLURM_JOB_ID=77, FAKE_TRAIN_EPOCHS=1)
    assert r.returncode == 0 and "fit; running" not in r.stderr, r.stderr
    # a day, or no limit (squeue's other answers): nothing held back
    for left in ("1-00:00:00", "UNLIMITED", "INVALID", ""):
        r = run_job(tmp_path, [_squeue(tmp_path, left)], NEXP=1, SLURM_JOB_ID=77, FAKE_TRAIN_EPOCHS=1)
        assert r.returncode == 0 and "min left" not in r.stderr, (left, r.stderr)


def test_no_trial_starts_after_the_second_failure(tmp_path):
    r = run_job(tmp_path, NEXP=5, FAKE_TRAIN_EXIT=7)
    assert r.returncode == 7
    assert sorted(p.name for p in (tmp_path / "logs").glob("result_*")) == ["result_0.txt", "result_1.txt"]
    assert "2 trials failed: the set cannot pass MLPerf review" in r.stderr and "no further trial started" in r.stderr


def test_one_trial_of_five_not_converging_is_a_set_that_passes(tmp_path):
    """MLPerf accepts one run of five that does not converge: the job exits 0 and says so, so that the documented
    steps (SBATCH_WAIT=1, under set -e) go on to the submission. It exited 3, which ended them there."""
    r = run_job(tmp_path, NEXP=5, FAKE_TRAIN_EPOCHS=1, FAKE_TRAIN_EXIT=3, FAKE_TRAIN_EXIT_TRIAL="trial_2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.findall(r"trial \d exit code (\d+)", r.stdout) == ["0", "0", "3", "0", "0"]
    assert "run_experiments: 1 of 5 trials did not converge (trial 3): MLPerf allows one; the job exits 0" in r.stdout


def test_two_jobs_on_one_logdir_never_share_a_result_file(tmp_path):
    """Two jobs submitted to one LOGDIR (the rest of a set, a rerun) at the same time: each looked for the first
    free result_<k>.txt, then tee created it later, so both could take the same k and write into one file. A
    ``tee`` that starts a second late widens that gap to make it certain."""
    import threading

    slow = tmp_path / "slow"
    slow.mkdir()
    (slow / "tee").write_text(f'#!/bin/bash\nsleep 1\nexec {shutil.which("tee")} "$@"\n')
    (slow / "tee").chmod(0o755)
    results = {}

    def job(name):
        (tmp_path / name).mkdir()
        results[name] = run_job(tmp_path / name, [slow], NEXP=1, LOGDIR=tmp_path / "logs", FAKE_TRAIN_EPOCHS=1)

    threads = [threading.Thread(target=job, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.returncode for r in results.values()] == [0, 0], [r.stderr for r in results.values()]
    logs = sorted((tmp_path / "logs").glob("result_*.txt"))
    assert [p.name for p in logs] == ["result_0.txt", "result_1.txt"]
    assert all(p.read_text().count("Beginning trial") == 1 for p in logs)


def test_result_files_are_never_overwritten(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "result_0.txt").write_text("an earlier trial\n")
    r = run_job(tmp_path, NEXP=1)
    assert r.returncode == 0, r.stderr
    assert (logs / "result_0.txt").read_text() == "an earlier trial\n"
    text = (logs / "result_1.txt").read_text()
    assert '"key": "run_stop"' in text and "first result_1.txt" in r.stdout
    # the trainer's own folder is per trial, under LOGDIR
    assert (logs / "trial_1" / "mlperf_log.txt").is_file()


def test_the_pilot_reads_its_log_with_the_runs_python_not_the_hosts(tmp_path):
    """The pilot's advice ran on the batch host's system python3, which on RHEL/CentOS 7 and 8 is 3.6: the
    package's parser does not import there (``from __future__ import annotations``), and the traceback replaced the
    DGXRUNMINUTES line. It runs with the trials' Python (the image's, or PYTHON with CONTAINER=none)."""
    old_python = tmp_path / "old-python"
    old_python.mkdir()
    (old_python / "python3").write_text('#!/bin/bash\necho "SyntaxError: future feature annotations is not defined"'
                                        ' >&2\nexit 1\n')
    (old_python / "python3").chmod(0o755)
    r = run_job(tmp_path, [old_python], PILOT=1, NEXP=5)
    assert r.returncode == 0, r.stderr
    assert re.search(r"pilot: time to train [\d.]+ min, init [\d.]+ min: set DGXRUNMINUTES=\d+", r.stdout), r.stdout
    assert "SyntaxError" not in r.stderr


def test_pilot_measures_the_time_budget(tmp_path):
    r = run_job(tmp_path, PILOT=1, NEXP=5)
    assert r.returncode == 0, r.stderr
    assert list((tmp_path / "logs").glob("result_*")) == [tmp_path / "logs" / "result_0.txt"]
    assert "trial limit=none min" in r.stdout
    m = re.search(r"pilot: time to train [\d.]+ min, init [\d.]+ min: set DGXRUNMINUTES=(\d+) DGXINITMINUTES=(\d+)",
                  r.stdout)
    assert m and int(m.group(1)) >= 1, r.stdout


def test_the_trial_limit_follows_the_gpu_check_projection(tmp_path):
    projection = tmp_path / "projection.json"
    projection.write_text(json.dumps({"nodes": {"1": {"minutes": 7.2}, "4": {"minutes": 3.0}}}))
    r = run_job(tmp_path, GPU_CHECK_PROJECTION=projection)
    assert r.returncode == 0, r.stderr
    assert f"DGXRUNMINUTES=8 from make gpu-check's projection ({projection})" in r.stdout
    assert "trial limit=16 min" in r.stdout  # (8 + 5 init) x 1.25


def _fake_gpu_check_python(tmp_path, rc, write_report):
    """A ``python`` for the job (CONTAINER=none) that plays tools/gpu_check.py: the node's checks exit ``rc``, with
    or without their report (summary.json); ``--across-nodes`` is recorded and passes. Everything else runs."""
    fake = tmp_path / "python-gpu-check"
    fake.write_text(textwrap.dedent(f"""\
        #!/bin/bash
        if [[ "${{1:-}}" == tools/gpu_check.py ]]; then
          out="${{@: -1}}"
          if [[ " $* " == *" --across-nodes "* ]]; then echo across >> "{tmp_path}/calls"; exit 0; fi
          echo node >> "{tmp_path}/calls"; mkdir -p "$out"
          {'echo {} > "$out/summary.json"' if write_report else 'echo "error: no GPU" >&2'}
          exit {rc}
        fi
        exec {sys.executable} "$@"
        """))
    fake.chmod(0o755)
    return fake


@pytest.mark.parametrize("rc,report,job_rc,calls", [
    (1, True, 1, ["node", "across"]),    # a check failed or ran out of time: the report exists, go on
    (0, True, 0, ["node", "across"]),
    (15, False, 15, ["node"]),           # gpu-check itself failed (no GPU): nothing more to do
])
def test_a_failed_check_on_the_node_still_runs_the_checks_across_nodes(tmp_path, rc, report, job_rc, calls):
    """slurm/gpu_check.sbatch: a check of the node's that failed or hit its time cap (gpu-check's exit 1, its
    report written) no longer ends the job before the checks across nodes, the part of the allocation a single
    node cannot do; the job's exit code keeps the node's failure. gpu-check failing without a report (no GPU)
    still ends it with its own code."""
    r = run_job(tmp_path, GPU_CHECK=1, PYTHON=_fake_gpu_check_python(tmp_path, rc, report))
    assert r.returncode == job_rc, r.stdout + r.stderr
    assert (tmp_path / "calls").read_text().split() == calls


@pytest.mark.parametrize("system", ["DGXH100", "DGXA100_4x8x4"])
def test_the_checks_across_nodes_keep_the_systems_images_per_gpu(tmp_path, system):
    """slurm/gpu_check.sbatch on 2 nodes with a shipped GPU config: the job's preflight judged the config's global
    batch at this job's process count (DGXH100: 96 images on 2 x 8 GPUs, 6 per GPU against its 12000 RPN
    candidates, a refused recipe, exit 10; TEST.IMS_PER_BATCH 8 not divisible by 16, exit 13), so no check across
    nodes ever ran. The 20 iterations across nodes are a check, not a result: the config's images per GPU at the
    job's processes, the recipe not judged against the RCPs. (Here 1 process per node, and MODEL.DEVICE cpu: this
    machine has no GPU.)"""
    config = dict(re.findall(r'export (\w+)="\$\{\1:-(.*)\}"', (ROOT / f"config_{system}.sh").read_text()))
    per_gpu = {k: int(re.search(rf"{k} (\d+)", config["EXTRA_CONFIG"]).group(1)) //
               (int(config["DGXNNODES"]) * int(config["DGXNGPU"])) for k in ("SOLVER.IMS_PER_BATCH", "TEST.IMS_PER_BATCH")}
    python = _fake_gpu_check_python(tmp_path, 0, True)
    text = python.read_text().replace('exec ', 'if [[ " $* " == *" -m bind_launch "* ]]; then echo "$*" >> '
                                      f'"{tmp_path}/trained"; exit 0; fi\nexec ', 1)
    python.write_text(text)
    weights = tmp_path / "R-50.pkl"
    weights.write_bytes(b"")  # the preflight checks that it exists
    r = run_job(tmp_path, GPU_CHECK=1, NEXP=0, DGXSYSTEM=system, SLURM_JOB_NUM_NODES=2, NPROC_PER_NODE=1,
                PYTHON=python, WEIGHTS=weights, EXTRA_CONFIG=config["EXTRA_CONFIG"] + " MODEL.DEVICE cpu")
    assert r.returncode == 0, r.stdout + r.stderr
    launched = (tmp_path / "trained").read_text().splitlines()  # the all-reduce, then the training iterations
    assert len(launched) == 2 and "bench/allreduce.py" in launched[0], launched
    trained = launched[1]
    assert f"SOLVER.IMS_PER_BATCH {2 * per_gpu['SOLVER.IMS_PER_BATCH']} " in trained + " "
    assert f"TEST.IMS_PER_BATCH {2 * per_gpu['TEST.IMS_PER_BATCH']} " in trained + " "
    assert (tmp_path / "calls").read_text().split() == ["node", "across"]


def test_the_site_template_asks_for_the_configs_gpus(tmp_path):
    """A site.sh copied from slurm/site.example.sh asked for 8 GPUs per node whatever the config's DGXNGPU (its
    GPU_REQUEST default overrode slurm/submit.sh's): a 4-GPU node's job was refused by Slurm."""
    import subprocess

    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "sbatch").write_text(f'#!/bin/bash\necho "$*" > "{tmp_path}/sbatch_args"\ncat > /dev/null\necho 1\n')
    (bindir / "sbatch").chmod(0o755)
    r = subprocess.run([str(ROOT / "slurm/submit.sh"), "slurm/maskrcnn_1node.sbatch"], capture_output=True, text=True,
                       timeout=60, env=clean_env(SITE_CONFIG=ROOT / "slurm/site.example.sh", DGXSYSTEM="DGXH100",
                                                 DGXNGPU=4, PATH=f"{bindir}:{os.environ['PATH']}"))
    assert r.returncode == 0, r.stderr
    assert "--gpus-per-node=4" in (tmp_path / "sbatch_args").read_text().split()


def test_the_projection_reaches_the_job_through_submit(tmp_path):
    """slurm/submit.sh sources the config, whose DGXRUNMINUTES (on paper) the job inherits: the job then never read
    make gpu-check's projection, and the job's time limit was the config's. submit.sh takes the projection for the
    config's nodes first; a gpu-check job leaves a copy of its projection where the next jobs look."""
    import subprocess

    projection = tmp_path / "results" / "gpu-check" / "projection.json"
    projection.parent.mkdir(parents=True)
    projection.write_text(json.dumps({"system": "DGXH100", "nodes": {"1": {"minutes": 4.2, "global_batch": 96},
                                                                     "4": {"minutes": 2.0, "global_batch": 128}}}))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "sbatch").write_text(f'#!/bin/bash\necho "$* DGXRUNMINUTES=$DGXRUNMINUTES" > "{tmp_path}/sbatch"\n'
                                   'cat > /dev/null\necho 1\n')
    (bindir / "sbatch").chmod(0o755)

    def submit(system):
        return subprocess.run([str(ROOT / "slurm/submit.sh"), "slurm/maskrcnn_1node.sbatch"], capture_output=True,
                              text=True, timeout=60, env=clean_env(SITE_CONFIG=tmp_path / "no-site.sh",
                                                                   DGXSYSTEM=system, RESULTS_ROOT=tmp_path / "results",
                                                                   PATH=f"{bindir}:{os.environ['PATH']}"))

    r = submit("DGXH100")
    assert r.returncode == 0, r.stderr
    assert f"submit: DGXRUNMINUTES=5 from make gpu-check's projection ({projection})" in r.stderr
    # (5 + 10 init) x 1.25 = 18 min a trial, 5 trials + 15 min
    assert (tmp_path / "sbatch").read_text().split()[3:] == ["--time=01:45:00", "--gpus-per-node=8", "DGXRUNMINUTES=5"]
    # the projection is of the DGXH100 recipes (GBS 96 epochs, 12 images per GPU): an A100 job (GBS 64) took it too
    r = submit("DGXA100")
    assert r.returncode == 0, r.stderr
    assert (f"submit: make gpu-check's projection ({projection}) is of the DGXH100 recipes, not DGXA100's: "
            "DGXRUNMINUTES from the config") in r.stderr
    assert "DGXRUNMINUTES=5" not in (tmp_path / "sbatch").read_text()
    # nor on 4 nodes, where the A100 config's global batch (128) happens to be the H100 one's
    r = submit("DGXA100_4x8x4")
    assert r.returncode == 0 and "is of the DGXH100 recipes, not DGXA100's" in r.stderr, r.stderr
    assert "DGXRUNMINUTES=2" not in (tmp_path / "sbatch").read_text()
    # the H200 configs hold the H100 recipes: an H200 job took the config's figure, as if of another recipe
    r = submit("DGXH200")
    assert r.returncode == 0, r.stderr
    assert f"submit: DGXRUNMINUTES=5 from make gpu-check's projection ({projection})" in r.stderr

    # a gpu-check job's projection replaces it
    python = _fake_gpu_check_python(tmp_path, 0, True)
    python.write_text(python.read_text().replace('mkdir -p "$out"', 'mkdir -p "$out"; echo \'{"nodes": {"1": '
                                                 '{"minutes": 9}}}\' > "$out/projection.json"', 1))
    r = run_job(tmp_path, GPU_CHECK=1, NEXP=0, PYTHON=python, RESULTS_ROOT=tmp_path / "results")
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(projection.read_text()) == {"nodes": {"1": {"minutes": 9}}}

    # a gpu-check job that projected nothing (no step figure) leaves no earlier node's projection in force
    python = _fake_gpu_check_python(tmp_path, 0, True)
    python.write_text(python.read_text().replace('mkdir -p "$out"', 'mkdir -p "$out"; rm -f "$out/projection.json"',
                                                 1))  # as gpu_check.py's report removes its own, rewritten or gone
    r = run_job(tmp_path, GPU_CHECK=1, NEXP=0, PYTHON=python, RESULTS_ROOT=tmp_path / "results")
    assert r.returncode == 0, r.stdout + r.stderr
    assert not projection.exists()
    assert "this gpu-check wrote no projection" in r.stdout


def test_weights_dir_is_read_on_the_hosts_too(tmp_path):
    """CONTAINER=none: DATADIR reached the trainer, WEIGHTS_DIR did not (the weights stayed /coco/models/R-50.pkl,
    the image's bind target): a site with its weights elsewhere got exit 12."""
    weights_dir = tmp_path / "models"
    weights_dir.mkdir()
    (weights_dir / "R-50.pkl").write_bytes(b"")
    r = run_job(tmp_path, PREFLIGHT_ONLY=1, WEIGHTS_DIR=weights_dir, DGXSYSTEM="DGXH100",
                EXTRA_CONFIG="SOLVER.IMS_PER_BATCH 4 TEST.IMS_PER_BATCH 1 MODEL.DEVICE cpu", ALLOW_NON_RCP=1,
                NPROC_PER_NODE=1)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "data and weights found" in r.stdout



def test_the_site_files_data_and_weights_reach_the_hosts_trainer(tmp_path):
    """CONTAINER=none with DATADIR and WEIGHTS_DIR set in the site file, as slurm/site.example.sh writes them (not
    exported), and not in the job's environment: the preflight looked for the dataset in /data (exit 11)."""
    weights_dir = tmp_path / "models"
    weights_dir.mkdir()
    (weights_dir / "R-50.pkl").write_bytes(b"")
    site = tmp_path / "site.sh"
    site.write_text(f'DATADIR="${{DATADIR:-{coco_layout(tmp_path / "coco")}}}"\n'
                    f'WEIGHTS_DIR="${{WEIGHTS_DIR:-{weights_dir}}}"\n')
    r = run_job(tmp_path, SITE_CONFIG=site, DATADIR=None, PREFLIGHT_ONLY=1, DGXSYSTEM="DGXH100",
                EXTRA_CONFIG="SOLVER.IMS_PER_BATCH 4 TEST.IMS_PER_BATCH 1 MODEL.DEVICE cpu", ALLOW_NON_RCP=1,
                NPROC_PER_NODE=1)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "data and weights found" in r.stdout


def test_a_pyxis_job_without_an_image_names_the_squashfs_file_it_wants(tmp_path):
    """CONTAINER_RUNTIME=pyxis and no CONTAINER: the job handed singularity/maskrcnn.sif, a file enroot cannot run,
    to --container-image. Its default is the squashfs file the Dockerfile's recipe makes (enroot import). srun's
    help goes on after the option (grep -q stopped reading there: srun's SIGPIPE failed the pipeline under
    pipefail, "the pyxis plugin is not installed")."""
    bindir = tmp_path / "pyxis-bin"
    bindir.mkdir()
    (bindir / "srun").write_text('#!/bin/bash\nif [[ "$1" == --help ]]; then echo "  --container-image=IMAGE"; '
                                 'for i in $(seq 20000); do echo "  --more-help-$i"; done; fi\n')
    (bindir / "srun").chmod(0o755)
    r = run_job(tmp_path, path_dirs=[bindir], CONTAINER_RUNTIME="pyxis", CONTAINER=None)
    assert r.returncode == exit_codes.IMAGE_UNREADABLE.code, r.stdout + r.stderr
    assert errors(r) == [f"error: the container image '{ROOT}/maskrcnn.sqsh' does not exist or is not readable "
                         "(build it from the Dockerfile: docker build, then enroot import; or set CONTAINER)"]


def test_the_preflight_of_a_pyxis_job_judges_all_its_nodes(tmp_path):
    """Under pyxis the preflight runs in a 1-node srun step (only srun enters the image); judged by that step's
    node count, a 4-node job's recipe was judged at one node's processes (DGXH100_4x8x4: 'num_image_candidates
    4000 is not 16000', exit 10) and no trial started. The job's nodes are what it judges."""
    bindir = tmp_path / "pyxis-bin"
    bindir.mkdir()
    (bindir / "srun").write_text(textwrap.dedent("""\
        #!/bin/bash
        if [[ "$1" == --help ]]; then echo "  --container-image=IMAGE  [pyxis]"; exit 0; fi
        while [[ "${1:-}" == -* ]]; do
          case "$1" in --nodes=*) export SLURM_STEP_NUM_NODES="${1#--nodes=}" ;; esac
          shift
        done
        exec "$@"
        """))
    (bindir / "python").write_text(textwrap.dedent(f"""\
        #!/bin/bash
        if [[ "$1" == tools/preflight.py ]]; then echo "$@" >> {tmp_path}/preflight; exit 0; fi
        exit 1
        """))
    for name in ("srun", "python"):
        (bindir / name).chmod(0o755)
    run_job(tmp_path, path_dirs=[bindir], CONTAINER_RUNTIME="pyxis", CONTAINER="nvcr.io#nvidia/pytorch:25.05-py3",
            SLURM_JOB_NUM_NODES=4, SLURM_JOB_ID=7, SLURM_JOB_NODELIST="n[1-4]", DGXNGPU=2, NCCL_CHECK=0)
    assert "--world-size=8 " in (tmp_path / "preflight").read_text().splitlines()[0]


def test_a_loopback_master_addr_from_the_submitting_shell_is_refused_in_a_multi_node_job(tmp_path):
    """sbatch passes the submitting shell's environment on: a MASTER_ADDR exported there for a one-node test sent
    the other nodes' ranks to their own loopback (a hang until the rendezvous timed out, blamed on the network).
    One line, before any trial; in a one-node job it is what it says."""
    bindir = tmp_path / "slurm-bin"
    bindir.mkdir()
    (bindir / "scontrol").write_text("#!/bin/bash\nprintf 'n1\\nn2\\n'\n")  # the job's nodes, n[1-2]
    (bindir / "scontrol").chmod(0o755)
    r = run_job(tmp_path, path_dirs=[bindir], MASTER_ADDR="127.0.0.1", SLURM_JOB_NODELIST="n[1-2]")
    assert r.returncode == exit_codes.BAD_INPUT.code, r.stdout + r.stderr
    assert errors(r) == ["error: MASTER_ADDR=127.0.0.1 (from the environment sbatch passed on) is a loopback address: "
                         "the job's other 1 nodes cannot reach it; unset it (the default is the job's first node, "
                         "n1)"]
    assert not (tmp_path / "logs").exists() or not list((tmp_path / "logs").glob("result_*"))
    one = run_job(tmp_path, MASTER_ADDR="127.0.0.1")  # one node (no scontrol answer: this host)
    assert one.returncode == 0, one.stdout[-2000:] + one.stderr[-2000:]


@pytest.mark.parametrize("flag", ["--label", "-l", "-ul", "--lab"])
def test_srun_labels_that_would_hide_the_mllog_lines_are_refused(tmp_path, flag):
    """SRUN_ARGS=--label (common for multi-node logs) prefixes each line with its task number: the checker reads
    only lines that begin with :::MLLOG, so every run's log failed review, and the "not converged" line was missed
    (a run that did not converge counted as a success)."""
    r = run_job(tmp_path, SRUN_ARGS=f"--exclusive {flag}")
    assert r.returncode == exit_codes.BAD_INPUT.code, r.stdout + r.stderr
    assert len(errors(r)) == 1 and errors(r)[0].startswith(f"error: SRUN_ARGS='--exclusive {flag}': {flag} "), r.stderr
    assert not (tmp_path / "logs").exists() or not list((tmp_path / "logs").glob("result_*"))
    # a value attached to a short option is not a label (-pgeneral: the partition), nor is another long option
    assert run_job(tmp_path, SRUN_ARGS="--exclusive --mpi=none -pgeneral -Cintel --nodelist=n1").returncode == 0
    r = run_job(tmp_path, SLURM_LABELIO="1")  # srun's --label from the environment
    assert r.returncode == exit_codes.BAD_INPUT.code and errors(r)[0].startswith("error: SLURM_LABELIO=1 "), r.stderr


def test_with_the_site_template_a_host_with_only_apptainer_runs_apptainer(tmp_path):
    """The site template (every site copies it) set CONTAINER_RUNTIME to singularity, so the job's fallback to
    apptainer where singularity is not installed never ran: exit 20 on an Apptainer-only cluster."""
    bindir = tmp_path / "apptainer-bin"
    bindir.mkdir()
    (bindir / "apptainer").write_text("#!/bin/bash\nexit 0\n")
    (bindir / "apptainer").chmod(0o755)
    path = f"{bindir}:{local_srun(tmp_path)}:/usr/bin:/bin"
    assert not any(os.path.exists(os.path.join(d, "singularity")) for d in path.split(":"))
    r = run_job(tmp_path, CONTAINER=tmp_path / "missing.sif", SITE_CONFIG=ROOT / "slurm" / "site.example.sh",
                PATH=path)
    # past the runtime check (apptainer found), stopped at the image
    assert r.returncode == exit_codes.IMAGE_UNREADABLE.code, r.stdout + r.stderr


def test_a_logdir_that_takes_no_file_is_said_at_once(tmp_path):
    """A LOGDIR that exists but takes no file (read-only, another user's, a full disk or inode quota): mkdir -p
    passed, and the job looped over result indices until its wall time (claiming a result file retried any error
    as "taken"); a multi-node job blamed NCCL. As root no mode bit stops a write: a read-only bind mount of the
    folder here."""
    logs = tmp_path / "logs"
    logs.mkdir()
    import subprocess

    ro = tmp_path / "ro"
    ro.mkdir()
    mounted = subprocess.run(["mount", "--bind", "-o", "ro", str(logs), str(ro)], capture_output=True).returncode == 0
    if not mounted:
        pytest.skip("no bind mount here (needs root)")
    try:
        r = run_job(tmp_path, NEXP=2, LOGDIR=ro)
    finally:
        subprocess.run(["umount", str(ro)], check=False)
    assert r.returncode == exit_codes.BIND_SOURCE_MISSING.code, r.stdout + r.stderr
    assert errors(r) == [f"error: LOGDIR {ro} exists but this job cannot write a file in it (read-only, another "
                         "user's, or its disk or inode quota full)"]


def test_caches_that_cannot_be_dropped_before_a_later_trial_fail_that_trial(tmp_path):
    """The drop before trial 2 failed: a warning, and the trial ran to a log saying cache_clear false, which no
    submission takes, while the job exited 0. That trial is not run and counts as failed."""
    count = tmp_path / "drops"
    drop = f'n=$(cat {count} 2> /dev/null || echo 0); echo $((n + 1)) > {count}; [ "$n" -lt 2 ]'
    r = run_job(tmp_path, NEXP=3, DROP_CACHES_CMD=drop, FAKE_TRAIN_EPOCHS=1)
    assert r.returncode == exit_codes.CACHES_NOT_DROPPED.code, r.stdout + r.stderr
    assert re.findall(r"trial \d exit code (\d+)", r.stdout) == ["0", "23", "23"], r.stdout
    assert "trial 2 is not run (a log saying cache_clear false cannot be submitted)" in r.stdout  # its log
    assert '"key": "cache_clear"' not in (tmp_path / "logs" / "result_1.txt").read_text()
    assert (tmp_path / "logs" / "trials.txt").read_text().strip() == \
        "run_experiments: trials (exit codes): result_0.txt: 0 result_1.txt: 23 result_2.txt: 23"


def test_a_crash_is_the_jobs_code_even_when_a_run_that_did_not_converge_follows(tmp_path):
    """The job's code was its last failure's: a crash (7) in one trial and a run that did not converge (3) in
    the next made the job exit 3, which the exit-code table reads as the one run MLPerf allows."""
    fail = tmp_path / "fail.py"  # a training script: exit 7 in the first trial, 3 (not converged) after it
    fail.write_text("import os, sys\nsys.exit(7 if os.environ.get('TRIAL_NAME') == 'trial_0' else 3)\n")
    r = run_job(tmp_path, NEXP=5, TRAIN_SCRIPT=str(fail))
    assert re.findall(r"trial \d exit code (\d+)", r.stdout) == ["7", "3"], r.stdout + r.stderr
    assert r.returncode == 7


def test_a_job_cancelled_mid_trial_keeps_the_trainers_last_lines_in_its_result_file(tmp_path):
    """scancel (or the job's time limit) signals every process of the batch step: tee, copying the trial's output
    into result_<k>.txt, died at once, and the lines the trainer writes as it stops (its run_stop) were lost from
    the file a reviewer reads; under Slurm the batch shell died too, and slurmstepd killed what was left of the
    step. tee now ignores the signal and copies to the end of the output, and the batch shell waits for the
    trial's pipeline before it stops (no further trial)."""
    import signal
    import subprocess
    import time

    trainer = tmp_path / "stops_on_term.py"
    trainer.write_text(textwrap.dedent("""\
        import signal, sys, time
        def stop(signum, frame):
            time.sleep(1)  # the trainer's final work: the line comes after tee has had the signal
            print(':::MLLOG {"key": "run_stop", "value": null, "metadata": {"status": "aborted"}}', flush=True)
            sys.exit(143)
        signal.signal(signal.SIGTERM, stop)
        print("trainer started", flush=True)
        while True:
            time.sleep(0.1)
        """))
    bindir = local_srun(tmp_path)
    env = dict(DGXSYSTEM="CPU", CONTAINER="none", NEXP=2, PYTHON=sys.executable, LOGDIR=tmp_path / "logs",
               REPO=ROOT, TRAIN_SCRIPT=trainer, DATADIR=coco_layout(tmp_path / "coco"), DROP_CACHES_CMD="true",
               MLPERF_SUBMISSION_ORG="ci", SITE_CONFIG=tmp_path / "no-site.sh", DGXNGPU=1,
               PATH=f"{bindir}:{os.environ['PATH']}")
    job = subprocess.Popen([str(ROOT / "slurm/run_experiments.sh")], cwd=tmp_path, env=clean_env(**env),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    result = tmp_path / "logs" / "result_0.txt"
    deadline = time.time() + 120
    while not (result.exists() and "trainer started" in result.read_text()):
        assert time.time() < deadline and job.poll() is None, job.stdout.read().decode() if job.poll() is not None \
            else "the trainer did not start"
        time.sleep(0.2)
    os.killpg(job.pid, signal.SIGTERM)  # what slurmstepd does to the batch step
    out = job.communicate(timeout=60)[0].decode()
    assert '"run_stop"' in result.read_text(), result.read_text()[-2000:]
    assert job.returncode == 143 and "run_experiments: stopped (SIGTERM) during trial 1 of 2: no further trial" \
        in out, out[-3000:]
    assert not (tmp_path / "logs" / "result_1.txt").exists()


def test_the_gpu_check_job_binds_the_golden_outputs_beside_the_checkout(tmp_path):
    """make gpu-check IMAGE=... binds ../shared (the parity stage's golden outputs) into the image; the same checks
    through slurm/gpu_check.sbatch did not, and their parity stage said NOT RUN (or ran against the CPU only)."""
    shared = (ROOT / ".." / "shared").resolve()
    if not shared.is_dir():
        pytest.skip(f"no ../shared beside the checkout ({shared})")
    bindir = tmp_path / "rt"
    bindir.mkdir()
    (bindir / "singularity").write_text(f'#!/bin/bash\necho "$*" >> {tmp_path}/singularity.log\n')
    (bindir / "singularity").chmod(0o755)
    image = tmp_path / "img.sif"
    image.write_text("")
    run_job(tmp_path, [bindir], CONTAINER=image, CONTAINER_RUNTIME="singularity", WEIGHTS="", NEXP=0, GPU_CHECK=1)
    calls = (tmp_path / "singularity.log").read_text().splitlines()
    gpu_check = [c for c in calls if "gpu_check" in c]
    assert gpu_check and all(f"{shared}:/workspace/shared:ro" in c for c in gpu_check), calls
    (tmp_path / "singularity.log").unlink()
    run_job(tmp_path, [bindir], CONTAINER=image, CONTAINER_RUNTIME="singularity", WEIGHTS="", NEXP=1)
    trials = (tmp_path / "singularity.log").read_text()
    assert "run_and_time.sh" in trials and "/workspace/shared" not in trials, trials  # the trials' binds: theirs
