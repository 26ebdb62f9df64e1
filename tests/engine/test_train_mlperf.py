"""End-to-end CPU training runs of tools/train_mlperf.py on a tiny synthetic dataset."""
import os

import pytest

from maskrcnn_benchmark.cli.gpu_check import FELL_BACK

from train_runs import (checker_failures, compliance, lines_after_last_log_line, mllog_events, run_in_process,
                        run_merged, run_train)

LOW_TARGET = ("MLPERF.MIN_BBOX_MAP", "0.0", "MLPERF.MIN_SEGM_MAP", "0.0")


# The --compile CLI path of the trainer, compiled before run_start as a submitter's run is.
@pytest.mark.slow
@pytest.mark.parametrize("mode", [(), ("--compile", "COMPILE_BACKEND", "aot_eager")], ids=["eager", "compiled"])
def test_short_run_early_stops_at_low_target_and_passes_checker(tiny_data, tmp_path, mode):
    """Also compiled (before run_start): the same MLPerf log, the same checker verdict. The compiled run uses the
    ``aot_eager`` backend (dynamo's graph capture and AOTAutograd, the run's compile and warm-up path, no code
    generated): with inductor it was the suite's longest compile when inductor's cache is cold, as on a fresh CI
    machine (311 s of a 1,047 s slow set on 2 cores). Inductor's numerics on the whole step are
    tests/engine/test_compiled_equals_eager.py's; an inductor-compiled run with CUDA graphs is gpu-check's
    ``compiled_training``."""
    out = str(tmp_path)
    r = run_merged(tiny_data, out, "SOLVER.MAX_ITER", 40, "SOLVER.IMS_PER_BATCH", 4, *LOW_TARGET, extra_args=mode)
    assert r.returncode == 0, r.stdout[-3000:]
    events = mllog_events(r.stdout)
    keys = [e["key"] for e in events]
    for key in ("submission_benchmark", "cache_clear", "init_start", "init_stop", "run_start", "seed",
                "global_batch_size", "num_image_candidates", "opt_base_learning_rate", "train_samples",
                "eval_samples", "block_start", "epoch_start", "eval_start", "eval_stop", "eval_accuracy",
                "run_stop"):
        assert key in keys, key
    stop = [e for e in events if e["key"] == "run_stop"]
    assert len(stop) == 1 and stop[0]["metadata"]["status"] == "success"
    acc = [e for e in events if e["key"] == "eval_accuracy"]
    assert acc[0]["metadata"]["epoch_num"] == 1 and set(acc[0]["value"]) == {"BBOX", "SEGM"}
    # 16 images / batch 4 = 4 iterations per epoch: the async score of epoch 1 stops the run long before 40
    assert max(e["metadata"].get("epoch_num", 0) for e in events) <= 3
    assert "time to train:" in r.stdout and "&&&& MLPERF METRIC THROUGHPUT=" in r.stdout
    compiled = [line for line in r.stdout.splitlines() if "compiled the training step" in line]
    if mode:  # compiled once, during initialization: before the clock starts
        assert len(compiled) == 1 and "failed" not in compiled[0], r.stdout[-3000:]
        assert not FELL_BACK.search(r.stdout), r.stdout[-3000:]  # and every full batch after it ran compiled
        assert r.stdout.index("compiled the training step") < r.stdout.index('"key": "run_start"')
    else:
        assert compiled == []  # the CPU default is eager
    log = os.path.join(out, "mlperf_log.txt")
    assert [e["key"] for e in mllog_events(open(log).read())] == keys
    rc, text = compliance(log)
    # Every format rule passes; only the official accuracy target (0.377/0.339) is, by design, not reached.
    assert checker_failures(text) == {"eval_accuracy"}, text[-3000:]


@pytest.mark.slow
def test_not_converged_run_is_aborted_and_fails_checker(tiny_data, tmp_path):
    out = str(tmp_path)
    r = run_train(tiny_data, out, "SOLVER.MAX_ITER", 8, "SOLVER.IMS_PER_BATCH", 4, extra_args=("--sync-eval",))
    assert r.returncode == 3
    events = mllog_events(r.stdout)
    assert [e["metadata"]["epoch_num"] for e in events if e["key"] == "eval_accuracy"] == [1, 2]
    assert [e for e in events if e["key"] == "run_stop"][0]["metadata"]["status"] == "aborted"
    assert "did NOT reach the target" in r.stdout
    rc, text = compliance(os.path.join(out, "mlperf_log.txt"))
    assert rc != 0 and checker_failures(text) == {"eval_accuracy"}, text[-3000:]


