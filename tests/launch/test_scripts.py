"""Shell scripts: shellcheck, bash -n, system configs (NVIDIA values), run_and_time.sh behaviour, profiling modes."""

import csv
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FAKE = "tests/cluster/fake_train.py"

SHELL_SCRIPTS = sorted(
    [p for p in ROOT.glob("*.sh")]
    + list((ROOT / "slurm").glob("*.sh")) + list((ROOT / "slurm").glob("*.sbatch"))
    + list((ROOT / "singularity").glob("*.sh")) + list((ROOT / "tools").glob("*.sh"))
    + list((ROOT / "tests" / "cluster").glob("*.sh"))
)
CONFIGS = ["DGX1", "DGXA100", "DGXA100_4x8x4", "DGXH100", "DGXH200", "DGXH100_4x8x4", "DGXH200_4x8x4", "CPU"]
CONFIG_VARS = ["DGXSYSTEM", "DGXNNODES", "DGXNGPU", "DGXSOCKETCORES", "DGXNSOCKET", "DGXHT", "WALLTIME",
               "EXTRA_PARAMS", "EXTRA_CONFIG", "TRIAL_MINUTES", "DGXRUNMINUTES", "DGXINITMINUTES", "NEXP"]


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "DGX")) and k not in (
               "MASTER_ADDR", "MASTER_PORT", "EXTRA_CONFIG", "EXTRA_PARAMS", "WALLTIME", "CONFIG_FILE", "DTYPE",
               "NEXP", "TRIAL_MINUTES",
               "WEIGHTS", "DATADIR", "PATHS_CATALOG", "PROFILE", "LOGDIR", "TRAIN_SCRIPT", "NPROC_PER_NODE")}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def test_all_scripts_found():
    names = {p.relative_to(ROOT).as_posix() for p in SHELL_SCRIPTS}
    for must in ("run_and_time.sh", "config_DGX1.sh", "config_DGXA100.sh", "config_DGXA100_4x8x4.sh",
                 "config_CPU.sh", "slurm/maskrcnn_4node.sbatch", "slurm/maskrcnn_1node.sbatch",
                 "slurm/run_experiments.sh", "singularity/build.sh", "tests/cluster/install_deps.sh"):
        assert must in names


