"""Runs that end cleanly whatever happens: exact resume, signals, a shared output folder, broken input."""
import os

import pytest
import torch

from maskrcnn_benchmark.config import get_cfg, merge_cfg_from_file
from maskrcnn_benchmark.modeling import build_detection_model
from maskrcnn_benchmark.utils.checkpoint import DetectronCheckpointer
from train_runs import CPU_YAML, lines_after_last_log_line, mllog_events, run_in_process, run_train

NEVER = ("MLPERF.MIN_BBOX_MAP", "1.0", "MLPERF.MIN_SEGM_MAP", "1.0")

LOW = ("MLPERF.MIN_BBOX_MAP", "0.0", "MLPERF.MIN_SEGM_MAP", "0.0")


def _final_weights(folder):
    return torch.load(os.path.join(folder, "model_final.pth"), weights_only=True)["model"]


@pytest.mark.slow
@pytest.mark.parametrize("mode,starts", [((), (3, 4)), (("--compile",), (3,))], ids=["eager", "compiled"])
def test_resume_at_any_iteration_continues_the_run_exactly(tiny_data, tmp_path, mode, starts):
    """16 images, batch 4: 4 iterations per epoch. Interrupted after iteration 3 (mid-epoch) or 4 (epoch
    boundary, with aspect-ratio grouping), the resumed run gets the same batches, LR, augmentation and random
    draws: its final weights are bitwise those of the uninterrupted run (CPU, one thread). Compiled too (the static
    step under torch.compile, fused SGD with its device-tensor LR, compiled before run_start with the random state
    restored). The compiled runs use the ``aot_eager`` backend: the resume path is the same as with inductor
    (graph capture, the compiled forward and its warm-up, the fused optimizer), without two cold inductor compiles
    (136 s of the suite); inductor's own numerics are tests/engine/test_compiled_equals_eager.py's."""
    common = ("SOLVER.MAX_ITER", 7, "SOLVER.IMS_PER_BATCH", 4, "SAVE_CHECKPOINTS", True, "SOLVER.CHECKPOINT_PERIOD",
              1, "PER_EPOCH_EVAL", False, "INPUT.HORIZONTAL_FLIP_PROB_TRAIN", 0.5, *NEVER)
    if mode:
        common += ("COMPILE_BACKEND", "aot_eager")
    full = tmp_path / "full"
    full.mkdir()
    r = run_train(tiny_data, str(full), *common, extra_args=("--sync-eval", *mode))
    assert r.returncode == 3, r.stderr[-3000:]
    if mode:  # compiled indeed, not fallen back to eager
        assert "compiled the training step" in r.stdout + r.stderr and "eager" not in (r.stdout + r.stderr).split(
            "compiled the training step")[1].splitlines()[0], (r.stdout + r.stderr)[-3000:]
    reference = _final_weights(full)
    # every checkpoint holds what a resume needs, written whole (no temporary file left)
    saved = torch.load(full / "model_0000004.pth", weights_only=True)
    assert saved["iteration"] == 4 and "optimizer" in saved and saved["scheduler"]["last_epoch"] == 4
    assert not [f for f in os.listdir(full) if f.startswith(".tmp")]
    if not mode:  # a plain MODEL.WEIGHT load takes the weights only (the rest comes back as extra data)
        cfg = get_cfg()
        merge_cfg_from_file(cfg, CPU_YAML)
        extra = DetectronCheckpointer(None, build_detection_model(cfg)).load_weights(str(full / "model_0000004.pth"))
        assert extra["iteration"] == 4 and extra["seed"] == 5 and len(extra["rng_states"]) == 1
    for start in starts:
        out = tmp_path / f"resumed_{start}"
        out.mkdir()
        ckpt = str(full / f"model_{start:07d}.pth")
        # --resume after the KEY VALUE pairs, as docs/cluster.md once showed it (it was taken for a config key)
        r = run_train(tiny_data, str(out), *common, "--resume", ckpt, extra_args=("--sync-eval", *mode))
        assert r.returncode == 3, r.stderr[-3000:]
        assert "RESUMED from" in r.stdout + r.stderr
        resumed = _final_weights(out)
        different = [k for k in reference if not torch.equal(reference[k], resumed[k])]
        assert different == [], (start, different[:5])