@pytest.mark.slow
def test_max_iter_inside_an_epoch_is_not_scored(tiny_data, tmp_path):
    """MAX_ITER 6 at 4 iterations per epoch ends inside epoch 2. With per-epoch evaluation only whole epochs are
    scored: the partial epoch 2 was evaluated too, and with a low enough target it logged run_stop success at a
    point that is no epoch boundary (the configs' MAX_ITER 40000 is 73 % into epoch 33 at batch 96)."""
    out = str(tmp_path)
    r = run_in_process(tiny_data, out, "SOLVER.MAX_ITER", 6, "SOLVER.IMS_PER_BATCH", 4, "MLPERF.MIN_BBOX_MAP",
                       "0.99", "MLPERF.MIN_SEGM_MAP", "0.99")
    assert r.returncode == 3, r.stdout[-3000:]
    events = mllog_events(r.stdout)
    assert [e["metadata"]["epoch_num"] for e in events if e["key"] == "eval_start"] == [1]
    assert [e["metadata"]["epoch_num"] for e in events if e["key"] == "eval_accuracy"] == [1]
    assert [e["metadata"]["status"] for e in events if e["key"] == "run_stop"] == ["aborted"]


@pytest.mark.slow
def test_a_final_checkpoint_that_cannot_be_written_leaves_a_converged_run_converged(tiny_data, tmp_path,
                                                                                   monkeypatch):
    """The final checkpoint is written after run_stop success: a full disk there ended the run with exit 1 and no
    time-to-train line, its MLPerf log saying success. Its failure is a logged error; the outcome stands."""
    import errno

    from maskrcnn_benchmark.utils.checkpoint import DetectronCheckpointer
    from maskrcnn_benchmark.utils.fileio import WriteError

    save = DetectronCheckpointer.save

    def full_disk_at_the_end(self, name, **kwargs):
        if name == "model_final":
            raise WriteError("checkpoint", f"{name}.pth", OSError(errno.ENOSPC, "No space left on device"))
        return save(self, name, **kwargs)

    monkeypatch.setattr(DetectronCheckpointer, "save", full_disk_at_the_end)
    r = run_in_process(tiny_data, str(tmp_path), "SOLVER.MAX_ITER", 40, "SOLVER.IMS_PER_BATCH", 4, *LOW_TARGET,
                       "SAVE_CHECKPOINTS", True, "SOLVER.CHECKPOINT_PERIOD", 0)
    assert r.returncode == 0, r.stdout[-3000:]
    assert "time to train:" in r.stdout and "the final checkpoint was not written" in r.stdout
    assert [e["metadata"]["status"] for e in mllog_events(r.stdout) if e["key"] == "run_stop"] == ["success"]


SLOW_FINAL_SAVE = """
def setup_environment():
    import sys, time
    from maskrcnn_benchmark.utils.checkpoint import DetectronCheckpointer

    save = DetectronCheckpointer.save

    def slow_final(self, name, **kwargs):
        if name == "model_final":
            print("FINAL SAVE STARTS", flush=True)
            time.sleep(4)
        return save(self, name, **kwargs)

    DetectronCheckpointer.save = slow_final
"""


@pytest.mark.slow
def test_a_stop_signal_after_a_converged_run_stop_keeps_the_outcome(tiny_data, tmp_path):
    """A Slurm time limit (SIGTERM) while the final checkpoint of a converged run is written: the run ended with
    128 + 15 and "run_stop logged as aborted", its MLPerf log saying success, and no time-to-train line (the
    trial counted as failed). After run_stop success a stop signal is only recorded."""
    import os
    import signal
    import subprocess

    from train_runs import train_cmd

    hook = tmp_path / "site_env.py"
    hook.write_text(SLOW_FINAL_SAVE)
    out = tmp_path / "out"
    out.mkdir()
    cmd = train_cmd(tiny_data, str(out), "SOLVER.MAX_ITER", 40, "SOLVER.IMS_PER_BATCH", 4, *LOW_TARGET,
                    "SAVE_CHECKPOINTS", True, "SOLVER.CHECKPOINT_PERIOD", 0)
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", TORCH_DETECTRON_ENV_MODULE=str(hook))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=out, env=env)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if "FINAL SAVE STARTS" in line:
            proc.send_signal(signal.SIGTERM)
            break
    rest, _ = proc.communicate(timeout=120)
    text = "".join(lines) + rest
    assert proc.returncode == 0, text[-3000:]
    assert "time to train:" in text and "stopped by" not in text
    assert [e["metadata"]["status"] for e in mllog_events(text) if e["key"] == "run_stop"] == ["success"]