@pytest.mark.slow
@pytest.mark.parametrize("script", SHELL_SCRIPTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_bash_syntax(script):
    r = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.slow
def test_shellcheck_clean():
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck not installed (tests/cluster/install_deps.sh installs it)")
    r = subprocess.run(["shellcheck", "-S", "warning", "-s", "bash", *map(str, SHELL_SCRIPTS)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


BASH_44_GUARD = "((BASH_VERSINFO[0] * 100 + BASH_VERSINFO[1] >= 404)) || set +u"


def test_scripts_that_expand_arrays_under_set_u_run_on_bash_before_4_4():
    """bash before 4.4 (RHEL/CentOS 7 hosts: 4.2) stops with "unbound variable" at "${arr[@]}" of an empty array
    under set -u (e.g. run_experiments.sh's in_image with CONTAINER=none). No such bash here (Debian has only 5.x), so
    this reads the scripts: each one that sets -u and expands an array turns set -u off there, right after. (Not
    tests/cluster/install_deps.sh: it runs on this project's CI machines.)"""
    for script in [p for p in SHELL_SCRIPTS if "tests" not in p.relative_to(ROOT).parts]:
        text = script.read_text()
        if re.search(r"^set -\w*u", text, re.M) and re.search(r"\$\{[A-Za-z_]\w*\[[@*]\]\}", text):
            lines = text.splitlines()
            at = next(i for i, ln in enumerate(lines) if re.match(r"set -\w*u", ln))
            assert BASH_44_GUARD in lines[at + 1:at + 3], script.relative_to(ROOT)


def test_executable_bits():
    for rel in ("run_and_time.sh", "slurm/run_experiments.sh", "singularity/build.sh",
                "tests/cluster/install_deps.sh"):
        assert os.access(ROOT / rel, os.X_OK), rel
    # every program with a #! line runs as the docs show it (tools/review_logs.py RESULTS_DIR: "Permission denied")
    scripts = [p for folder in ("tools", "bench") for p in sorted((ROOT / folder).iterdir())
               if p.is_file() and p.read_bytes()[:2] == b"#!"]
    assert len(scripts) > 20 and [str(p.relative_to(ROOT)) for p in scripts if not os.access(p, os.X_OK)] == []


@pytest.mark.slow  # starts a process as another user
@pytest.mark.skipif(os.geteuid() != 0, reason="runs the script as an unprivileged user: needs root to switch")
def test_install_deps_fails_under_ci_where_the_root_only_tests_would_skip(tmp_path):
    """Run without root, install_deps.sh printed what it could not install and exited 0, and the cluster, container
    and failure tests then skipped: a CI run without root passed having tested less. Under CI=true it fails
    instead (as a missing ../shared does, tests/helpers.require_shared); elsewhere it still only warns."""
    script = str(ROOT / "tests" / "cluster" / "install_deps.sh")
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "bash", script]
    env = dict(clean_env(), HOME=str(tmp_path))
    env.pop("CI", None)
    ci = subprocess.run(nobody, env=dict(env, CI="true"), capture_output=True, text=True, cwd=tmp_path)
    assert ci.returncode == 1 and "CI=true" in ci.stderr and "root" in ci.stderr, ci.stdout + ci.stderr
    local = subprocess.run(nobody, env=env, capture_output=True, text=True, cwd=tmp_path)
    assert local.returncode == 0, local.stdout + local.stderr


@pytest.mark.slow  # starts a process
@pytest.mark.skipif(os.geteuid() != 0, reason="the apt-get path is root's")
def test_an_apt_get_that_fails_is_one_line_naming_its_log(tmp_path):
    """No network, a broken third-party repository or unattended-upgrades holding dpkg's lock: apt-get's pages of
    output ended make test before any test ran, with no line saying what failed. One line (its last error, the
    log's path); under CI=true exit 1, elsewhere exit 0 as without root (the tests that need them then skip)."""
    fake = tmp_path / "bin"
    fake.mkdir()
    for name, body in (("dpkg-query", "exit 1"), ("dpkg", "exit 0"),
                       ("apt-get", 'if [[ "$*" == *install* ]]; then echo "Reading package lists..."; '
                                   'echo "E: Unable to locate package slurm-wlm" >&2; exit 100; fi')):
        (fake / name).write_text(f"#!/bin/bash\n{body}\n")
        (fake / name).chmod(0o755)
    env = {k: v for k, v in clean_env(PATH=f"{fake}:{os.environ['PATH']}", POLICY_RC_D=str(tmp_path / "policy"),
                                      TMPDIR=str(tmp_path)).items() if k != "CI"}
    script = str(ROOT / "tests" / "cluster" / "install_deps.sh")
    for ci, code in (("true", 1), (None, 0)):
        r = subprocess.run(["bash", script], env=dict(env, **({"CI": ci} if ci else {})), capture_output=True,
                           text=True, cwd=tmp_path)
        err = r.stderr.strip().splitlines()
        assert r.returncode == code and len(err) == 1, (ci, r.returncode, r.stdout, r.stderr)
        assert "apt-get could not install" in err[0] and "E: Unable to locate package slurm-wlm" in err[0], err
        log = err[0].rsplit("output in ", 1)[1].split(")")[0]
        assert "Reading package lists" in open(log).read(), log
        assert not (tmp_path / "policy").exists()


@pytest.mark.slow  # starts a process
@pytest.mark.skipif(os.geteuid() != 0, reason="the apt-get path is root's")
def test_install_deps_waits_for_dpkgs_lock(tmp_path):
    """unattended-upgrades holding dpkg's lock on a fresh VM: apt-get waits for it (DPkg::Lock::Timeout), but dpkg
    --configure -a, run first, has no such option and failed at once ("dpkg frontend lock was locked")."""
    fake, calls = tmp_path / "bin", tmp_path / "calls"
    fake.mkdir()
    for name, body in (("dpkg-query", "exit 1"), ("apt-get", "exit 0"),
                       ("dpkg", f'echo dpkg >> {calls}; if [[ $(wc -l < {calls}) -le 2 ]]; then '
                                'echo "dpkg: error: dpkg frontend lock was locked by another process with pid 7" >&2; '
                                "exit 2; fi")):
        (fake / name).write_text(f"#!/bin/bash\n{body}\n")
        (fake / name).chmod(0o755)
    env = {k: v for k, v in clean_env(PATH=f"{fake}:{os.environ['PATH']}", POLICY_RC_D=str(tmp_path / "policy"),
                                      TMPDIR=str(tmp_path), DPKG_LOCK_RETRY_S="1").items() if k != "CI"}
    r = subprocess.run(["bash", str(ROOT / "tests" / "cluster" / "install_deps.sh")], env=dict(env, CI="true"),
                       capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert r.returncode == 0 and calls.read_text().split() == ["dpkg"] * 3, (r.stdout, r.stderr)
    assert not list(tmp_path.glob("install_deps.*"))  # its log, and the log of dpkg's tries, removed


@pytest.mark.slow  # starts a process as another user
@pytest.mark.skipif(os.geteuid() != 0, reason="runs the script as an unprivileged user: needs root to switch")
def test_install_deps_asks_for_the_headers_of_a_python_without_them():
    """inductor's C++ kernels include Python.h: a Debian python3 without libpython3.X-dev failed every compiled
    test (CppCompileError) on a fresh machine; the tests' interpreter (TEST_PYTHON, from make test) is asked where
    its headers are, and missing ones are installed with the rest (here, as nobody, named: nothing installed)."""
    import tempfile

    script = str(ROOT / "tests" / "cluster" / "install_deps.sh")
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "bash", script]
    tmp_path = Path(tempfile.mkdtemp())  # one nobody can enter (pytest's is root's alone)
    tmp_path.chmod(0o755)
    no_headers = tmp_path / "python-without-headers"
    no_headers.write_text(f"#!/bin/bash\necho {tmp_path}/include 3.97\n")  # a version whose headers are not here
    no_headers.chmod(0o755)
    env = {k: v for k, v in clean_env(HOME=str(tmp_path)).items() if k != "CI"}
    r = subprocess.run(nobody, env=dict(env, TEST_PYTHON=str(no_headers)), capture_output=True, text=True,
                       cwd=tmp_path)
    assert r.returncode == 0 and "libpython3.97-dev" in r.stderr, r.stdout + r.stderr
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "Python.h").write_text("")
    r = subprocess.run(nobody, env=dict(env, TEST_PYTHON=str(no_headers)), capture_output=True, text=True,
                       cwd=tmp_path)
    assert "libpython" not in r.stdout + r.stderr, r.stdout + r.stderr
    shutil.rmtree(tmp_path)


@pytest.mark.slow  # starts the script
@pytest.mark.skipif(os.geteuid() != 0, reason="the install path runs as root")
@pytest.mark.parametrize("leftover", ["ours", "the site's"])
def test_install_deps_repairs_what_a_killed_run_left(tmp_path, leftover):
    """A run killed in dpkg left packages half-configured: every later apt-get install refused ("dpkg was
    interrupted, you must manually run 'dpkg --configure -a'"). A run killed after it wrote policy-rc.d (exit 101:
    no service starts) left it for good: every later run found the file, took it for the site's and kept it. The
    script finishes dpkg's work first, and removes a policy file it recognises as its own, never the site's."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    for name, body in (("dpkg-query", "exit 1"), ("dpkg", f'echo "dpkg $*" >> {log}'),
                       ("apt-get", f'echo "apt-get $*" >> {log}')):
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    policy = tmp_path / "policy-rc.d"
    script = str(ROOT / "tests" / "cluster" / "install_deps.sh")
    if leftover == "ours":  # what a run killed after writing it left
        subprocess.run(["bash", "-c", f'source <(sed -n "/^policy_file()/,/^}}/p" {script}); policy_file > {policy}'],
                       check=True)
    else:
        policy.write_text("#!/bin/sh\n# the site's\nexit 101\n")
    env = {k: v for k, v in clean_env(HOME=str(tmp_path)).items() if k != "CI"}
    env.update(PATH=f"{bin_dir}:{env['PATH']}", POLICY_RC_D=str(policy))
    r = subprocess.run(["bash", script], env=env, capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    calls = log.read_text().splitlines()
    assert calls[0] == "dpkg --configure -a" and calls[-1].startswith("apt-get -o DPkg::Lock::Timeout=300 install"), \
        calls
    assert policy.exists() == (leftover == "the site's")


def source_config(name, **env):
    script = f"source ./config_{name}.sh && " + " && ".join(f'printf "%s=%s\\n" {v} "${{{v}-}}"' for v in
                                                          CONFIG_VARS + ["CONFIG_FILE", "DTYPE", "WEIGHTS"])
    r = subprocess.run(["bash", "-c", script], cwd=ROOT, env=clean_env(**env), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return dict(line.split("=", 1) for line in r.stdout.splitlines())


def overrides(extra_config):
    toks = extra_config.split()
    return dict(zip(toks[0::2], toks[1::2]))


@pytest.mark.slow
@pytest.mark.parametrize("name", CONFIGS)
def test_configs_export_nvidia_variables(name):
    v = source_config(name)
    assert v["DGXSYSTEM"] == name
    assert re.fullmatch(r"\d\d:\d\d:\d\d", v["WALLTIME"])
    assert int(v["DGXNNODES"]) >= 1 and int(v["DGXNGPU"]) >= 1
    assert len(v["EXTRA_CONFIG"].split()) % 2 == 0


@pytest.mark.slow
@pytest.mark.parametrize("name,run_minutes", [("DGX1", 160), ("DGXA100", 90), ("DGXA100_4x8x4", 33)])
def test_time_budget_derives_from_the_expected_run_time(name, run_minutes):
    """NVIDIA's v0.7 runs took 150-160 / 79-87 / 27-33 min: a trial gets that plus 5 min of init, +25 %, and the
    job NEXP trials + 15 min (5 x 4-node trials: 4 h 10, not the 2 h that 5 x 33 min runs do not fit in)."""
    v = source_config(name)
    trial = (run_minutes + 5) * 5 // 4
    assert (int(v["DGXRUNMINUTES"]), int(v["TRIAL_MINUTES"])) == (run_minutes, trial)
    h, m, _ = map(int, v["WALLTIME"].split(":"))
    assert h * 60 + m == 5 * trial + 15
    fewer = source_config(name, NEXP=2)
    h, m, _ = map(int, fewer["WALLTIME"].split(":"))
    assert h * 60 + m == 2 * trial + 15


@pytest.mark.slow  # sources the configs (bash)
@pytest.mark.parametrize("name,folder", [("DGX1", "dgx1_ngc20.06_pytorch"), ("DGXA100", "dgxa100_ngc20.06_pytorch")])
def test_the_v07_configs_are_the_command_lines_of_nvidias_published_runs(name, folder):
    """Differential against NVIDIA's v0.7 result logs (../shared/reference_logs), which print each run's command
    line: our config_DGXA100.sh stopped at SOLVER.MAX_ITER 80000 where NVIDIA's A100 runs had 40000."""
    import gzip
    import shlex

    from helpers import SHARED, require_shared

    path = os.path.join(SHARED, "reference_logs", "v0.7", folder, "result_0.txt.gz")
    require_shared(path, "NVIDIA's v0.7 reference logs")
    with gzip.open(path, "rt", errors="replace") as f:
        line = next(ln for ln in f if "tools/train_mlperf.py" in ln and ln.startswith("+ "))
    words = shlex.split(line[2:])
    nvidia = overrides(" ".join(words[words.index("--config-file") + 2:]))
    for key in ("DTYPE", "PATHS_CATALOG", "MODEL.WEIGHT", "DISABLE_REDUCED_LOGGING"):  # run_and_time.sh's own
        nvidia.pop(key)
    ours = overrides(source_config(name)["EXTRA_CONFIG"])
    assert ours == nvidia


@pytest.mark.slow
def test_nvidia_config_values():
    dgx1 = source_config("DGX1")
    assert (dgx1["DGXNNODES"], dgx1["DGXNGPU"], dgx1["DGXSOCKETCORES"], dgx1["DGXNSOCKET"], dgx1["DGXHT"],
            dgx1["WALLTIME"]) == ("1", "8", "", "", "", "17:25:00")  # empty: bind_launch reads the machine
    o = overrides(dgx1["EXTRA_CONFIG"])
    assert (o["SOLVER.BASE_LR"], o["SOLVER.IMS_PER_BATCH"], o["SOLVER.WARMUP_ITERS"], o["SOLVER.STEPS"],
            o["MODEL.RPN.FPN_POST_NMS_TOP_N_TRAIN"], o["NHWC"]) == ("0.06", "48", "625", "(24000,32000)", "6000",
                                                                   "True")
    assert float(o["SOLVER.WARMUP_FACTOR"]) == pytest.approx(9.6e-5)
    a100 = overrides(source_config("DGXA100")["EXTRA_CONFIG"])
    assert (a100["SOLVER.BASE_LR"], a100["SOLVER.IMS_PER_BATCH"], a100["SOLVER.WARMUP_ITERS"],
            a100["SOLVER.STEPS"]) == ("0.08", "64", "800", "(18000,24000)")
    four = source_config("DGXA100_4x8x4")
    assert (four["DGXNNODES"], four["DGXNGPU"]) == ("4", "8")
    o = overrides(four["EXTRA_CONFIG"])
    assert (o["SOLVER.BASE_LR"], o["SOLVER.IMS_PER_BATCH"], o["SOLVER.WARMUP_ITERS"], o["SOLVER.STEPS"],
            o["MODEL.RPN.FPN_POST_NMS_TOP_N_TRAIN"]) == ("0.16", "128", "625", "(9000,12000)", "4000")
    assert float(o["SOLVER.WARMUP_FACTOR"]) == pytest.approx(2.56e-4)
    # images per GPU = GBS / (nodes * gpus); FPN post-NMS top-N = 1000 per image
    assert int(o["SOLVER.IMS_PER_BATCH"]) // (4 * 8) * 1000 == int(o["MODEL.RPN.FPN_POST_NMS_TOP_N_TRAIN"])
    cpu = source_config("CPU")
    assert cpu["CONFIG_FILE"] == "configs/e2e_mask_rcnn_synthetic_cpu.yaml" and cpu["DTYPE"] == "float32"
    assert cpu["WEIGHTS"] == "" and cpu["DGXSOCKETCORES"] == ""


@pytest.mark.slow
def test_config_values_overridable_from_env():
    v = source_config("DGXA100_4x8x4", DGXNGPU=4, WALLTIME="00:30:00", EXTRA_CONFIG="SOLVER.BASE_LR 0.02")
    assert (v["DGXNGPU"], v["WALLTIME"], v["EXTRA_CONFIG"]) == ("4", "00:30:00", "SOLVER.BASE_LR 0.02")


def sbatch_header(path):
    opts = {}
    for line in Path(path).read_text().splitlines():
        m = re.match(r"#SBATCH\s+--([\w-]+)(?:=(\S+))?", line)
        if m:
            opts[m.group(1)] = m.group(2)
    return opts


@pytest.mark.parametrize("script,config", [("slurm/maskrcnn_4node.sbatch", "DGXH100_4x8x4"),
                                           ("slurm/maskrcnn_1node.sbatch", "DGXH100")])
@pytest.mark.slow
def test_sbatch_headers_match_configs(script, config):
    h = sbatch_header(ROOT / script)
    v = source_config(config)
    assert h["nodes"] == v["DGXNNODES"]
    assert h["ntasks-per-node"] == "1"
    assert "exclusive" in h
    # the node's whole memory, as NVIDIA's run.sub asks: where Slurm schedules memory, --exclusive alone gets the
    # site's default per CPU or node, and eight trainers with their loader workers are killed at its limit
    assert h["mem"] == "0"
    assert h["gpus-per-node"] == v["DGXNGPU"]
    assert h["time"] == v["WALLTIME"]
    assert f'DGXSYSTEM="${{DGXSYSTEM:-{config}}}"' in (ROOT / script).read_text()


def test_run_experiments_uses_srun_per_node_and_container():
    text = (ROOT / "slurm/run_experiments.sh").read_text()
    assert "--ntasks-per-node=1" in text and "--kill-on-bad-exit=1" in text
    assert '"${DATADIR}:/data:ro"' in text and '"${LOGDIR}:/results"' in text
    assert '"${REPO}:/workspace/object_detection:ro"' in text  # the checkout over the image's copy
    assert 'result_${index}.txt' in text and 'NEXP="${NEXP:-5}"' in text and "MLPERF_CACHE_CLEARED=1" in text
    wrapper = (ROOT / "slurm/in_container.sh").read_text()
    assert 'exec --cleanenv --nv' in wrapper and "PYTHONNOUSERSITE=1" in wrapper
    assert ":::MLLOG" not in text  # cache_clear is logged once, by the trainer, not hand-written here
    assert '"--time=${TRIAL_MINUTES}"' in text
    assert '"${CONTAINER}" == none' in text


# ------------------------------------------------------------------------------------------------ run_and_time.sh
def run_and_time(tmp_path, *args, **env):
    """run_and_time.sh with the stand-in trainer; its preflight is skipped (PREFLIGHT_DONE=1: no dataset here)
    unless a test passes PREFLIGHT_DONE=0."""
    base = dict(DGXSYSTEM="CPU", PYTHON=sys.executable, TRAIN_SCRIPT=FAKE, LOGDIR=tmp_path / "results",
                NPROC_PER_NODE=1, PREFLIGHT_DONE=1)
    base.update(env)
    return subprocess.run([str(ROOT / "run_and_time.sh"), *args], cwd=tmp_path, env=clean_env(**base),
                          capture_output=True, text=True, timeout=180)


@pytest.mark.slow
def test_run_and_time_success_prints_result(tmp_path):
    r = run_and_time(tmp_path, "SOLVER.MAX_ITER", "10", MLPERF_SUBMISSION_ORG="ThaiSC")
    assert r.returncode == 0, r.stderr
    assert re.search(r"^STARTING TIMING RUN AT \d{4}-\d\d-\d\d ", r.stdout, re.M)
    m = re.search(r"^RESULT,OBJECT_DETECTION,,(\d+),ThaiSC,(\d{4}-\d\d-\d\d .+)$", r.stdout, re.M)
    assert m, r.stdout[-2000:]
    assert ":::MLLOG" in r.stdout and '"key": "run_stop"' in r.stdout
    # config_CPU.sh overrides: fp32, no weights, no paths catalog; user overrides last
    assert (f"overrides=OUTPUT_DIR {tmp_path / 'results' / 'output'} DTYPE float32 DATASETS.DATA_DIR "
            "datasets/synthetic DISABLE_REDUCED_LOGGING True SOLVER.MAX_ITER 10") in r.stderr
    # the run writes under LOGDIR only (its OUTPUT_DIR), as inside a read-only image
    assert (tmp_path / "results" / "output" / "mlperf_log.txt").is_file()
    assert "config=configs/e2e_mask_rcnn_synthetic_cpu.yaml" in r.stderr


@pytest.mark.slow
def test_run_and_time_passes_nvidia_fixed_args(tmp_path):
    stub = tmp_path / "stub.py"
    stub.write_text("import os, sys\n"
                    "open(os.path.join(os.environ['STUB_OUT'], 'argv' + os.environ['LOCAL_RANK']), 'w')"
                    ".write('ARGV ' + ' '.join(sys.argv[1:]))\n")
    r = run_and_time(tmp_path, DGXSYSTEM="DGX1", TRAIN_SCRIPT=stub, NPROC_PER_NODE=2, STUB_OUT=tmp_path)
    assert r.returncode == 0, r.stderr
    argv = [(tmp_path / f"argv{i}").read_text() for i in range(2)]
    assert argv[0].startswith("ARGV --local_rank=")
    want = (f"--config-file configs/e2e_mask_rcnn_R_50_FPN_1x.yaml OUTPUT_DIR {tmp_path / 'results' / 'output'} "
            "DTYPE float16 PATHS_CATALOG "
            "maskrcnn_benchmark/config/paths_catalog_dbcluster.py MODEL.WEIGHT /coco/models/R-50.pkl "
            "DISABLE_REDUCED_LOGGING True SOLVER.BASE_LR 0.06")
    assert want in argv[0]
    assert argv[0].endswith("NHWC True")
    assert "DATASETS.DATA_DIR" not in argv[0]  # no DATADIR: the catalog's /data
    assert "RESULT,OBJECT_DETECTION,," in r.stdout


@pytest.mark.slow
def test_run_and_time_takes_every_line_and_paths_from_where_it_was_started(tmp_path):
    """An EXTRA_CONFIG written over two lines (a site file's long recipe) lost every override after the first line:
    the run trained the YAML's batch and steps under the recipe's learning rate. A relative DATADIR or WEIGHTS was
    read from the checkout (the script changes into it), not from where the user started it, as LOGDIR is."""
    stub = tmp_path / "stub.py"
    stub.write_text("import os, sys\nopen(os.path.join(os.environ['STUB_OUT'], 'argv'), 'w')"
                    ".write(' '.join(sys.argv[1:]))\n")
    r = run_and_time(tmp_path, TRAIN_SCRIPT=stub, STUB_OUT=tmp_path, DATADIR="data/coco",
                     WEIGHTS="models/R-50.pkl", EXTRA_CONFIG="SOLVER.BASE_LR 0.06\nSOLVER.MAX_ITER 7",
                     EXTRA_PARAMS="--seed 3\n--timeout 60")
    assert r.returncode == 0, r.stderr
    argv = (tmp_path / "argv").read_text()
    assert "SOLVER.BASE_LR 0.06 SOLVER.MAX_ITER 7" in argv and "--seed 3 --timeout 60" in argv, argv
    assert f"DATASETS.DATA_DIR {tmp_path / 'data' / 'coco'} " in argv, argv
    assert f"MODEL.WEIGHT {tmp_path / 'models' / 'R-50.pkl'} " in argv, argv
    r = run_and_time(tmp_path, TRAIN_SCRIPT=stub, STUB_OUT=tmp_path, WEIGHTS="catalog://ImageNetPretrained/MSRA/R-50")
    assert r.returncode == 0, r.stderr
    assert "MODEL.WEIGHT catalog://ImageNetPretrained/MSRA/R-50 " in (tmp_path / "argv").read_text()


@pytest.mark.slow
def test_run_and_time_propagates_failure(tmp_path):
    r = run_and_time(tmp_path, FAKE_TRAIN_EXIT=7)
    assert r.returncode == 7, r.stdout + r.stderr
    assert "RESULT," not in r.stdout
    assert "training exited with code 7" in r.stderr


STOPPING_STUB = """
import os, signal, sys, time
out = os.environ["STUB_OUT"]

def stop(signum, frame):
    time.sleep(2)  # a trainer's cleanup: run_stop aborted, the scorer shut down
    open(os.path.join(out, "cleaned"), "w").close()
    sys.exit(128 + signum)

signal.signal(signal.SIGTERM, stop)
open(os.path.join(out, "started"), "w").close()
time.sleep(60)
"""


@pytest.mark.slow
@pytest.mark.parametrize("to", ["the step", "the script"])
def test_run_and_time_outlives_the_launcher_when_stopped(tmp_path, to):
    """Slurm signals every process of a step at a time limit or scancel: run_and_time.sh died at once, and with it
    the step's task; Slurm then kills what is left of the step (the trainers in their cleanup, before run_stop
    aborted). A runtime that signals only its child (the script) left the launcher running, orphaned. The script
    forwards the signal and ends after the launcher, with its exit code."""
    import signal
    import time

    stub = tmp_path / "stub.py"
    stub.write_text(STOPPING_STUB)
    env = dict(DGXSYSTEM="CPU", PYTHON=sys.executable, TRAIN_SCRIPT=stub, LOGDIR=tmp_path / "results",
               NPROC_PER_NODE=1, PREFLIGHT_DONE=1, STUB_OUT=tmp_path)
    proc = subprocess.Popen([str(ROOT / "run_and_time.sh")], cwd=tmp_path, env=clean_env(**env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "started").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (tmp_path / "started").exists()
        if to == "the step":
            os.killpg(proc.pid, signal.SIGTERM)
        else:
            os.kill(proc.pid, signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
        assert (tmp_path / "cleaned").exists(), stderr  # the script ended after its trainer's cleanup
        assert proc.returncode == 128 + signal.SIGTERM, stderr
        assert "run_and_time: training exited with code 143" in stderr
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass


@pytest.mark.slow  # starts bash
def test_the_site_template_exports_only_the_sbatch_settings_it_has():
    """site.example.sh exported SBATCH_PARTITION, SBATCH_ACCOUNT and SBATCH_QOS empty when the site left them
    empty: sbatch reads a variable that is set as the option's value, "" included, not as "use the default"."""
    script = f"source {ROOT / 'slurm' / 'site.example.sh'}; env | grep '^SBATCH_' | sort"
    env = {k: v for k, v in clean_env().items() if not k.startswith("SBATCH_")}
    empty = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True)
    assert empty.stdout == "", empty.stdout + empty.stderr
    given = subprocess.run(["bash", "-c", script], env=dict(env, SBATCH_PARTITION="gpu"), capture_output=True,
                           text=True)
    assert given.stdout == "SBATCH_PARTITION=gpu\n", given.stdout + given.stderr


@pytest.mark.slow
def test_profile_memory_writes_csv(tmp_path):
    r = run_and_time(tmp_path, PROFILE="memory", NPROC_PER_NODE=2)
    assert r.returncode == 0, r.stderr
    for rank in (0, 1):
        rows = list(csv.DictReader(open(tmp_path / "results" / "output" / f"memory_rank{rank}.csv")))
        assert len(rows) == 4 * 14 and rows[0]["iteration"] == "1"  # 4 steps in each of 14 epochs
        assert int(rows[-1]["host_rss_bytes"]) > 10_000_000
        assert rows[0]["device"] in ("cpu",) or rows[0]["device"].startswith("cuda")


@pytest.mark.slow
def test_the_profiles_of_each_trial_of_a_job_are_kept(tmp_path):
    """The trials of a job share LOGDIR, where the profiles went: the second trial's memory_rank0.csv replaced the
    first's. They now go to each run's OUTPUT_DIR (LOGDIR/TRIAL_NAME)."""
    for trial in ("trial_1", "trial_2"):
        r = run_and_time(tmp_path, PROFILE="memory", TRIAL_NAME=trial)
        assert r.returncode == 0, r.stderr
    for trial in ("trial_1", "trial_2"):
        assert len((tmp_path / "results" / trial / "memory_rank0.csv").read_text().splitlines()) > 1
    assert not (tmp_path / "results" / "memory_rank0.csv").exists()


@pytest.mark.slow
def test_profile_torch_writes_trace(tmp_path):
    r = run_and_time(tmp_path, PROFILE="torch", MASKRCNN_PROFILE_STEPS="1,1,3")
    assert r.returncode == 0, r.stderr
    trace = tmp_path / "results" / "output" / "torch_trace_rank0.json"
    assert trace.exists() and trace.stat().st_size > 100
    assert '"traceEvents"' in trace.read_text()[:5000]


@pytest.mark.slow
def test_profile_nsys_missing_runs_unprofiled(tmp_path):
    if shutil.which("nsys"):
        pytest.skip("nsys is installed here")
    r = run_and_time(tmp_path, PROFILE="nsys")
    assert r.returncode == 0, r.stderr
    assert "nsys is not installed; running unprofiled" in r.stderr
    assert "RESULT,OBJECT_DETECTION" in r.stdout


@pytest.mark.slow
def test_profile_nsys_wraps_the_launcher(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "nsys"
    fake.write_text(textwrap.dedent("""\
        #!/bin/bash
        echo "NSYS $*" >&2
        while [[ "$1" != -u && $# -gt 0 ]]; do
          case "$1" in -o) echo x > "$2.nsys-rep"; shift;; esac; shift; done
        exec "$PY" "$@"
        """))
    fake.chmod(0o755)
    r = run_and_time(tmp_path, PROFILE="nsys", PATH=f"{bindir}:{os.environ['PATH']}", PY=sys.executable)
    assert r.returncode == 0, r.stderr
    assert re.search(r"NSYS profile --trace=cuda,nvtx,osrt --force-overwrite=true -o \S+/nsys_node0 \S+ -u -m "
                     r"bind_launch", r.stderr), r.stderr
    assert (tmp_path / "results" / "output" / "nsys_node0.nsys-rep").exists()


@pytest.mark.slow
def test_profile_unknown_mode_fails(tmp_path):
    r = run_and_time(tmp_path, PROFILE="bogus")
    assert r.returncode == 1 and "unknown PROFILE" in r.stderr  # bad input (2 is a diverged run)


@pytest.mark.slow
def test_profiling_module_is_torch_optional(tmp_path):
    code = ("import sys, importlib.util as u; sys.modules['torch'] = None; "
            "s = u.spec_from_file_location('profiling', 'maskrcnn_benchmark/utils/profiling.py'); "
            "p = u.module_from_spec(s); s.loader.exec_module(p); "
            "assert type(p.from_env(env={})).__name__ == 'NullProfiler'; "
            "m = p.from_env(env={'PROFILE': 'memory', 'MASKRCNN_PROFILE_DIR': sys.argv[1]}); m.step(1); m.close(); "
            "print('ok')")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr
    assert (tmp_path / "memory_rank0.csv").read_text().splitlines()[1].startswith("1,")


# ------------------------------------------------------------------------------------------- the recipe check
def _marker_stub(tmp_path):
    stub = tmp_path / "stub.py"
    stub.write_text("import os\nopen(os.path.join(os.environ['STUB_OUT'], 'trained'), 'w').write('x')\n")
    return stub


def _h100_config_with(**changes):
    tokens = subprocess.run(["bash", "-c", f'source "{ROOT}/config_DGXH100.sh" >/dev/null && echo "$EXTRA_CONFIG"'],
                            capture_output=True, text=True, check=True, env=clean_env()).stdout.split()
    o = dict(zip(tokens[::2], tokens[1::2]))
    o.update(changes)
    return " ".join(f"{k} {v}" for k, v in o.items())


def _touch(path):
    path.write_bytes(b"")
    return path


def _coco_layout(root):
    for d in ("train2017", "val2017", "annotations"):
        (root / d).mkdir(parents=True, exist_ok=True)
    for split in ("train", "val"):
        (root / "annotations" / f"instances_{split}2017.json").write_text("{}")
    return root


@pytest.mark.slow
def test_run_and_time_refuses_a_noncompliant_recipe_before_training(tmp_path):
    """A non-compliant EXTRA_CONFIG on the shipped DGX H100 config: refused with one line naming the key and the
    rule (exit 10), and the training script never starts; ALLOW_NON_RCP=1 lets the research run go on."""
    bad = _h100_config_with(**{"SOLVER.BASE_LR": "0.13"})
    # the node's 8 processes (the recipe's candidates are 1000 x its 12 images per GPU); the recipe is judged first
    r = run_and_time(tmp_path, DGXSYSTEM="DGXH100", TRAIN_SCRIPT=_marker_stub(tmp_path), STUB_OUT=tmp_path,
                     EXTRA_CONFIG=bad, PREFLIGHT_DONE=0, NPROC_PER_NODE=8)
    assert r.returncode == 10, r.stdout + r.stderr
    refused = [line for line in r.stderr.splitlines() if line.startswith("error: recipe refused")]
    assert len(refused) == 1 and "opt_base_learning_rate 0.13" in refused[0] and "0.02" in refused[0], r.stderr
    assert not (tmp_path / "trained").exists() and "STARTING TIMING RUN" not in r.stdout
    # a CPU research run of that recipe, with its data there: allowed, and it trains
    r = run_and_time(tmp_path, DGXSYSTEM="DGXH100", TRAIN_SCRIPT=_marker_stub(tmp_path), STUB_OUT=tmp_path,
                     EXTRA_CONFIG=bad + " MODEL.DEVICE cpu", ALLOW_NON_RCP=1, PREFLIGHT_DONE=0,
                     WEIGHTS=_touch(tmp_path / "R-50.pkl"),
                     DATADIR=_coco_layout(tmp_path / "coco"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "trained").exists()
    assert "not an RCP recipe, allowed for a research run, not a closed submission" in r.stderr


@pytest.mark.slow
def test_run_and_time_names_a_missing_dataset_before_training(tmp_path):
    r = run_and_time(tmp_path, TRAIN_SCRIPT=_marker_stub(tmp_path), STUB_OUT=tmp_path, PREFLIGHT_DONE=0,
                     DATADIR=tmp_path / "nowhere")
    assert r.returncode == 11, r.stdout + r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith(
        f"error: the annotation file '{tmp_path / 'nowhere'}/annotations/instances_train2017.json' of DATASETS.TRAIN")
    assert not (tmp_path / "trained").exists()


def _srun_recorder(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "srun").write_text(f"#!/bin/bash\necho \"$@\" >> {tmp_path}/srun_calls\n")
    (bindir / "srun").chmod(0o755)
    return bindir


@pytest.mark.slow
def test_slurm_job_refuses_the_recipe_before_the_first_trial(tmp_path):
    """slurm/run_experiments.sh (the body of the sbatch scripts) checks once, before any srun of a trial."""
    bindir = _srun_recorder(tmp_path)
    bad = _h100_config_with(**{"SOLVER.IMS_PER_BATCH": "512", "SOLVER.BASE_LR": "0.32"})
    r = subprocess.run([str(ROOT / "slurm/run_experiments.sh")], cwd=tmp_path, capture_output=True, text=True,
                       timeout=120, env=clean_env(DGXSYSTEM="DGXH100", CONTAINER="none", NEXP=1, PYTHON=sys.executable,
                                                  LOGDIR=tmp_path / "logs", EXTRA_CONFIG=bad, REPO=ROOT,
                                                  PATH=f"{bindir}:{os.environ['PATH']}"))
    assert r.returncode == 10, r.stdout + r.stderr
    assert "error: recipe refused: global_batch_size 512 is outside the RCPs" in r.stderr
    assert "the preflight failed with exit code 10" in r.stderr and "no trial started" in r.stderr
    assert not (tmp_path / "srun_calls").exists()


@pytest.mark.slow
def test_submit_refuses_the_recipe_before_submitting(tmp_path):
    bad = _h100_config_with(**{"SOLVER.GAMMA": "0.2"})
    r = subprocess.run([sys.executable, "tools/submit.py", "--system", "DGXH100", "--cluster", "debug",
                        "--image", "none", "--results", str(tmp_path / "res"), "--env", f"EXTRA_CONFIG={bad}"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120, env=clean_env())
    assert r.returncode == 10, r.stdout + r.stderr
    assert "error: recipe refused: opt_learning_rate_decay_factor 0.2" in r.stderr
    assert "nothing submitted" in r.stderr and not list((tmp_path / "res").glob("result_*"))


@pytest.mark.slow  # starts bash
def test_in_container_passes_the_distributed_settings_and_nothing_else(tmp_path):
    """slurm/in_container.sh runs the image with --cleanenv and names what crosses: besides NCCL's, gloo's
    interface (the trainer's stop decisions go over a gloo group beside NCCL; without GLOO_SOCKET_IFNAME inside, a
    node whose hostname resolves to a loopback or unroutable address cannot form it) and torch.distributed's own
    settings; a host variable the job does not mean to pass stays out. A runtime stand-in prints what it is
    given."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "singularity").write_text("#!/bin/bash\nprintf '%s\\n' \"$@\"\n")
    (bindir / "singularity").chmod(0o755)
    env = clean_env(PATH=f"{bindir}:{os.environ['PATH']}", CONTAINER="/images/x.sif", GLOO_SOCKET_IFNAME="ib0",
                    NCCL_SOCKET_IFNAME="ib0", TORCH_NCCL_BLOCKING_WAIT="1", TORCH_DISTRIBUTED_DEBUG="DETAIL",
                    HOST_ONLY_SETTING="leak")
    r = subprocess.run([str(ROOT / "slurm/in_container.sh"), "python3", "-V"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    args = r.stdout.splitlines()
    assert args[:3] == ["exec", "--cleanenv", "--nv"] and args[-2:] == ["python3", "-V"]
    for item in ("GLOO_SOCKET_IFNAME=ib0", "NCCL_SOCKET_IFNAME=ib0", "TORCH_NCCL_BLOCKING_WAIT=1",
                 "TORCH_DISTRIBUTED_DEBUG=DETAIL"):
        assert item in args, (item, args)
    assert not any(a.startswith("HOST_ONLY_SETTING") for a in args)


@pytest.mark.slow  # starts bash
def test_in_container_finds_apptainer_where_singularity_is_not_installed(tmp_path):
    """make gpu-check IMAGE=... calls in_container.sh without CONTAINER_RUNTIME; on an Apptainer install without the
    singularity link it ran 'singularity' (command not found, 127), where the batch scripts pick apptainer."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "apptainer").write_text("#!/bin/bash\necho apptainer \"$1\"\n")
    (bindir / "apptainer").chmod(0o755)
    os.symlink(shutil.which("env"), bindir / "env")
    env = clean_env(PATH=str(bindir), CONTAINER="/images/x.sif")
    env.pop("CONTAINER_RUNTIME", None)
    r = subprocess.run(["/bin/bash", str(ROOT / "slurm/in_container.sh"), "python3", "-V"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout == "apptainer exec\n", r.stdout + r.stderr


@pytest.mark.slow
def test_in_container_passes_the_torch_settings_the_docs_name(tmp_path):
    """--cleanenv dropped, with no word, the torch settings the project documents or reads: the site hook
    (TORCH_DETECTRON_ENV_MODULE, utils/env.py), the compile cache's key tag (engine/compile.py), TORCH_LOGS
    (docs/benchmarks.md), the CUDA allocator's and inductor's/triton's settings; they crossed under pyxis, so the
    runtimes differed. CONTAINER_ENV_EXTRA given with commas (as CONTAINER_MOUNTS is) passed nothing."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "singularity").write_text("#!/bin/bash\nprintf '%s\\n' \"$@\"\n")
    (bindir / "singularity").chmod(0o755)
    settings = dict(TORCH_DETECTRON_ENV_MODULE="site_hook", TORCH_COMPILE_CACHE_KEY_TAG="v1", TORCH_LOGS="cudagraphs",
                    PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True", CUDA_DEVICE_MAX_CONNECTIONS="1",
                    TORCHINDUCTOR_FX_GRAPH_CACHE="1", TRITON_CACHE_DIR="/tmp/triton", SITE_A="a", SITE_B="b")
    env = clean_env(PATH=f"{bindir}:{os.environ['PATH']}", CONTAINER="/images/x.sif", CONTAINER_ENV_EXTRA="SITE_A,SITE_B",
                    **settings)
    r = subprocess.run([str(ROOT / "slurm/in_container.sh"), "python3", "-V"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    args = r.stdout.splitlines()
    assert [f"{k}={v}" for k, v in settings.items() if f"{k}={v}" not in args] == []


def test_every_srun_step_exports_the_jobs_environment(tmp_path):
    """A job submitted with --export=NONE (or a site's SBATCH_EXPORT=NONE) hands SLURM_EXPORT_ENV=NONE to every srun
    in it: the trials lost CONTAINER, TRIAL_NAME, MASTER_PORT, MLPERF_CACHE_CLEARED... (the preflight, on the batch
    host without srun, passed). Every step asks for --export=ALL."""
    text = (ROOT / "slurm/run_experiments.sh").read_text()
    srun_on = text[text.index("srun_on() {"):text.index("}", text.index("srun_on() {"))]
    assert "--export=ALL" in srun_on


def test_a_bad_profile_schedule_is_one_line_naming_the_variable(tmp_path):
    """MASKRCNN_PROFILE_STEPS=abc ended the run with a ValueError traceback (exit 5)."""
    from maskrcnn_benchmark.utils import profiling
    from maskrcnn_benchmark.utils.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^MASKRCNN_PROFILE_STEPS='abc': expected wait,warmup,active"):
        profiling.from_env(env={"PROFILE": "torch", "MASKRCNN_PROFILE_DIR": str(tmp_path),
                                "MASKRCNN_PROFILE_STEPS": "abc"})


@pytest.mark.slow
@pytest.mark.parametrize("env, world", [
    (dict(SLURM_JOB_ID="7", SLURM_JOB_NUM_NODES="4", SLURM_STEP_NUM_NODES="1"), 2),  # srun -N1 in a 4-node job
    (dict(SLURM_JOB_ID="7", SLURM_JOB_NUM_NODES="4"), 8),  # the batch host, before the trials' 4-node steps
    (dict(DGXNNODES="4"), 2),  # by hand outside Slurm: bind_launch starts one node's processes
])
def test_the_preflight_judges_the_world_bind_launch_starts(tmp_path, env, world):
    """The preflight took its node count from SLURM_JOB_NUM_NODES, else DGXNNODES; bind_launch takes the step's
    (SLURM_STEP_NUM_NODES), else the job's, else 1: 'srun -N1 ./run_and_time.sh' in a 4-node allocation, or a
    4-node config run by hand, was judged at 4 nodes' processes while it trained on one node's."""
    stub = tmp_path / "python"
    stub.write_text(f"#!/bin/sh\nif [ \"$1\" = tools/preflight.py ]; then echo \"$@\" > {tmp_path}/preflight; fi\n")
    stub.chmod(0o755)
    r = run_and_time(tmp_path, PYTHON=stub, PREFLIGHT_DONE=0, PREFLIGHT_ONLY=1, NPROC_PER_NODE=2, **env)
    assert r.returncode == 0, r.stderr
    assert f"--world-size={world} " in (tmp_path / "preflight").read_text()


@pytest.mark.slow  # starts bash
@pytest.mark.parametrize("code,words", [(3, "training did not reach the target (exit 3: not converged)"),
                                        (12, "training failed (exit 12): the error line above says why")])
def test_the_demo_names_a_failure_for_what_it_is_and_writes_only_its_own_data(tmp_path, code, words):
    """Every failure of make demo was 'training did not reach the target' (a missing file, a folder in use,
    Ctrl-C); and a DATADIR exported for real COCO (the cluster's steps, the image's /data) was the folder the demo
    wrote its synthetic data into."""
    calls = tmp_path / "calls"
    fake = tmp_path / "python"
    fake.write_text(textwrap.dedent(f"""\
        #!/bin/bash
        echo "$*" >> {calls}
        if [[ "$1" == tools/make_synthetic_coco.py ]]; then exit 0; fi
        if [[ "$1" == tools/preflight.py ]]; then exit 0; fi
        exit {code}
        """))
    fake.chmod(0o755)
    env = clean_env(PYTHON=fake, DEMO_DIR=tmp_path / "demo", DEMO_DATADIR=tmp_path / "synthetic",
                    DATADIR="/nonexistent/real-coco")
    r = subprocess.run(["bash", str(ROOT / "tools" / "demo.sh")], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == code, r.stdout + r.stderr
    assert f"demo: {words}" in r.stderr, r.stderr
    first = calls.read_text().splitlines()[0]
    assert first.startswith(f"tools/make_synthetic_coco.py --out {tmp_path / 'synthetic'} "), first
    assert "/nonexistent/real-coco" not in calls.read_text()