@pytest.mark.slow
def test_a_run_resumed_at_an_epoch_end_evaluates_that_epoch(tiny_data, tmp_path):
    """The checkpoint at an epoch's last iteration is written after that epoch's evaluation started, before its
    scores could arrive (background scoring): a run resumed from it never scored that epoch, and trained on past
    the epoch that may have met the targets. It evaluates the checkpoint's epoch first, and its weights stay
    bitwise those of the uninterrupted run (evaluation draws no random numbers)."""
    common = ("SOLVER.MAX_ITER", 8, "SOLVER.IMS_PER_BATCH", 4, "SAVE_CHECKPOINTS", True, "SOLVER.CHECKPOINT_PERIOD",
              4, *NEVER)
    full = tmp_path / "full"
    full.mkdir()
    r = run_train(tiny_data, str(full), *common, extra_args=("--sync-eval",))
    assert r.returncode == 3, r.stderr[-3000:]
    out = tmp_path / "resumed"
    out.mkdir()
    r = run_train(tiny_data, str(out), *common, "--resume", str(full / "model_0000004.pth"),
                  extra_args=("--sync-eval",))
    assert r.returncode == 3, r.stderr[-3000:]
    events = mllog_events(r.stdout)
    assert [e["metadata"]["epoch_num"] for e in events if e["key"] == "eval_start"] == [1, 2]
    assert [e["metadata"]["epoch_num"] for e in events if e["key"] == "eval_accuracy"] == [1, 2]
    reference, resumed = _final_weights(full), _final_weights(out)
    assert [k for k in reference if not torch.equal(reference[k], resumed[k])] == []
    # with a target epoch 1 meets: the checkpoint holds epoch 1's scores (--sync-eval: in before it was written),
    # so the run converged there and is not resumed
    out = tmp_path / "resumed_low"
    out.mkdir()
    r = run_train(tiny_data, str(out), *common[:-4], "--resume", str(full / "model_0000004.pth"), *LOW)
    assert r.returncode == 1 and "was written after epoch 1 reached the targets" in r.stderr, r.stderr[-3000:]
    # written before epoch 1's scores arrived (background scoring): the resumed run evaluates epoch 1 and stops on
    # it, before epoch 2's end (the stop decision was only exchanged from the next epoch end on)
    early = torch.load(full / "model_0000004.pth", weights_only=True)
    assert [s[0] for s in early["scores"]] == [1]
    torch.save(dict(early, scores=[]), tmp_path / "before_its_scores.pth")
    r = run_train(tiny_data, str(out), *common[:-4], "--resume", str(tmp_path / "before_its_scores.pth"), *LOW)
    assert r.returncode == 0, r.stderr[-3000:]
    events = mllog_events(r.stdout)
    assert [e["metadata"]["epoch_num"] for e in events if e["key"] == "eval_start"] == [1]
    assert [e["metadata"]["status"] for e in events if e["key"] == "run_stop"] == ["success"]




@pytest.fixture
def slow_scoring(monkeypatch):
    """Scoring slower than an iteration: each epoch's scores stay "not done" for their first 3 polls (one per
    iteration), then arrive as scored."""
    from maskrcnn_benchmark.evaluation.background import ScoresFuture

    done, polls = ScoresFuture.done, {}

    def slow(self):
        polls[self.epoch] = polls.get(self.epoch, 0) + 1
        return polls[self.epoch] > 3 and done(self)

    monkeypatch.setattr(ScoresFuture, "done", slow)