@pytest.mark.slow
def test_the_printed_time_to_train_is_the_logs(tiny_data, tmp_path, monkeypatch):
    """The final checkpoint is written after run_stop, outside the timed region: the time to train the run prints
    stopped after it (and after the scorer's shutdown), so it was the log's plus the write. Here the write takes
    3 s more."""
    import re
    import time

    from maskrcnn_benchmark.utils.checkpoint import DetectronCheckpointer

    save = DetectronCheckpointer.save

    def slow_final(self, name, **kwargs):
        if name == "model_final":
            time.sleep(3)
        return save(self, name, **kwargs)

    monkeypatch.setattr(DetectronCheckpointer, "save", slow_final)
    r = run_in_process(tiny_data, str(tmp_path), "SOLVER.MAX_ITER", 40, "SOLVER.IMS_PER_BATCH", 4, *LOW_TARGET,
                       "SAVE_CHECKPOINTS", True, "SOLVER.CHECKPOINT_PERIOD", 0)
    assert r.returncode == 0, r.stdout[-3000:]
    events = {e["key"]: e["time_ms"] for e in mllog_events(r.stdout) if e["key"] in ("run_start", "run_stop")}
    logged = (events["run_stop"] - events["run_start"]) / 1000
    printed = float(re.search(r"time to train: ([\d.]+) s", r.stdout).group(1))
    assert abs(printed - logged) < 0.2, (printed, logged)


@pytest.mark.slow
def test_nan_loss_aborts_with_clear_message(tiny_data, tmp_path):
    out = str(tmp_path)
    r = run_in_process(tiny_data, out, "SOLVER.MAX_ITER", 30, "SOLVER.BASE_LR", "1e12", "SOLVER.WARMUP_ITERS", 0,
                       "SOLVER.CLIP_GRAD_NORM", 0.0)
    assert r.returncode == 2, r.stdout[-3000:]
    tail = lines_after_last_log_line(r.stdout)
    assert len(tail) == 1 and tail[0].startswith("error: non-finite loss at iteration"), tail
    stops = [e for e in mllog_events(r.stdout) if e["key"] == "run_stop"]
    assert len(stops) == 1 and stops[0]["metadata"]["status"] == "aborted"


@pytest.mark.parametrize("opts,needle,code", [
    (("SOLVER.BASE_LRR", "0.1"), "unknown config key 'SOLVER.BASE_LRR'", 1),
    # a missing dataset or weights file is found by the preflight before init_start, with its own exit code
    # (cli/exit_codes.py: DATASET_MISSING 11, WEIGHTS_MISSING 12) so a Slurm script can tell them apart
    (("DATASETS.DATA_DIR", "/nonexistent/data"), "annotation file '/nonexistent/data/annotations", 11),
    (("MODEL.WEIGHT", "/nonexistent/R-50.pkl"), "/nonexistent/R-50.pkl", 12),
])
def test_bad_input_gives_one_clear_error_line(tiny_data, tmp_path, opts, needle, code):
    """...and leaves an earlier run's folder as it was: a rerun with a mistyped path moved its log, MLPerf log and
    checkpoints aside (last_checkpoint included) before the preflight refused it."""
    earlier = {"log.txt": "earlier log\n", "mlperf_log.txt": ":::MLLOG {}\n", "last_checkpoint": "model_0000010.pth",
               "model_0000010.pth": "weights"}
    for name, text in earlier.items():
        (tmp_path / name).write_text(text)
    r = run_in_process(tiny_data, str(tmp_path), "SOLVER.MAX_ITER", 2, *opts)
    assert r.returncode == code, r.stdout[-2000:]
    tail = lines_after_last_log_line(r.stdout)
    assert len(tail) == 1 and tail[0].startswith("error: ") and needle in tail[0], r.stdout[-2000:]
    assert "Traceback" not in r.stdout
    assert {p.name: p.read_text() for p in tmp_path.iterdir() if p.name in earlier} == earlier
    assert sorted(p.name for p in tmp_path.iterdir() if p.name not in earlier and not p.name.startswith(".")) == []


