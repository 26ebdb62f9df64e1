"""make gpu-check (tools/gpu_check.py): one line without CUDA; the whole pipeline with tiny sizes on the CPU."""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from helpers import REPO, guard_processes, require_shared

from maskrcnn_benchmark.cli import gpu_check
from maskrcnn_benchmark.engine import preflight


def test_without_a_gpu_one_line_exit_0_with_an_unusable_one_a_failure(tmp_path, capsys, monkeypatch):
    """No NVIDIA GPU at all: one line, exit 0, nothing written. NVIDIA devices that torch cannot use (an old
    driver, a container without --nv; simulated: device files and a driver version): one error line naming the
    driver, exit 15 (NoGPU), nothing measured. (Both were exit 0 "nothing to check" before.)"""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(preflight, "_nvidia_devices", lambda: [])
    monkeypatch.setattr(preflight, "_driver_version", lambda: None)
    assert gpu_check.main(["--out", str(tmp_path / "gc")]) == 0
    out = capsys.readouterr().out
    assert len(out.splitlines()) == 1 and "no NVIDIA GPU" in out
    monkeypatch.setattr(preflight, "_nvidia_devices", lambda: ["nvidia0", "nvidia1"])
    monkeypatch.setattr(preflight, "_driver_version", lambda: "535.104.05")
    assert gpu_check.main(["--out", str(tmp_path / "gc")]) == 15
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.splitlines()) == 1
    assert "driver 535.104.05" in captured.err and "torch cannot use them" in captured.err
    assert not (tmp_path / "gc").exists()