@pytest.mark.slow  # the background scorer is a process
def test_a_checkpoint_holds_the_scores_of_every_earlier_epoch(tiny_data, tmp_path, slow_scoring):
    """4 iterations per epoch, a checkpoint every 5: the one at iteration 5 came while epoch 1's scores were still
    being computed. A run resumed from it could not score epoch 1 again (its weights are gone, unlike an epoch
    end's checkpoint) and trained on past it, although epoch 1 had met the targets. The checkpoint now waits for
    the scores of the epochs before it and records them; resuming a run that had converged is refused in one line,
    and so is resuming with a MAX_ITER the checkpoint has reached."""
    common = ("SOLVER.MAX_ITER", 12, "SOLVER.IMS_PER_BATCH", 4, "SAVE_CHECKPOINTS", True, "SOLVER.CHECKPOINT_PERIOD",
              5)
    full = tmp_path / "full"
    full.mkdir()
    r = run_in_process(tiny_data, str(full), *common, *LOW)
    assert r.returncode == 0, r.stdout[-3000:]
    saved = torch.load(full / "model_0000005.pth", weights_only=True)
    assert [s[0] for s in saved["scores"]] == [1], saved.get("scores")
    events = mllog_events(r.stdout)
    assert [e["metadata"]["epoch_num"] for e in events if e["key"] == "eval_accuracy"] == [1]
    out = tmp_path / "resumed"
    out.mkdir()
    r = run_in_process(tiny_data, str(out), *common, *LOW, "--resume", str(full / "model_0000005.pth"))
    line = lines_after_last_log_line(r.stdout)[-1]
    assert r.returncode == 1, r.stdout[-3000:]
    assert line.startswith("error: checkpoint ") and "model_0000005.pth" in line and "epoch 1" in line \
        and "reached the targets" in line, line
    assert "block_start" not in [e["key"] for e in mllog_events(r.stdout)]
    # the run's folder: its last checkpoint (the final one, after the same epoch)
    r = run_in_process(tiny_data, str(out), *common, *LOW, "--resume", str(full))
    line = lines_after_last_log_line(r.stdout)[-1]
    assert r.returncode == 1 and line.startswith(f"error: checkpoint '{full}{os.sep}") and "epoch 1" in line, line
    r = run_in_process(tiny_data, str(out), *common[2:], "SOLVER.MAX_ITER", 5, *NEVER,
                       "--resume", str(full / "model_0000005.pth"))
    line = lines_after_last_log_line(r.stdout)[-1]
    assert r.returncode == 1 and "SOLVER.MAX_ITER 5" in line and "iteration 5" in line, r.stdout[-3000:]

    # a checkpoint of 2 processes resumed by 1: each process's shard of the data changes with their number
    saved["rng_states"] = saved["rng_states"] * 2
    saved["scores"] = []
    torch.save(saved, tmp_path / "two.pth")
    r = run_in_process(tiny_data, str(out), *common[2:], "SOLVER.MAX_ITER", 6, *NEVER, "PER_EPOCH_EVAL", False,
                       "--resume", str(tmp_path / "two.pth"))
    assert r.returncode == 3, r.stdout[-3000:]
    assert "the checkpoint was written by 2 processes, this run has 1: each process's share of the data differs" \
        in r.stdout, r.stdout[-3000:]
    assert [e["metadata"].get("resumed_from_iteration") for e in mllog_events(r.stdout)
            if e["key"] == "run_start"] == [5]  # a review names the run (mlperf_review)


# -- signals, a second run, leftovers ---------------------------------------------------------------------------
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from live_runs import Run, children  # noqa: E402
from train_runs import train_cmd  # noqa: E402


def _mid_run(tiny_data, out, *extra):
    """A run long enough to be stopped in the middle: the epoch-1 scorer is busy, training goes on."""
    cmd = train_cmd(tiny_data, out, "SOLVER.MAX_ITER", 400, "SOLVER.IMS_PER_BATCH", 4, "DATALOADER.NUM_WORKERS", 1,
                    *NEVER, *extra)
    return Run(cmd, out)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_ends_the_run_cleanly(tiny_data, tmp_path, sig):
    out = str(tmp_path)
    run = _mid_run(tiny_data, out)
    run.wait_for('"key": "eval_stop"')  # epoch 1 evaluated: the scoring process exists
    if sig == signal.SIGTERM:
        # a second run on the same folder is refused in one line, and touches nothing
        second = subprocess.run(train_cmd(tiny_data, out, "SOLVER.MAX_ITER", 4), capture_output=True, text=True,
                                cwd=out, timeout=120, env=dict(os.environ, OMP_NUM_THREADS="1"))
        assert second.returncode == 1
        assert second.stderr.strip().splitlines()[-1].startswith(f"error: output folder '{out}' is in use by "
                                                                 "another run (pid")
        assert "Traceback" not in second.stderr
    t0 = time.time()
    # to the whole process group, loader workers included: what Ctrl-C does, and what Slurm does at a time limit
    # or scancel (it signals every process of the step)
    os.killpg(run.proc.pid, sig)
    code, stdout, stderr = run.finish()
    assert time.time() - t0 < 15
    assert code == 128 + sig, stderr[-3000:]
    assert stderr.strip().splitlines()[-1] == f"error: stopped by {signal.Signals(sig).name}; run_stop logged as aborted"
    assert "Traceback" not in stderr
    stops = [e for e in mllog_events(stdout) if e["key"] == "run_stop"]
    assert len(stops) == 1 and stops[0]["metadata"]["status"] == "aborted"
    logged = [e["key"] for e in mllog_events(open(os.path.join(out, "mlperf_log.txt")).read())]
    assert logged.count("run_stop") == 1 and logged.count("init_start") == 1
    deadline = time.time() + 10
    while run.session_processes() and time.time() < deadline:
        time.sleep(0.2)
    assert run.session_processes() == []  # scorer, its pool, loader workers, resource tracker: all gone