@pytest.mark.parametrize("where,note", [
    ("build_detection_model", "before run_start: the MLPerf log has no run_stop"),  # while init builds the model
    ("make_device_loader", "run_stop logged as aborted"),                           # just after run_start
])
def test_a_stop_says_whether_the_mlperf_log_has_run_stop(tiny_data, tmp_path, monkeypatch, where, note):
    """A stop during init (a Slurm time limit in a long compile) said "run_stop logged as aborted", a run_stop the
    log never received: there is none before run_start."""
    import signal

    from maskrcnn_benchmark.engine import run as run_module
    from maskrcnn_benchmark.utils.signals import Stopped

    def stopped(*args, **kwargs):
        raise Stopped(signal.SIGTERM)

    monkeypatch.setattr(run_module, where, stopped)
    r = run_in_process(tiny_data, str(tmp_path), "SOLVER.MAX_ITER", 2)
    assert r.returncode == 128 + signal.SIGTERM, r.stdout[-2000:]
    assert r.stdout.strip().splitlines()[-1] == f"error: stopped by SIGTERM; {note}", r.stdout[-2000:]
    stops = [e["metadata"]["status"] for e in mllog_events(r.stdout) if e["key"] == "run_stop"]
    assert stops == ([] if note.startswith("before") else ["aborted"])


@pytest.mark.slow  # the scoring process
def test_a_stop_after_run_stop_success_does_not_say_aborted(tiny_data, tmp_path, monkeypatch):
    """A SIGTERM while the ranks close their last stop agreement, the targets met: run_stop success is logged on
    the way out, and the error line said "run_stop logged as aborted" over that log."""
    import signal

    from maskrcnn_benchmark.engine import mlperf_hooks
    from maskrcnn_benchmark.utils.signals import Stopped

    def stopped(self):
        raise Stopped(signal.SIGTERM)

    monkeypatch.setattr(mlperf_hooks.StopDecision, "close", stopped)
    r = run_in_process(tiny_data, str(tmp_path), "SOLVER.MAX_ITER", 40, "SOLVER.IMS_PER_BATCH", 4, *LOW_TARGET)
    assert r.returncode == 128 + signal.SIGTERM, r.stdout[-2000:]
    assert [e["metadata"]["status"] for e in mllog_events(r.stdout) if e["key"] == "run_stop"] == ["success"]
    assert r.stdout.strip().splitlines()[-1] == ("error: stopped by SIGTERM; after run_stop success (the MLPerf "
                                                 "log's outcome stands)"), r.stdout[-2000:]


@pytest.mark.slow
def test_corrupt_training_image_is_named(tiny_data, tmp_path):
    import shutil

    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    victim = sorted((data / "train2017").iterdir())[3]
    victim.write_bytes(b"\xff\xd8\xff\xe0 truncated")
    out = tmp_path / "out"
    out.mkdir()
    r = run_merged(str(data), str(out), "SOLVER.MAX_ITER", 20, "SOLVER.IMS_PER_BATCH", 4,
                   "DATALOADER.NUM_WORKERS", 1)
    assert r.returncode == 1, r.stdout[-2000:]
    tail = lines_after_last_log_line(r.stdout)
    assert len(tail) == 1 and tail[0].startswith("error: image file") and victim.name in tail[0], tail
    assert "corrupt" in tail[0] and "Traceback" not in r.stdout
    stops = [e for e in mllog_events(r.stdout) if e["key"] == "run_stop"]
    assert len(stops) == 1 and stops[0]["metadata"]["status"] == "aborted"


@pytest.mark.slow
def test_hybrid_and_reference_paths_train_to_the_same_weights(tiny_data, tmp_path):
    """Six iterations with random sizes 80-112 (enlarging and reducing the 96x96 images), flips and a loader
    worker: the hybrid path (decode in the worker, the rest batched on the device) gives bitwise the weights of
    the reference path (PIL in the worker)."""
    import torch

    weights = {}
    for hybrid in ("False", "True"):
        out = tmp_path / hybrid
        out.mkdir()
        r = run_train(tiny_data, str(out), "SOLVER.MAX_ITER", 6, "SOLVER.IMS_PER_BATCH", 4, "DATALOADER.NUM_WORKERS",
                      1, "INPUT.MIN_SIZE_TRAIN", "(80,96,112)", "INPUT.MAX_SIZE_TRAIN", 128, "SAVE_CHECKPOINTS",
                      True, "SOLVER.CHECKPOINT_PERIOD", 0, "PER_EPOCH_EVAL", False, "DATALOADER.HYBRID", hybrid,
                      "MLPERF.MIN_BBOX_MAP", 1.0, "MLPERF.MIN_SEGM_MAP", 1.0, extra_args=("--sync-eval",))
        assert r.returncode == 3, r.stdout[-2000:] + r.stderr[-2000:]
        weights[hybrid] = torch.load(out / "model_final.pth", weights_only=True)["model"]
    assert [k for k in weights["False"] if not torch.equal(weights["False"][k], weights["True"][k])] == []