@pytest.mark.slow  # starts make and tools/gpu_check.py
def test_make_gpu_check_on_a_machine_without_a_gpu_is_one_line_and_exit_0(tmp_path):
    """``make gpu-check`` itself, as a user types it on this CPU-only machine, with a Python that has torch but not
    this package installed (a GPU node's python3: no venv is built there): the one line, exit 0, nothing
    written."""
    if any(os.path.exists(f"/dev/nvidia{i}") for i in range(8)) or shutil.which("nvidia-smi"):
        pytest.skip("this machine shows an NVIDIA GPU")
    # the venv's Python without its site hooks (-S: no .pth files, so no editable install of this package), its
    # site-packages on the path for torch; the script's folder first, as when Python runs a script
    site_packages = os.path.dirname(os.path.dirname(torch.__file__))
    (tmp_path / "run_script.py").write_text(
        "import os, runpy, sys\n"
        f"sys.argv = sys.argv[1:]; sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0])); "
        f"sys.path.append({site_packages!r})\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n")
    python = tmp_path / "python3"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} -S {tmp_path / "run_script.py"} "$@"\n')
    python.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS"))}
    r = subprocess.run(["make", "--no-print-directory", "gpu-check", f"GPU_CHECK_PYTHON={python}",
                        f"GPU_CHECK_RESULTS={tmp_path}"], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert len(r.stdout.splitlines()) == 1 and r.stdout.startswith("gpu-check: no NVIDIA GPU on this machine"), \
        r.stdout + r.stderr
    assert not (tmp_path / "gpu-check").exists()


@pytest.mark.slow  # starts tools/gpu_check.py
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap (tests/cluster/install_deps.sh installs it)")
def test_a_fake_gpu_node_with_an_old_driver_fails_naming_the_driver(tmp_path):
    """The program itself, on a "GPU node" torch cannot use: a device node /dev/nvidia0 and an ``nvidia-smi`` that
    reports driver 535 (a private /dev and PATH through bubblewrap; nothing in the code is stubbed). One error line
    naming the driver, exit 15, no report."""
    (tmp_path / "bin").mkdir()
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 535.104.05\n")
    smi.chmod(0o755)
    (tmp_path / "nvidia0").touch()
    out = tmp_path / "gc"
    r = subprocess.run(["bwrap", "--dev-bind", "/", "/", "--dev", "/dev", "--ro-bind", str(tmp_path / "nvidia0"),
                        "/dev/nvidia0", "--setenv", "PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}",
                        sys.executable, "tools/gpu_check.py", "--out", str(out)],
                       cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 15, r.stdout + r.stderr
    assert r.stdout == "" and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "1 device files, driver 535.104.05" in r.stderr and "torch cannot use them" in r.stderr
    assert not out.exists()


def _across_nodes_logs(tmp_path, capsys, busbw_seconds=0.01, allreduce_rc=0, train_rc=0, throughput=True):
    """The two logs slurm/run_experiments.sh leaves for ``--across-nodes``, with the lines the real programs print
    (bench/allreduce.py's report and the trainer's RunOutcome.summary)."""
    import argparse
    import importlib.util

    from maskrcnn_benchmark.engine.run import RunOutcome

    spec = importlib.util.spec_from_file_location("allreduce_bench", os.path.join(REPO, "bench", "allreduce.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    capsys.readouterr()
    bench._report(16, busbw_seconds, argparse.Namespace(mbytes=256.0, backend="nccl", min_busbw=0.0))
    (tmp_path / "allreduce_2node.log").write_text(capsys.readouterr().out)
    (tmp_path / "allreduce_2node.rc").write_text(f"{allreduce_rc}\n")
    outcome = RunOutcome(success=False, converged_epoch=None, targets=(0.377, 0.339), images=20 * 192,
                         train_seconds=4.0, run_seconds=60.0)
    lines = outcome.summary() if throughput else ["Traceback (most recent call last):", "RuntimeError: NCCL error"]
    (tmp_path / "training_2node.log").write_text("\n".join(lines) + "\n")
    (tmp_path / "training_2node.rc").write_text(f"{train_rc}\n")


def test_across_nodes_verdicts_against_the_floor(tmp_path, capsys):
    """slurm/gpu_check.sbatch's two checks between nodes: the all-reduce judged against NCCL_MIN_BUSBW (stated in
    the report), the 2-node training run by its exit code and throughput line; a 1-node job or no floor is NOT RUN,
    never a pass."""
    import json

    (tmp_path / "report.md").write_text("# gpu-check: the node's report\n")
    _across_nodes_logs(tmp_path, capsys)  # 256 MB in 10 ms on 16 ranks: busbw 48 GB/s
    assert gpu_check.main(["--across-nodes", "--min-busbw", "10", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == "gpu-check across nodes: passed: both checks measured"
    report = (tmp_path / "report.md").read_text()
    assert report.startswith("# gpu-check: the node's report") and "## Across nodes" in report
    assert "| bus bandwidth floor | 10 GB/s (NCCL_MIN_BUSBW) |" in report
    assert re.search(r"\| all-reduce between 2 nodes \| passed \| inter-node all-reduce \| 16 ranks, 256 MB, "
                     r"algbw 25.60 GB/s, busbw 48.00 GB/s", report)
    assert "| training step on 2 nodes, 20 iterations | passed | 2-node training throughput | 960.0 img/s" in report
    assert json.loads((tmp_path / "summary.json").read_text())["training_2node"]["status"] == "passed"

    assert gpu_check.main(["--across-nodes", "--min-busbw", "100", "--out", str(tmp_path)]) == 1
    assert "FAILED (busbw 48 GB/s is below the floor of 100 GB/s)" in capsys.readouterr().out
    assert gpu_check.main(["--across-nodes", "--out", str(tmp_path)]) == 1  # no floor: not judged
    assert "allreduce_2node: NOT RUN (no bus-bandwidth floor" in capsys.readouterr().out

    _across_nodes_logs(tmp_path, capsys, train_rc=1, throughput=False)
    assert gpu_check.main(["--across-nodes", "--min-busbw", "10", "--out", str(tmp_path)]) == 1
    assert "training_2node: FAILED (exit 1: RuntimeError: NCCL error)" in capsys.readouterr().out
    _across_nodes_logs(tmp_path, capsys, throughput=False)  # exit 0 but training never finished
    assert gpu_check.main(["--across-nodes", "--min-busbw", "10", "--out", str(tmp_path)]) == 1
    assert "training_2node: FAILED (no throughput line" in capsys.readouterr().out

    one_node = tmp_path / "one"
    one_node.mkdir()
    assert gpu_check.main(["--across-nodes", "--min-busbw", "10", "--out", str(one_node)]) == 1
    out = capsys.readouterr().out
    assert "allreduce_2node: NOT RUN (no all-reduce across nodes ran" in out
    assert "training_2node: NOT RUN (a 1-node job" in out


def test_a_check_that_did_not_run_is_not_a_pass(tmp_path, monkeypatch):
    """A check squeezed out by its time cap or the budget is NOT RUN, and the verdict is a failure. An earlier
    run's <check>.log of a check that did not run this time stayed beside the new report ("each program's output
    is in <check>.log"), its figures another run's."""
    checks = [gpu_check.Check("parity", "p", [], 1, status="passed"),
              gpu_check.Check("allreduce", "a", [], 1, status="NOT RUN (no time left in the budget)")]
    monkeypatch.setattr(gpu_check, "plan", lambda args, out_dir: checks)
    monkeypatch.setattr(gpu_check, "run", lambda check, out_dir, deadline: check)
    monkeypatch.setattr(gpu_check.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0))
    (tmp_path / "gc").mkdir()
    for name in ("allreduce", "evaluation"):
        (tmp_path / "gc" / f"{name}.log").write_text("an earlier run's figures\n")
    assert gpu_check.main(["--device", "cpu", "--out", str(tmp_path / "gc")]) == 1
    assert sorted(p.name for p in (tmp_path / "gc").glob("*.log")) == []


def test_training_check_counts_skipped_float16_steps():
    """The GradScaler halves its scale at each skipped step (2^16 at the start): 2 skips by iteration 20 are the
    warm-up's, one more later fails the check."""
    def check(scales):
        c = gpu_check.Check("training", "t", [], 1, status="passed")
        c.output = "\n".join(f"... INFO: iter: {i}  epoch: 0  loss: {3.0 - i / 100:.4f}  loss_mask: 0.1  lr: 0.01  "
                             f"images/s: 50.0  loss scale: {s:g}" for i, s in scales)
        gpu_check.read_training(c)
        return c

    ok = check([(20, 16384.0), (40, 16384.0), (200, 16384.0)])
    assert ok.status == "passed"
    assert ("skipped float16 steps", "2 by iteration 20, 0 after it (loss scale 16384)") in ok.figures
    late = check([(20, 16384.0), (40, 8192.0), (200, 8192.0)])
    assert late.status.startswith("FAILED") and "1 after it" in dict(late.figures)["skipped float16 steps"]


def test_the_compiled_training_check_counts_cuda_graphs_recorded_on_the_clock():
    """Under TORCH_LOGS=cudagraphs torch logs each CUDA graph it records ("Recording function=..."), its lines
    merged in order with the run's: those before the warm-up's last line are the warm-up's, each one after it a
    batch shape the warm-up did not record, recorded on the clock. A fallback to eager fails the check."""
    loss = ("... INFO: iter: {}  epoch: 0  loss: {:.4f}  loss_mask: 0.1  lr: 0.01  images/s: 50.0  "
            "loss scale: 16384")
    record = "V1127 torch/_inductor/cudagraph_trees.py:2335] [__cudagraphs] [0/0] Recording function=0, cuda_graph_id=0"
    lines = [record, record, "... INFO: compiled the training step for 2 image size(s) 96x128, 128x96 in 41.2 s "
             "(mode reduce-overhead)", record, loss.format(20, 2.5), record, loss.format(100, 1.5)]
    def read(*more):
        check = gpu_check.Check("compiled_training", "t", [], 1, status="passed", output="\n".join(lines + list(more)))
        gpu_check.read_compiled_training(check)
        return check

    c = read()
    figures = dict(c.figures)
    assert c.status == "passed"
    assert figures["CUDA graphs recorded"].startswith("2 in the warm-up, 2 after it")
    assert figures["compile time (synthetic model)"] == "41.2 s"
    assert figures["loss"] == "2.500 at iteration 20 -> 1.500 at 100 (falls)"
    fell = read("... WARNING: torch.compile failed (RuntimeError: boom): the run continues with the eager model")
    assert fell.status.startswith("FAILED (the compiled step fell back to eager")
    skipped = read("... WARNING: CUDA graphs: inductor left 3 compiled graph(s) without them (a CPU tensor, ...)")
    assert dict(skipped.figures)["graphs left without CUDA graphs (inductor)"] == "3"
    # dynamo's recompile limit (torch 2.11's message): the shapes after it ran eagerly, with a log line only
    limit = read("W1127 torch/_dynamo/convert_frame.py:1744] torch._dynamo hit config.recompile_limit (8)")
    assert limit.status.startswith("FAILED (dynamo's recompile limit was hit")
    # a graph compiled on the clock and left without CUDA graphs (torch's log under TORCH_LOGS=cudagraphs)
    late = read("W1127 cudagraph_utils.py:207] skipping cudagraphs due to mutated inputs (1 instances)")
    assert late.status.startswith("FAILED (graphs compiled on the clock ran without CUDA graphs")
    assert dict(late.figures)["CUDA graphs skipped after the warm-up (torch's log)"] == "1"
    # torch's re-record limit, in its own (singular) words
    limit = read("W1127 cudagraph_trees.py:2327] skipping cudagraph due to function 0 exceeding max re-recording "
                 "limit (=50) on cudagraph node None")
    assert limit.status.startswith("FAILED (graphs compiled on the clock ran without CUDA graphs")


def test_the_compiled_training_check_fails_when_cuda_graphs_do_not_replay():
    """On CUDA with reduce-overhead the graphs must replay: a run that records graphs through its last iterations
    (a new graph every step: nothing replays) or records none at all (inductor skipped them all in the warm-up,
    with only a warning) passed, with the count as one figure."""
    loss = ("... INFO: iter: {}  epoch: 0  loss: {:.4f}  loss_mask: 0.1  lr: 0.01  images/s: 50.0  "
            "loss scale: 16384")
    record = "V1127 torch/_inductor/cudagraph_trees.py:2335] [__cudagraphs] [0/0] Recording function=0"
    start = ["... INFO: world size 1, device cuda:0, seed 1", record, record,
             "... INFO: compiled the training step for 1 image size(s) 128x128 in 41.2 s (mode reduce-overhead)"]

    def read(lines):
        check = gpu_check.Check("compiled_training", "t", [], 1, status="passed", output="\n".join(lines))
        gpu_check.read_compiled_training(check)
        return check

    replays = read(start + [record, loss.format(20, 2.5), loss.format(60, 2.0), loss.format(100, 1.5)])
    assert replays.status == "passed"
    every_step = [line for i in range(20, 101, 20) for line in (record, record, loss.format(i, 2.5 - i / 100))]
    assert read(start + every_step).status == ("FAILED (CUDA graphs were still recorded in the second half of the "
                                               "run: they do not replay)")
    none = [start[0], start[3], "... WARNING: CUDA graphs: inductor left 2 compiled graph(s) without them",
            loss.format(20, 2.5), loss.format(100, 1.5)]
    assert read(none).status == "FAILED (no CUDA graph was recorded: the step ran without CUDA graphs)"
    on_the_cpu = [line.replace("cuda:0", "cpu") for line in none if "WARNING" not in line]
    assert read(on_the_cpu).status == "passed"  # the CPU run (eager backend) has no CUDA graphs to record


@pytest.mark.slow
def test_run_capped_merges_stderr_in_the_order_written(tmp_path):
    code = "import sys; print('a', flush=True); print('b', file=sys.stderr, flush=True); print('c', flush=True)"
    rc, out = gpu_check.run_capped([sys.executable, "-c", code], tmp_path, dict(os.environ), 30, merge=True)
    assert rc == 0 and out.split() == ["a", "b", "c"]
    rc, out = gpu_check.run_capped([sys.executable, "-c", code], tmp_path, dict(os.environ), 30)
    assert rc == 0 and out.split() == ["a", "c", "b"]  # without: stdout, then stderr


STANDIN = os.path.join(REPO, "tests", "cluster", "container", "singularity")


def _git_state():
    out = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--ignored", "--untracked-files=all"],
                         capture_output=True, text=True).stdout
    return sorted(line for line in out.splitlines() if "__pycache__" not in line)


# Over 60 s (about 3 minutes in make test): every stage of make gpu-check's CPU rehearsal, in the image stand-in;
# one run serves all the report's checks.
@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bwrap") is None or os.geteuid() != 0,
                    reason="runs in the read-only image stand-in: needs bubblewrap and root "
                           "(tests/cluster/install_deps.sh installs it)")
def test_quick_cpu_run_in_the_image_writes_the_report_with_every_check_and_its_command(tmp_path):
    """``make gpu-check IMAGE=...`` as a submitter runs it, through slurm/in_container.sh into the read-only image
    (the cluster tests' Singularity stand-in, built by singularity/build.sh), every stage of the CPU rehearsal
    (``--device cpu --quick``) inside it: each stage passed, the report's stack says it ran in the image, and
    nothing was written into the checkout (bound read-only) or outside the results folder."""
    image = tmp_path / "image" / "maskrcnn.sif"
    build_env = dict(os.environ, SINGULARITY=STANDIN, SINGULARITY_STANDIN_BASE_PATH=os.path.dirname(sys.executable))
    subprocess.run([os.path.join(REPO, "singularity", "build.sh"), str(image)], cwd=REPO, env=build_env,
                   check=True, capture_output=True, timeout=120)
    runtime = tmp_path / "runtime-bin"
    runtime.mkdir()
    (runtime / "singularity").symlink_to(STANDIN)
    results = tmp_path / "results"
    before = _git_state()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS"))}
    env.update(PATH=f"{runtime}:{os.environ['PATH']}", SINGULARITY_STANDIN_BASE_PATH=os.path.dirname(sys.executable))
    r = subprocess.run(["make", "gpu-check", f"IMAGE={image}", "GPU_CHECK_ARGS=--device cpu --quick",
                        f"GPU_CHECK_RESULTS={results}"], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert _git_state() == before, "gpu-check wrote into the checkout (read-only in the image)"
    out = results / "gpu-check"
    assert f"- ran in the image {image} (make gpu-check IMAGE=...)" in (out / "report.md").read_text()
    assert r.stdout.splitlines()[-1] == "gpu-check: passed: all 9 checks measured"
    report = (out / "report.md").read_text()
    assert "not GPU figures" in report
    for title in ("parity tests on the device", "training step img/s", "host syncs in one static training step",
                  "hybrid input pipeline",
                  "synthetic training run", "the same run, 40 iterations, compiled", "blocking evaluation",
                  "background COCO scoring", "all-reduce"):
        row = next(line for line in report.splitlines() if title in line)
        assert "| passed |" in row, row
    for figure in ("training step img/s, eager",
                   "hybrid input, device side, batch of 8", "loss", "COCO scoring, 200 images", "all-reduce",
                   "host syncs per step, 1 images"):
        assert f"| {figure}" in report, figure
    assert re.search(r"\| loss \| [\d.]+ at iteration 20 -> [\d.]+ at 40 \(falls\)", report)
    for cmd in ("bench/model_step.py --device cpu", "bench/input_pipeline.py --device cpu",
                "tools/train_mlperf.py --config-file", "bench/allreduce.py --backend gloo",
                "MASKRCNN_TEST_DEVICE=cpu", "bench/eval_step.py --device cpu --json", "bench/coco_eval.py --ours-only",
                "bench/host_syncs.py --device cpu"):
        assert cmd in report, cmd
    assert re.search(r"1 node\(s\), global batch 96: 14.06 epochs x \(117266 images / [\d,]+ img/s", report)
    assert not (out / "projection.json").exists() and "## Stack" in report  # a CPU rate sets no trial's limit
    assert "projection.json not written: figures measured on the cpu set no trial's time limit" in report
    assert "evaluation gap on one node: 625 images (COCO val / 8 GPUs) x" in report
    assert "background scoring of an epoch's results: " in report
    assert "| host syncs per step, 1 images | 0 |" in report
    if os.path.isdir(os.path.join(os.path.dirname(REPO), "shared", "golden")):  # bound beside the image's checkout
        assert re.search(r"\| parity tests \| [1-9]\d* passed, 0 failed, 0 skipped \|", report), report
    for name in ("parity", "model_step", "host_syncs", "input", "training", "compiled_training", "evaluation",
                 "scoring", "allreduce"):
        assert (out / f"{name}.log").read_text().strip()


def _measured_evaluation(ms_per_image="40.0"):
    evaluation = gpu_check.Check("evaluation", "t", [], 1, status="passed")
    evaluation.figures = [("blocking evaluation, ms per image", ms_per_image)]
    return evaluation


def test_the_projection_shows_every_term_and_writes_the_trials_time_limits(tmp_path):
    """From the measured per-GPU rate of the step a run takes, the eager one (COMPILE auto is off on CUDA), not the
    fastest form measured (the projection sets the trials' time limits: a form the run does not take would get
    them killed; it is named beside) nor torchvision's: 1, 4, 8 and 32 nodes, each term shown, the assumptions
    stated, NVIDIA's runs recomputed beside; projection.json for run_experiments.sh."""
    import json

    step = gpu_check.Check("model_step", "t", [], 1, status="passed")
    step.figures = [("training step img/s, eager", "150.0"), ("training step img/s, compiled (default)", "200.0"),
                    ("training step img/s, torchvision", "400.0")]
    lines = gpu_check.projection(step, tmp_path, evaluation=_measured_evaluation())
    assert lines[0].startswith("per GPU: 150.0 img/s (eager, the step a run takes") and "8 x 150.0 = 1200 img/s" \
        in lines[0]
    assert lines[1] == ("faster form measured: compiled (default), 200.0 img/s per GPU (a run takes it when asked: "
                        "COMPILE True, COMPILE_MODE default; not in this projection)")
    assert any(line.startswith("1 node(s), global batch 96: 14.06 epochs x (117266 images / 1,200 img/s")
               for line in lines)
    assert any("assumption: scaling efficiency" in line for line in lines)
    assert any("NVIDIA DGX H100, 8 nodes" in line and "published 246 s" in line for line in lines)
    written = json.loads((tmp_path / "projection.json").read_text())
    assert sorted(written["nodes"], key=int) == ["1", "4", "8", "32"]
    assert written["system"] == "DGXH100"  # whose recipes: slurm/projection.sh gives it to no other system's job
    one = written["nodes"]["1"]
    assert one["minutes"] == pytest.approx(14.0556 * (117266 / 1200 + 625 * 0.040) / 60, abs=0.01)
    # the eager step not measured (it failed): the slowest form measured, said so
    step.figures = [("eager", "FAILED (OutOfMemoryError: ...)"), ("training step img/s, static eager", "120.0"),
                    ("training step img/s, compiled (default)", "200.0")]
    lines = gpu_check.projection(step)
    assert lines[0].startswith("per GPU: 120.0 img/s (static eager, the eager step, which a run takes, was not "
                               "measured: the slowest form measured;")


@pytest.mark.parametrize("step_status,eval_status", [("passed", None), ("passed", "NOT RUN (budget)"),
                                                      ("passed", "FAILED (exit 1)"),
                                                      ("NOT RUN (did not finish in its 300 s cap)", "passed")])
def test_no_trial_limits_from_figures_not_measured(tmp_path, step_status, eval_status):
    """projection.json sets the next jobs' trial limits: it was written after the step check alone (before the
    evaluation check had run, or when it never did) with NVIDIA's 3.1 s evaluation gap where ours measured 30-44 s
    per epoch (20 % short on one node), and from a step check that failed or was cut. It is written from a passed
    step check and a measured gap only; the report still shows the projection and says why no file."""
    step = gpu_check.Check("model_step", "t", [], 1, status=step_status)
    step.figures = [("training step img/s, eager", "150.0")]
    evaluation = None
    if eval_status is not None:
        evaluation = gpu_check.Check("evaluation", "t", [], 1, status=eval_status)
        evaluation.figures = [("blocking evaluation, ms per image", "40.0")]
    lines = gpu_check.projection(step, tmp_path, evaluation=evaluation)
    assert not (tmp_path / "projection.json").exists()
    assert any(line.startswith("1 node(s), global batch 96") for line in lines)
    said = [line for line in lines if line.startswith("projection.json not written: ")]
    assert len(said) == 1 and said[0].endswith("the trials keep their config's DGXRUNMINUTES"), lines
    assert ("training-step check was cut" in said[0]) == (step_status != "passed"), said


def test_another_models_failure_does_not_withhold_the_trials_limits(tmp_path):
    """The projection takes the eager step's rate: torchvision's baseline or a compiled form failing (out of
    memory) fails the step's check, and must not keep projection.json from the eager rate measured beside it."""
    step = gpu_check.Check("model_step", "t", [], 1, status="FAILED (the step of torchvision failed: see its figure)")
    step.figures = [("training step img/s, eager", "150.0"), ("torchvision", "FAILED (OutOfMemoryError: ...)")]
    gpu_check.projection(step, tmp_path, evaluation=_measured_evaluation())
    assert (tmp_path / "projection.json").exists()
    step.figures = [("eager", "FAILED (OutOfMemoryError: ...)"), ("training step img/s, static eager", "120.0")]
    lines = gpu_check.projection(step, tmp_path, evaluation=_measured_evaluation())
    assert "projection.json not written: the eager step, which a run takes, was not measured; the trials keep " \
        "their config's DGXRUNMINUTES" in lines


@pytest.mark.slow  # starts make (a second)
def test_make_gpu_check_in_an_image_binds_the_golden_outputs_beside_the_checkout():
    """The parity stage finds the golden outputs at ../shared/golden beside the checkout; in the image the checkout
    is /workspace/object_detection, and nothing was bound at /workspace/shared: every golden test skipped there and
    the stage read NOT RUN, though the node had them. ../shared is bound read-only beside the checkout's copy."""
    shared = os.path.join(os.path.dirname(REPO), "shared")
    require_shared(os.path.join(shared, "golden"), "reference golden outputs")
    r = subprocess.run(["make", "-n", "gpu-check", "IMAGE=/images/maskrcnn.sif"], cwd=REPO, capture_output=True,
                       text=True, check=True)
    assert f"{os.path.realpath(shared)}:/workspace/shared:ro" in r.stdout, r.stdout


@pytest.mark.slow  # starts make (a second)
def test_make_gpu_check_with_an_image_runs_inside_it_without_the_venv():
    """``make gpu-check IMAGE=...`` goes through slurm/in_container.sh (singularity exec --nv --cleanenv, the
    checkout bound read-only over the image's copy, results bound out) and builds no venv (a dry run: the
    container path itself is exercised by the cluster tests' stand-in)."""
    r = subprocess.run(["make", "-n", "gpu-check", "IMAGE=/images/maskrcnn.sif"], cwd=REPO, capture_output=True,
                       text=True, check=True)
    assert "venv" not in r.stdout and "pip" not in r.stdout
    import shlex

    words = shlex.split(r.stdout)
    assert "CONTAINER=/images/maskrcnn.sif" in words and "MASKRCNN_GPU_CHECK_IMAGE=/images/maskrcnn.sif" in words
    assert words[words.index("slurm/in_container.sh"):][:3] == ["slurm/in_container.sh", "python3",
                                                                 "tools/gpu_check.py"]
    assert f"{REPO}:/workspace/object_detection:ro" in r.stdout
    # without an image: the current Python environment, nothing installed on the node
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS"))}  # not make test's sub-make
    r = subprocess.run(["make", "-n", "--no-print-directory", "gpu-check", "GPU_CHECK_PYTHON=/opt/site/bin/python3"],
                       cwd=REPO, env=env, capture_output=True, text=True, check=True)
    assert r.stdout.strip() == (f'PYTHONPATH="{REPO}${{PYTHONPATH:+:$PYTHONPATH}}" /opt/site/bin/python3 '
                                f'tools/gpu_check.py --out "{REPO}/results/gpu-check"')


def test_a_measured_evaluation_replaces_nvidias_gap(tmp_path):
    import json

    step = gpu_check.Check("model_step", "t", [], 1, status="passed")
    step.figures = [("training step img/s, eager", "150.0")]
    evaluation = gpu_check.Check("evaluation", "e", [], 1, status="passed")
    evaluation.output = '{"event": "summary", "images": 625, "seconds": 5.0, "ms_per_image": 8.0, "size": ' \
                        '"800x1333", "batch": 8}'
    gpu_check.read_evaluation(evaluation)
    lines = gpu_check.projection(step, tmp_path, evaluation=evaluation)
    assert "evaluation gap on one node: 625 images (COCO val / 8 GPUs) x 8.0 ms (measured above) = 5.00 s per " \
           "epoch" in lines
    assert not any("not measured here" in line and "gap" in line for line in lines)
    assert json.loads((tmp_path / "projection.json").read_text())["nodes"]["1"]["eval_gap_s"] == 5.0


def test_a_check_that_printed_nothing_is_not_a_pass():
    """A check whose program exited 0 and printed nothing passed with no figure: the readers' own guards ("no
    count printed", "no summary line") never ran."""
    for name in ("host_syncs", "evaluation", "input", "scoring"):
        c = gpu_check.Check(name, "t", [], 1, status="passed", output="")
        gpu_check._read(c)
        assert c.status == "FAILED (it printed nothing: no figure to report)", name


def test_a_check_whose_output_lacks_its_figures_is_not_a_pass():
    """Output, but not the lines a check's figures come from (a bench's format changed, a warning only): the input
    and model-step readers passed such a check with no figure."""
    passed = []
    for name in gpu_check.READERS:
        c = gpu_check.Check(name, "t", [], 1, status="passed", output="a warning, and no figure\n")
        gpu_check._read(c)
        if c.status.startswith("passed"):
            passed.append((name, c.status, c.figures))
    assert passed == []


def test_the_report_survives_a_projection_that_fails_and_leaves_no_stale_projection(tmp_path, monkeypatch):
    """The projection needs mlperf-logging (the RCP table): when it failed, report() raised before report.md and
    summary.json were written, and the remaining checks never ran. A projection.json of an earlier run stayed
    beside a report that says the step was not measured, and slurm/projection.sh read its minutes."""
    from mlperf_review import projection as paper

    step = gpu_check.Check("model_step", "t", [], 1, status="passed")
    step.figures = [("training step img/s, eager", "150.0")]

    def no_rcp_table(*args, **kwargs):
        raise ImportError("No module named 'mlperf_logging'")

    monkeypatch.setattr(paper, "rcp_epochs", no_rcp_table)
    import argparse
    import datetime

    args = argparse.Namespace(torch_version="2.11.0", device="cuda", quick=False)

    def report(checks):
        return gpu_check.report(checks, tmp_path, args, "NVIDIA H100", datetime.datetime(2026, 11, 27),
                                stack_lines=["a stack"])

    text = report([step, _measured_evaluation()])
    assert "projection unavailable (ImportError: No module named 'mlperf_logging')" in text
    assert (tmp_path / "report.md").exists() and (tmp_path / "summary.json").exists()
    assert not (tmp_path / "projection.json").exists()
    monkeypatch.undo()
    report([step, _measured_evaluation()])
    assert (tmp_path / "projection.json").exists()
    report([gpu_check.Check("host_syncs", "t", [], 1, status="passed")])  # no step measured
    assert not (tmp_path / "projection.json").exists()


def test_the_projection_takes_the_global_batch_of_the_config_for_that_many_nodes(tmp_path):
    """The 4-node entry of projection.json sets the time limits of config_DGXH100_4x8x4.sh's trials (GBS 128): it
    was projected at NVIDIA's 256 (17.1 RCP epochs instead of 14.0)."""
    import json

    step = gpu_check.Check("model_step", "t", [], 1, status="passed")
    step.figures = [("training step img/s, eager", "150.0")]
    gpu_check.projection(step, tmp_path, evaluation=_measured_evaluation())
    nodes = json.loads((tmp_path / "projection.json").read_text())["nodes"]
    for n, config in ((1, "config_DGXH100.sh"), (4, "config_DGXH100_4x8x4.sh")):
        text = (Path(REPO) / config).read_text()
        assert f"export DGXNNODES=\"${{DGXNNODES:-{n}}}\"" in text
        assert nodes[str(n)]["global_batch"] == int(re.search(r"SOLVER.IMS_PER_BATCH (\d+)", text).group(1))


def test_a_compile_failure_keeps_the_other_models_figures():
    """bench/model_step.py --json lines as a GPU run prints them, the compiled model failing: the eager and
    torchvision rows and every memory row survive, the failure is a figure with its reason."""
    c = gpu_check.Check("model_step", "t", [], 1, status="passed")
    c.output = "\n".join([
        '{"event": "summary", "model": "eager", "img_s": 20.5, "mask_rows": 37}',
        '{"event": "failed", "model": "compiled (reduce-overhead)", "reason": "InductorError: boom"}',
        '{"event": "summary", "model": "torchvision", "img_s": 15.0}',
        '{"event": "memory", "model": "eager", "batch": 8, "gib": 30.25}',
        '{"event": "memory", "model": "eager", "batch": 12, "gib": 41.5}'])
    gpu_check.read_model_step(c)
    figures = dict(c.figures)
    assert figures["training step img/s, eager"] == "20.5 (37 mask-head rows per step)"
    assert figures["training step img/s, torchvision"] == "15.0"
    assert figures["compiled (reduce-overhead)"] == "FAILED (InductorError: boom)"
    assert figures["peak GPU memory alone, eager, batch 8"] == "30.25 GiB"
    assert figures["peak GPU memory alone, eager, batch 12"] == "41.50 GiB"
    # a step asked for that failed fails the check (it passed with the failure as one figure among the others)
    assert c.status == "FAILED (the step of compiled (reduce-overhead) failed: see its figure)"


def test_a_model_timed_before_compiling_shows_both_figures():
    """An H200 run: torchvision's step took 0.18 s in the rounds before compiling and 0.78 s in the rounds beside
    the compiled steps; the summary's figure alone hid the first."""
    c = gpu_check.Check("model_step", "t", [], 1, status="passed")
    c.output = "\n".join([
        '{"event": "setting", "device": "H200", "torch": "2.11", "height": 800, "width": 1333, "batch": 12, '
        '"dtype": "float16", "nhwc": true}',
        '{"event": "round", "round": 1, "phase": "before compiling", "seconds": {"eager": 0.14, "torchvision": 0.18}}',
        '{"event": "round", "round": 2, "phase": "before compiling", "seconds": {"eager": 0.14, "torchvision": 0.2}}',
        '{"event": "round", "round": 1, "seconds": {"eager": 0.12, "torchvision": 0.78, "compiled (default)": 0.2}}',
        '{"event": "summary", "model": "eager", "img_s": 96.8, "mask_rows": 72}',
        '{"event": "summary", "model": "torchvision", "img_s": 15.4, "mask_rows": null}',
        '{"event": "summary", "model": "compiled (default)", "img_s": 60.0, "mask_rows": 1536}'])
    gpu_check.read_model_step(c)
    figures = dict(c.figures)
    assert figures["training step img/s, eager"] == \
        "96.8 (72 mask-head rows per step; 85.714 in the 2 rounds before compiling)"
    assert figures["training step img/s, torchvision"] == "15.4 (63.158 in the 2 rounds before compiling)"
    assert figures["training step img/s, compiled (default)"] == "60.0 (1536 mask-head rows per step)"
    assert "per GPU: 96.8 img/s (eager, the step a run takes" in "\n".join(gpu_check.projection(c))
    # cut before any interleaved round: the rounds before compiling, said so
    c = gpu_check.Check("model_step", "t", [], 1, status="NOT RUN (did not finish in its 200 s cap)")
    c.output = "\n".join((
        '{"event": "setting", "device": "H200", "torch": "2.11", "height": 800, "width": 1333, "batch": 12, '
        '"dtype": "float16", "nhwc": true}',
        '{"event": "round", "round": 1, "phase": "before compiling", "seconds": {"eager": 0.15}}'))
    gpu_check.read_model_step(c)
    assert dict(c.figures)["training step img/s, eager"] == \
        "80.000 (median of the 1 rounds printed before the cap, before compiling)"


def test_a_model_step_cut_by_its_cap_still_gives_img_s_from_its_rounds():
    """bench/model_step.py killed at its cap after some rounds (no summary line): each model's img/s is the batch
    over its median round, labelled as such; a model that failed stays a failure; the projection uses the
    figure."""
    c = gpu_check.Check("model_step", "t", [], 1, status="NOT RUN (did not finish in its 200 s cap)")
    c.output = "\n".join([
        '{"event": "setting", "device": "H100", "torch": "2.11", "height": 800, "width": 1333, "batch": 12, '
        '"dtype": "float16", "nhwc": true}',
        '{"event": "setup", "model": "compiled (default)", "seconds": 80.5}',
        '{"event": "round", "round": 1, "seconds": {"eager": 0.5, "compiled (default)": 0.4}}',
        '{"event": "round", "round": 2, "seconds": {"eager": 0.7, "compiled (default)": 0.2}}',
        '{"event": "round", "round": 3, "seconds": {"eager": 0.6, "compiled (default)": 0.3}}'])
    gpu_check.read_model_step(c)
    figures = dict(c.figures)
    assert figures["training step img/s, eager"] == "20.000 (median of the 3 rounds printed before the cap)"
    assert figures["training step img/s, compiled (default)"].startswith("40.000 (median of the 3 rounds")
    assert figures["compile time, compiled (default)"] == "80.5 s"
    assert "per GPU: 20.0 img/s (eager, the step a run takes" in "\n".join(gpu_check.projection(c))
    # a model that failed after some rounds stays a failure (no rate for the projection to pick)
    c.output += '\n{"event": "failed", "model": "compiled (default)", "reason": "RuntimeError: a later replay"}'
    c.figures = []
    gpu_check.read_model_step(c)
    figures = dict(c.figures)
    assert figures["compiled (default)"] == "FAILED (RuntimeError: a later replay)"
    assert "training step img/s, compiled (default)" not in figures and "training step img/s, eager" in figures
    # with a summary, the summary's figures only
    c.output += '\n{"event": "summary", "model": "eager", "img_s": 21.5}'
    c.figures = []
    gpu_check.read_model_step(c)
    assert [v for k, v in c.figures if k.startswith("training step img/s")] == ["21.5"]


def test_a_model_step_cut_in_its_memory_runs_keeps_its_rates_and_the_projection(tmp_path):
    """Cut by its cap in the peak-memory runs that follow the summary (a cold compile cache: two compiles of about
    2 minutes each, then 6 memory processes): every rate was in, yet the check read NOT RUN, the verdict failed and
    projection.json was not written ("its rate is of the rounds before")."""
    rates = ['{"event": "setting", "device": "H100", "torch": "2.11", "height": 800, "width": 1333, "batch": 12, '
             '"dtype": "float16", "nhwc": true}',
             '{"event": "round", "round": 1, "seconds": {"eager": 0.5, "static": 0.6}}',
             '{"event": "summary", "model": "eager", "img_s": 21.5}']
    c = gpu_check.Check("model_step", "t", [], 1, status="NOT RUN (did not finish in its 330 s cap)")
    c.output = "\n".join(rates + ['{"event": "summary", "model": "static", "img_s": 18.0}',
                                  '{"event": "memory", "model": "eager", "batch": 8, "gib": 4.91}'])
    gpu_check.read_model_step(c)
    assert c.status.startswith("passed (every rate measured; the peak-memory runs"), c.status
    assert dict(c.figures)["peak GPU memory"].startswith("not all measured")
    assert gpu_check.verdict([c])[0] == 0
    gpu_check.projection(c, tmp_path, evaluation=_measured_evaluation())
    assert (tmp_path / "projection.json").exists()
    # cut before a model's summary (the static step's): still NOT RUN
    c = gpu_check.Check("model_step", "t", [], 1, status="NOT RUN (did not finish in its 330 s cap)")
    c.output = "\n".join(rates)
    gpu_check.read_model_step(c)
    assert c.status.startswith("NOT RUN"), c.status


def test_each_verdict_of_a_stage(tmp_path, monkeypatch):
    """One stage's verdicts from its program (subprocess.run stubbed, nothing started): exit 0 passed; another exit
    FAILED with the code; its time cap reached NOT RUN (its partial output kept in its log); no time left in the
    budget NOT RUN without starting it; a parity stage whose tests were all skipped (no oracle) NOT RUN."""
    import time

    def program(returncode=0, stdout="", timeout=False):
        def fake(cmd, cwd, env, cap, merge=False):
            return (None, "half a line") if timeout else (returncode, stdout)
        monkeypatch.setattr(gpu_check, "run_capped", fake)

    later = time.monotonic() + 100

    def stage(**kw):
        program(**kw)
        return gpu_check.run(gpu_check.Check("input", "t", ["prog"], 60), tmp_path, later)

    assert stage().status == "passed"
    assert stage(returncode=2).status == "FAILED (exit 2)"
    capped = stage(timeout=True)
    assert capped.status == "NOT RUN (did not finish in its 60 s cap)"
    assert "half a line" in (tmp_path / "input.log").read_text()
    program()
    squeezed = gpu_check.run(gpu_check.Check("input", "t", ["prog"], 60), tmp_path, time.monotonic() + 2)
    assert squeezed.status.startswith("NOT RUN (no time left in the budget") and "--only input" in squeezed.status
    # less left than the check needs (a cold compile): not started, though more than a few seconds are left
    short = gpu_check.run(gpu_check.Check("model_step", "t", ["prog"], 300, need=300), tmp_path,
                          time.monotonic() + 200)
    assert short.status.startswith("NOT RUN (no time left in the budget: 200 s left, it needs 300 s")

    parity = gpu_check.Check("parity", "p", [], 60, status="passed", output="3 skipped in 0.1s")
    gpu_check.read_parity(parity)
    assert parity.status.startswith("NOT RUN (no parity test ran")
    parity = gpu_check.Check("parity", "p", [], 60, status="passed", output="12 passed, 3 skipped in 9s")
    gpu_check.read_parity(parity)
    assert parity.status == "passed (3 skipped: see parity.log)"  # a skip is no pass, whatever its reason
    parity = gpu_check.Check("parity", "p", [], 60, status="passed", output="12 passed in 9s")
    gpu_check.read_parity(parity)
    assert parity.status == "passed"

    def syncs(output):
        c = gpu_check.Check("host_syncs", "h", [], 60, status="passed", output=output)
        gpu_check.read_host_syncs(c)
        return c
    clean = syncs("host syncs: 0 per step (static step, 2 images)\nhost syncs: 0 per step (static step, 12 images)\n")
    assert clean.status == "passed" and dict(clean.figures)["host syncs per step, 12 images"] == "0"
    waits = syncs("host syncs: 0 per step (static step, 2 images)\nhost syncs: 60 per step (static step, 12 images)")
    assert waits.status.startswith("FAILED (the step waits for the host")
    assert syncs("Traceback ...").status == "FAILED (no count printed)"
    # on CUDA: torch's sync debug mode over the same step (blocking copies an op-level count cannot see) counts too
    copies = syncs("CUDA synchronizing calls: 3 per step (static step, 2 images)\n"
                   "host syncs: 0 per step (static step, 2 images)\n")
    assert copies.status.startswith("FAILED (the step waits for the host")
    assert dict(copies.figures)["synchronizing CUDA calls per step (torch.cuda.set_sync_debug_mode), 2 images"] == "3"


def test_a_failing_stage_fails_the_verdict_and_the_caps_add_up_to_the_budget(tmp_path, monkeypatch):
    import argparse

    for quick in (True, False):
        checks = gpu_check.plan(argparse.Namespace(quick=quick, device="cpu", budget=1180.0), tmp_path)
        assert sum(c.cap for c in checks) == pytest.approx(1180.0)  # the default budget
    checks = [gpu_check.Check("input", "i", [], 1, status="passed"),
              gpu_check.Check("allreduce", "a", [], 1, status="FAILED (exit 1)")]
    monkeypatch.setattr(gpu_check, "plan", lambda args, out_dir: checks)
    monkeypatch.setattr(gpu_check, "run", lambda check, out_dir, deadline: check)
    monkeypatch.setattr(gpu_check.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0))
    assert gpu_check.main(["--device", "cpu", "--out", str(tmp_path / "gc")]) == 1
    assert json.loads((tmp_path / "gc" / "summary.json").read_text())["allreduce"]["status"] == "FAILED (exit 1)"


def test_a_synthetic_dataset_that_cannot_be_made_is_named_with_its_reason(tmp_path, monkeypatch, capsys):
    """Its generator's output was captured and dropped: a full disk ended gpu-check with a CalledProcessError and
    no reason."""
    made = subprocess.CompletedProcess([], 1, "", "Traceback ...\nOSError: [Errno 28] No space left on device\n")
    monkeypatch.setattr(gpu_check.subprocess, "run", lambda *a, **k: made)
    assert gpu_check.main(["--device", "cpu", "--out", str(tmp_path / "gc")]) == 1  # the user's, not a bug's 5
    err = capsys.readouterr().err
    assert "making the synthetic dataset" in err and "No space left on device" in err, err


def test_the_parity_stage_on_a_device_may_start_processes():
    """On an H200 (torch 2.11, Triton 3.6) the parity tests' first Triton kernel ran ``ldconfig -p`` to find the
    driver, and the fast-test guard (tests/conftest.py) failed every test that compiled one. The guard stays for
    CPU sessions (make test-fast) and is off for the parity stage on a device."""
    assert guard_processes({}) and guard_processes({"MASKRCNN_TEST_DEVICE": "cpu"})
    assert guard_processes({"MASKRCNN_TEST_DEVICE": ""})
    assert not guard_processes({"MASKRCNN_TEST_DEVICE": "cuda"})


def test_a_model_step_where_every_model_failed_is_a_report_not_a_crash():
    """On a GPU with less memory every model of the step can fail (out of memory at 12 images): the bench then
    prints a summary without a model, which the reader took for a model's (KeyError: the whole gpu-check ended
    without a report); a memory run that failed is a failure in the report, not a missing line."""
    c = gpu_check.Check("model_step", "t", [], 1, status="FAILED (exit 1)")
    c.output = "\n".join([
        '{"event": "setting", "device": "A100-SXM4-40GB", "torch": "2.11", "height": 800, "width": 1333, '
        '"batch": 12, "dtype": "float16", "nhwc": true}',
        '{"event": "failed", "model": "eager", "reason": "OutOfMemoryError: CUDA out of memory."}',
        '{"event": "failed", "model": "static eager", "reason": "OutOfMemoryError: CUDA out of memory."}',
        '{"event": "summary", "models": {}}',
        '{"event": "memory", "model": "eager", "batch": 12, "failed": ["torch.OutOfMemoryError: CUDA out of '
        'memory."]}'])
    gpu_check.read_model_step(c)
    figures = dict(c.figures)
    assert figures["eager"] == "FAILED (OutOfMemoryError: CUDA out of memory.)"
    assert figures["peak GPU memory alone, eager, batch 12"] == "FAILED (torch.OutOfMemoryError: CUDA out of memory.)"
    assert not any(k.startswith("training step img/s") for k in figures)
    assert gpu_check.projection(c) == ["no training-step figure: nothing to project"]
    # a model that failed after some rounds has its summary line too: a failure, not a rate for the projection
    c.output = "\n".join([
        '{"event": "failed", "model": "eager", "reason": "OutOfMemoryError: CUDA out of memory."}',
        '{"event": "summary", "model": "eager", "img_s": 80.0}',
        '{"event": "summary", "model": "compiled (default)", "img_s": 60.0}'])
    c.figures = []
    gpu_check.read_model_step(c)
    figures = dict(c.figures)
    assert "training step img/s, eager" not in figures and figures["eager"].startswith("FAILED")
    assert gpu_check.projection(c)[0].startswith("per GPU: 60.0 img/s (compiled (default), the eager step, which a "
                                                 "run takes, was not measured")


def test_a_budget_under_the_default_runs_the_gpu_only_checks_first_each_with_what_it_needs(tmp_path):
    """With `--budget 530` (what fits one 10-minute call on a lent GPU) the caps shrank in proportion: the training
    step got 213 s where a cold compile of the static step alone took 122 s on an H200, so it was cut every time.
    Now no cap is below the check's need, and the checks run in PRIORITY order, so what a budget leaves out is the
    end of the list, each naming the ``--only`` that runs it."""
    import argparse

    checks = gpu_check.plan(argparse.Namespace(quick=False, device="cuda", budget=530.0), tmp_path)
    assert [c.name for c in checks][:3] == ["model_step", "host_syncs", "parity"]
    caps = {c.name: c.cap for c in checks}
    assert caps["model_step"] >= 300 and caps["parity"] >= 87 and caps["evaluation"] >= 56
    assert all(c.cap >= c.need for c in checks)
    fits = sum(c.cap for c in checks[:3])
    assert fits <= 530 < fits + checks[3].need  # model_step, host_syncs, parity; not evaluation
    # the rest in a second call: only those, sharing its budget
    rest = gpu_check.plan(argparse.Namespace(quick=False, device="cuda", budget=360.0,
                                             only="training,compiled_training,input,scoring,allreduce"), tmp_path)
    assert [c.name for c in rest] == ["training", "compiled_training", "input", "scoring", "allreduce"]
    assert sum(c.cap for c in rest) == pytest.approx(360.0) and all(c.cap >= c.need for c in rest)
    with pytest.raises(SystemExit):
        gpu_check.main(["--only", "paritty"])


def test_every_gpu_config_evaluates_the_batch_the_gpu_check_measures():
    """The evaluation check's per-image time feeds the projection: it must be measured at the batch per GPU that
    the shipped GPU configs evaluate (TEST.IMS_PER_BATCH over the job's GPUs; it measured 8 while they run 1)."""
    seen = 0
    for path in sorted(Path(REPO).glob("config_DGX*.sh")):
        text = path.read_text()
        batch = int(re.search(r"TEST\.IMS_PER_BATCH (\d+)", text).group(1))
        nodes = int(re.search(r'DGXNNODES="\$\{DGXNNODES:-(\d+)\}"', text).group(1))
        gpus = int(re.search(r'DGXNGPU="\$\{DGXNGPU:-(\d+)\}"', text).group(1))
        assert batch == gpu_check.EVAL_IMAGES_PER_GPU * nodes * gpus, path.name
        seen += 1
    assert seen >= 4
    import argparse

    evaluation = next(c for c in gpu_check.plan(argparse.Namespace(quick=False, device="cuda", budget=1000.0),
                                                Path(REPO) / "results") if c.name == "evaluation")
    assert evaluation.cmd[evaluation.cmd.index("--batch") + 1] == str(gpu_check.EVAL_IMAGES_PER_GPU)


def test_the_report_is_kept_after_each_check_and_when_gpu_check_is_stopped(tmp_path, monkeypatch):
    """The report was written once, at the end: an outer time limit (SIGTERM) or a reader that choked on an
    unexpected output (a bare json.loads of a cut line) lost every figure. Now each check's figures are written as
    it ends, a reader's failure fails only its check, and a stop leaves the report of what ran."""
    import argparse

    out = tmp_path / "gc"
    outputs = {"evaluation": '{truncated', "allreduce": "allreduce: skipped, 1 GPU(s) visible (needs 2 or more)",
               "input": "DeviceTransform, batch of 8 to 800x1088 | 2.5 ms\ninput: host 300 img/s/core"}

    def plan(args, out_dir):
        return [gpu_check.Check(name, name, [name], 60) for name in ("input", "evaluation", "allreduce", "scoring")]

    def run_capped(cmd, cwd, env, cap, merge=False):
        if cmd[0] == "scoring":  # a SIGTERM while it runs: its session killed, what it printed kept
            gpu_check._stop(15, None)
            return None, "scoring half done"
        return 0, outputs[cmd[0]]

    monkeypatch.setattr(gpu_check, "plan", plan)
    monkeypatch.setattr(gpu_check, "run_capped", run_capped)
    monkeypatch.setattr(gpu_check.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0))
    monkeypatch.setattr(gpu_check, "stack", lambda device: ["a stack"])
    assert gpu_check.main(["--device", "cpu", "--out", str(out)]) == 128 + 15
    summary = json.loads((out / "summary.json").read_text())
    assert summary["input"]["status"] == "passed"
    assert summary["input"]["figures"] == [["hybrid input, device side, batch of 8 to 800x1088", "2.5 ms"],
                                           ["hybrid input, host side (this machine, one core)", "host 300 img/s/core"]]
    assert summary["evaluation"]["status"] == "FAILED (no summary line)"
    assert summary["allreduce"]["status"] == "skipped (one GPU: no all-reduce within the node)"
    assert summary["scoring"]["status"] == "NOT RUN (gpu-check was stopped while it ran)"
    assert "scoring half done" in (out / "scoring.log").read_text()
    assert "2.5 ms" in (out / "report.md").read_text()

    # a reader that raises fails its check only
    monkeypatch.setitem(gpu_check.READERS, "evaluation", lambda c: {}["no such figure"])
    monkeypatch.setattr(gpu_check, "plan", lambda args, out_dir: plan(args, out_dir)[:3])
    assert gpu_check.main(["--device", "cpu", "--out", str(out)]) == 1
    summary = json.loads((out / "summary.json").read_text())
    assert summary["evaluation"]["status"].startswith("FAILED (its output could not be read: KeyError")
    assert summary["input"]["status"] == "passed"


def test_a_one_gpu_node_passes_with_the_all_reduce_skipped_not_measured(tmp_path, monkeypatch, capsys):
    """On one GPU bench/allreduce.py prints that it skipped, exit 0: the last line said "passed: all 8 checks
    measured" though nothing was measured."""
    monkeypatch.setattr(gpu_check, "plan", lambda args, out_dir: [gpu_check.Check("input", "i", ["input"], 60),
                                                                gpu_check.Check("allreduce", "a", ["allreduce"], 60)])
    monkeypatch.setattr(gpu_check, "run_capped", lambda cmd, cwd, env, cap, merge=False: (0, {
        "input": "DeviceTransform, batch of 8 to 800x1088 | 2.5 ms\ninput: 300 img/s", "allreduce": "allreduce: skipped, 1 GPU(s) visible (needs 2 or more)"}[cmd[0]]))
    monkeypatch.setattr(gpu_check.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0))
    monkeypatch.setattr(gpu_check, "stack", lambda device: ["a stack"])
    assert gpu_check.main(["--device", "cpu", "--out", str(tmp_path / "gc")]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == ("gpu-check: passed: 1 check measured; skipped: allreduce (one GPU: no all-reduce within the "
                    "node)")


def test_a_parity_stage_whose_pytest_died_names_the_test_it_was_running():
    """pytest killed by a crash in a kernel (a segfault: exit -11) prints no summary line: the figure read "0
    passed, 0 failed, 0 skipped" beside the FAILED status, whatever had run."""
    out = ("collected 30 items\n\ntests/parity/test_device_against_the_cpu.py::test_nms_keep_sets_equal_the_cpus[0] "
           "PASSED [  3%]\ntests/parity/test_device_against_the_cpu.py::test_roi_align_equals_the_cpus ")
    c = gpu_check.Check("parity", "p", [], 60, status="FAILED (exit -11)", output=out)
    gpu_check.read_parity(c)
    assert c.status == "FAILED (exit -11)"
    assert c.figures == [("parity tests (pytest ended without its summary)", "1 passed, 0 failed, 0 skipped before "
                          "the end; running at the end: test_device_against_the_cpu.py::"
                          "test_roi_align_equals_the_cpus")], c.figures


def test_a_parity_stage_cut_by_its_cap_counts_the_tests_it_ran_and_names_the_one_it_was_running():
    """Cut by its cap, the parity stage has no summary line: it reported "0 passed, 0 failed", whatever ran. On an
    H100 (2026-11-27) it was cut at 131 s after 10 of its 30 tests, where an H200 had run 20 in 100 s; pytest -q's
    marks did not say which test held it. The stage runs pytest -v: the report names the test the cap cut, and the
    log has each test's outcome as it ended."""
    head = "============================= test session starts ==============================\ncollected 30 items\n\n"
    lines = ["tests/parity/test_device_against_the_cpu.py::test_nms_keep_sets_equal_the_cpus[0] PASSED [  3%]",
             "tests/parity/test_golden_heads.py::test_anchors_and_visibility_match SKIPPED (no golden) [  6%]",
             "tests/parity/test_golden_heads.py::test_rpn_post_processing_identical_including_order[eager] FAILED "
             "[ 10%]",
             "tests/parity/test_golden_heads.py::test_box_post_processing_identical[eager-per-group nms] PASSED "
             "[ 13%]",
             "tests/parity/test_golden_heads.py::test_box_post_processing_identical[compiled-per-group nms] "]
    c = gpu_check.Check("parity", "p", [], 60, status="NOT RUN (did not finish in its 78 s cap)",
                        output=head + "\n".join(lines))
    gpu_check.read_parity(c)
    assert c.figures == [("parity tests (cut by the cap)",
                          "2 passed, 1 failed, 1 skipped before the cap; running at the cap: "
                          "test_golden_heads.py::test_box_post_processing_identical[compiled-per-group nms]")]
    assert c.status == "FAILED (1 failed before the cap: see parity.log)"
    clean = gpu_check.Check("parity", "p", [], 60, status="NOT RUN (did not finish in its 78 s cap)",
                            output=head + "\n".join(lines[:2]) + "\n")
    gpu_check.read_parity(clean)
    assert clean.status.startswith("NOT RUN")
    assert clean.figures[0][1] == "1 passed, 0 failed, 1 skipped before the cap"  # cut between two tests
    # an id that holds an outcome word; a test that passed and then failed its teardown (two lines, one test)
    tricky = ["tests/parity/test_a.py::test_x[was PASSED] FAILED [  3%]",
              "tests/parity/test_a.py::test_y PASSED [  6%]", "tests/parity/test_a.py::test_y ERROR [  6%]",
              "tests/parity/test_a.py::test_z[SKIPPED case] "]
    cut = gpu_check.Check("parity", "p", [], 60, status="NOT RUN (did not finish in its 78 s cap)",
                          output=head + "\n".join(tricky))
    gpu_check.read_parity(cut)
    assert cut.figures[0][1] == ("0 passed, 2 failed, 0 skipped before the cap; running at the cap: "
                                 "test_a.py::test_z[SKIPPED case]")
    # a finished run: its last line counts, not a number in a traceback before it
    done = gpu_check.Check("parity", "p", [], 60, status="FAILED (exit 1)",
                           output=head + "E   assert '3 passed' == 7\n"
                                         "===== 1 failed, 20 passed, 4 skipped, 2 warnings in 95.1s =====\n")
    gpu_check.read_parity(done)
    assert done.figures == [("parity tests", "20 passed, 1 failed, 4 skipped")]
    plan = gpu_check.plan(argparse.Namespace(quick=False, device="cuda", budget=1000.0, only="parity"), Path("."))
    assert "-v" in plan[0].cmd and "-q" not in plan[0].cmd  # the lines read above


@pytest.mark.slow  # starts processes
def test_a_check_cut_by_its_cap_takes_the_processes_it_started_with_it(tmp_path):
    """bench/model_step.py's memory runs are its children: the cap killed only the check's own process, and a
    child went on using the GPU during the next checks' measurements."""
    pidfile = tmp_path / "child.pid"
    code = ("import subprocess, sys, time; "
            f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
            f"open({str(pidfile)!r}, 'w').write(str(p.pid)); time.sleep(60)")
    rc, out = gpu_check.run_capped([sys.executable, "-c", code], tmp_path, dict(os.environ), 3)
    assert rc is None
    _gone_within_5_s(int(pidfile.read_text()), "the check's child outlived its cap")


def _gone_within_5_s(pid, what):
    import time

    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    raise AssertionError(f"{what} (pid {pid})")


def test_a_summary_left_unreadable_is_one_line_not_a_traceback(tmp_path, capsys):
    """--across-nodes reads the node's summary.json: a cut one was a JSONDecodeError traceback (exit 5)."""
    (tmp_path / "summary.json").write_text('{"parity": {"status": "pas')
    (tmp_path / "report.md").write_text("# gpu-check\n")
    assert gpu_check.main(["--across-nodes", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"summary '{tmp_path / 'summary.json'}' is not JSON" in err[0], err
    assert (tmp_path / "report.md").read_text() == "# gpu-check\n"  # left as it was


@pytest.mark.slow  # starts processes
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT", "SIGHUP"])
def test_a_stop_signal_ends_the_running_check_and_leaves_the_report(tmp_path, sig):
    """An outer time limit's SIGTERM, Ctrl-C or a closed terminal: the running check's whole session goes at once,
    the checks after it are not started, the report holds what ran, exit 128 + the signal. (The stop used to be an
    exception raised wherever gpu-check was, e.g. inside a reader, which took it for that check's failure and went
    on; Ctrl-C and SIGHUP, which do not reach a check's own session, left it and its children running on the GPU
    into the next measurements.)"""
    import signal
    import time

    out, pidfile = tmp_path / "gc", tmp_path / "child.pid"
    code = textwrap.dedent(f"""
        import sys
        from maskrcnn_benchmark.cli import gpu_check
        sleeper = [sys.executable, "-c", "import subprocess, sys, time; "
                   "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
                   "open({str(pidfile)!r}, 'w').write(str(p.pid)); print('started', flush=True); time.sleep(60)"]
        gpu_check.plan = lambda args, out_dir: [gpu_check.Check("input", "i", ["true"], 60),
                                                gpu_check.Check("scoring", "s", sleeper, 60),
                                                gpu_check.Check("allreduce", "a", ["true"], 60)]
        gpu_check.stack = lambda device: ["a stack"]
        gpu_check.subprocess.run = lambda *a, **k: gpu_check.subprocess.CompletedProcess(a, 0)  # no synthetic data
        sys.exit(gpu_check.main(["--device", "cpu", "--out", {str(out)!r}]))
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 60
    while not pidfile.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.3)
    signum = getattr(signal, sig)
    proc.send_signal(signum)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signum, stdout + stderr
    assert f"gpu-check: stopped ({sig}): the report holds what ran" in stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["input"]["status"].startswith("FAILED (") or summary["input"]["status"] == "passed"
    assert summary["scoring"]["status"] == "NOT RUN (gpu-check was stopped while it ran)"
    assert summary["allreduce"]["status"] == "NOT RUN (gpu-check was stopped before it)"
    _gone_within_5_s(int(pidfile.read_text()), "the stopped check's child lives on")


def test_a_peak_memory_run_that_failed_fails_the_check():
    """The figure said FAILED under a check that said passed, and gpu-check exited 0."""
    c = gpu_check.Check("model_step", "t", [], 1, status="passed")
    c.output = "\n".join([
        '{"event": "setting", "device": "H100", "torch": "2.11", "height": 800, "width": 1333, "batch": 12, '
        '"dtype": "float16", "nhwc": true}',
        '{"event": "summary", "model": "eager", "img_s": 85.0}',
        '{"event": "memory", "model": "eager", "batch": 8, "gib": 4.9}',
        '{"event": "memory", "model": "eager", "batch": 12, "failed": ["torch.OutOfMemoryError: CUDA out of '
        'memory."]}'])
    gpu_check.read_model_step(c)
    assert c.status.startswith("FAILED") and "peak memory" in c.status and "eager at batch 12" in c.status, c.status


def test_the_golden_comparison_left_out_is_said_in_the_report_and_the_verdict():
    """Without ../shared/golden the golden parity tests skip and the device-vs-CPU ones run: the stage said
    'passed' with 'N skipped', and the last line 'all checks measured'. It says what did not run."""
    c = gpu_check.Check("parity", "parity tests", [], 1, status="passed")
    c.output = ("tests/parity/test_golden_layers.py::test_nms_golden SKIPPED (golden outputs not found at /x ...)\n"
                "tests/parity/test_device_against_the_cpu.py::test_nms_on_the_device PASSED\n"
                "SKIPPED [12] tests/parity/test_golden_layers.py:40: golden outputs not found at /x/shared/golden "
                "(../shared beside the checkout)\n"
                "SKIPPED [8] tests/parity/test_golden_losses.py:22: golden outputs not found at /x/shared/golden "
                "(../shared beside the checkout)\n"
                "========= 4 passed, 20 skipped in 15.02s =========\n")
    gpu_check.read_parity(c)
    assert c.status == ("passed (against the node's CPU only: the 20 golden tests skipped, ../shared/golden is not "
                        "beside the checkout)")
    assert gpu_check.verdict([c]) == (0, "gpu-check: passed: all 1 check measured, parity against the node's CPU "
                                         "only (the golden outputs absent)")
    c = gpu_check.Check("parity", "parity tests", [], 1, status="passed")
    c.output = "========= 20 skipped in 1.0s =========\n"
    gpu_check.read_parity(c)
    assert gpu_check.verdict([c]) == (1, "gpu-check: FAILED: -; NOT RUN: parity (no parity test ran: the golden "
                                         "outputs, ../shared/golden, are not beside the checkout)")


def test_a_cpu_rehearsal_writes_no_time_limits_for_the_trials(tmp_path):
    """make gpu-check GPU_CHECK_ARGS='--device cpu --quick' in the checkout wrote results/gpu-check/projection.json
    from a CPU rate at 96x128, where slurm/projection.sh takes the trials' time limits from."""
    step = gpu_check.Check("model_step", "t", [], 1, status="passed")
    step.figures = [("training step img/s, eager", "3.0")]
    lines = gpu_check.projection(step, tmp_path, device="cpu")
    assert not (tmp_path / "projection.json").exists()
    assert any("projection.json not written" in line for line in lines), lines
    # --quick on a GPU node: a batch of 1 at 96x128, launch-bound; the report said nothing of it and the trials
    # took their limits from that rate
    lines = gpu_check.projection(step, tmp_path, device="cuda", quick=True)
    assert not (tmp_path / "projection.json").exists()
    assert any("projection.json not written: --quick's tiny sizes" in line for line in lines), lines
    gpu_check.projection(step, tmp_path, device="cuda", evaluation=_measured_evaluation())
    assert (tmp_path / "projection.json").exists()