@pytest.mark.slow
def test_killed_trainer_leaves_no_scorer_behind(tiny_data, tmp_path):
    run = _mid_run(tiny_data, str(tmp_path))
    run.wait_for('"key": "eval_stop"')
    run.proc.send_signal(signal.SIGKILL)
    run.finish()
    # the scorer asked the kernel to kill it with its parent; one spawned at epoch 1's hand-over, just before the
    # kill, may still be importing when its parent dies: it finds its parent gone before it serves, and exits. Under
    # the whole suite's load (3 workers on 2 cores, 2026-11-28) that took longer than 10 s once.
    deadline = time.time() + 60
    while run.session_processes() and time.time() < deadline:
        time.sleep(0.2)
    assert run.session_processes() == [], [_cmdline(p) for p in run.session_processes()]


@pytest.mark.slow
def test_next_run_starts_a_fresh_log_and_removes_temporary_files(tiny_data, tmp_path):
    out = str(tmp_path)
    r = run_train(tiny_data, out, "SOLVER.MAX_ITER", 4, "MODEL.WEIGHT", "/nonexistent/R-50.pkl")
    assert r.returncode == 12  # an attempt refused by the preflight (weights missing) writes nothing there
    assert os.listdir(out) == []
    earlier = ':::MLLOG {"namespace": "", "time_ms": 1, "event_type": "POINT_IN_TIME", "key": "submission_org", ' \
              '"value": "earlier", "metadata": {"file": "x.py", "lineno": 1}}\n'
    (tmp_path / "mlperf_log.txt").write_text(earlier)  # an earlier run's log
    (tmp_path / ".tmp-abcd1234.pth").write_bytes(b"half a checkpoint")
    r = run_train(tiny_data, out, "SOLVER.MAX_ITER", 4, "SOLVER.IMS_PER_BATCH", 4, "PER_EPOCH_EVAL", False,
                  *NEVER, extra_args=("--sync-eval",))
    assert r.returncode == 3, r.stderr[-2000:]
    keys = [e["key"] for e in mllog_events(open(os.path.join(out, "mlperf_log.txt")).read())]
    assert keys.count("init_start") == 1 and keys.count("submission_org") == 1 and keys.count("run_stop") == 1
    aside = [f for f in os.listdir(out) if f.startswith("mlperf_log.") and f != "mlperf_log.txt"]
    assert len(aside) == 1 and open(os.path.join(out, aside[0])).read() == earlier  # moved aside, not appended to
    assert not (tmp_path / ".tmp-abcd1234.pth").exists()
    assert "removed 1 temporary file(s) left by an interrupted run" in r.stdout


@pytest.mark.slow
def test_a_rank_that_stops_answering_is_named(tiny_data, tmp_path):
    """Two gloo ranks; rank 1 is frozen (SIGSTOP) mid-run. Rank 0's next collective times out after
    DISTRIBUTED_TIMEOUT and its one-line error names rank 1."""
    out = str(tmp_path)
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port=29637"]
    run = Run(train_cmd(tiny_data, out, "SOLVER.MAX_ITER", 400, "SOLVER.IMS_PER_BATCH", 4, *NEVER,
                         "DISTRIBUTED_TIMEOUT", 8, launcher=launcher), out)
    try:
        run.wait_for("iter: 20")
        ranks = children(run.proc.pid)  # torchrun starts each rank in a session of its own
        rank1 = [p for p in ranks if _env(p).get(b"RANK") == b"1"]
        assert len(rank1) == 1, ranks
        os.kill(rank1[0], signal.SIGSTOP)
        t0 = time.time()
        run.wait_for("stopped answering", timeout=90)
        waited = time.time() - t0
        line = [x for x in run.err if "stopped answering" in x][0]
        assert line.startswith("error: rank 1 stopped answering (no heartbeat); a collective on rank 0 failed "
                               "(DISTRIBUTED_TIMEOUT 8 s)"), line
        assert waited < 60
    finally:
        for pid in children(run.proc.pid) + run.session_processes():
            try:
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        run.finish()


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            line = f.read().replace(b"\0", b" ").decode(errors="replace")
        return f"{pid}: {line[:300]}"
    except OSError:
        return f"{pid}: gone"


def _env(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
    except OSError:
        return {}


@pytest.mark.slow
def test_a_dead_sibling_stops_the_run_cleanly(tiny_data, tmp_path):
    """bind_launch, 2 ranks: rank 1 is SIGKILLed; bind_launch sends SIGTERM to rank 0, which logs run_stop
    aborted and stops its scorer and loader workers; the launcher exits with the dead rank's code."""
    out = str(tmp_path)
    launcher = [sys.executable, "-m", "bind_launch", "--nproc_per_node=2", "--binding=none", "--master_port=29641"]
    run = Run(train_cmd(tiny_data, out, "SOLVER.MAX_ITER", 400, "SOLVER.IMS_PER_BATCH", 4,
                         "DATALOADER.NUM_WORKERS", 1, *NEVER, launcher=launcher), out)
    run.wait_for('"key": "eval_stop"')
    rank1 = [p for p in children(run.proc.pid) if _env(p).get(b"RANK") == b"1"]
    assert len(rank1) == 1
    t0 = time.time()
    os.kill(rank1[0], signal.SIGKILL)
    code, stdout, stderr = run.finish()
    assert time.time() - t0 < 20 and code == 137, stderr[-2000:]
    assert "error: stopped by SIGTERM; run_stop logged as aborted" in stderr
    stops = [e for e in mllog_events(stdout) if e["key"] == "run_stop"]
    assert len(stops) == 1 and stops[0]["metadata"]["status"] == "aborted"
    deadline = time.time() + 10
    while (run.session_processes() or children(run.proc.pid)) and time.time() < deadline:
        time.sleep(0.2)
    assert run.session_processes() == []


_FORKED_HELPER = """
import multiprocessing, time
from maskrcnn_benchmark.utils.signals import stop_on_signals
stop_on_signals()
child = multiprocessing.get_context("fork").Process(target=time.sleep, args=(60,), daemon=True)
child.start()
time.sleep(0.5)
child.terminate()          # what multiprocessing.Pool.terminate (and the with-block's exit) does to its workers
child.join(10)
print("alive" if child.is_alive() else f"ended {child.exitcode}")
"""


@pytest.mark.slow
def test_forked_helpers_still_end_on_sigterm():
    """Only data-loader workers ignore SIGTERM (their loader stops them). Any other process forked by the trainer
    (the COCO scorer's pool) must still end on it, or Pool.terminate() waits for it forever: a run hung for 600 s
    at the end of its evaluation this way."""
    r = subprocess.run([sys.executable, "-c", _FORKED_HELPER], capture_output=True, text=True, timeout=40)
    assert r.stdout.strip() == f"ended -{int(signal.SIGTERM)}", r.stdout + r.stderr


@pytest.mark.slow
def test_the_other_ranks_of_a_refused_run_write_nothing_into_the_folder(tiny_data, tmp_path):
    """A second job on a running job's OUTPUT_DIR, started by plain srun (which does not end the other tasks when
    one fails): rank 0 was refused in one line, while rank 1 had already opened log.rank1.txt in that folder,
    waited DISTRIBUTED_TIMEOUT for a process group that never came, and wrote its traceback into the running
    job's files. A rank other than 0 opens its log there only once the process group exists (rank 0 has then
    claimed the folder)."""
    from train_runs import train_cmd
    from maskrcnn_benchmark.utils.run_folder import claim_output_folder

    out = tmp_path / "running"
    lock, _, _ = claim_output_folder(str(out))  # the running job's
    before = sorted(p.name for p in out.iterdir())
    env = dict(os.environ, OMP_NUM_THREADS="1", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT="29641",
               LOCAL_WORLD_SIZE="2", TMPDIR=str(tmp_path))  # rank 1's traceback: a temporary file, here
    cmd = train_cmd(tiny_data, str(out), "SOLVER.MAX_ITER", 4, "DISTRIBUTED_TIMEOUT", 8)
    try:
        ranks = [subprocess.Popen(cmd, env=dict(env, RANK=str(r), LOCAL_RANK=str(r)), cwd=tmp_path,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in (0, 1)]
        outputs = [p.communicate(timeout=120) for p in ranks]
    finally:
        lock.close()
    assert ranks[0].returncode == 1 and "is in use by another run" in outputs[0][1], outputs[0]
    assert ranks[1].returncode != 0, outputs[1]
    assert sorted(p.name for p in out.iterdir()) == before, outputs[1][1][-2000:]
