import os
import pytest
import sys

import torch

from train_runs import CPU_YAML, mllog_events, run_train
from maskrcnn_benchmark.config import get_cfg, merge_cfg_from_file, merge_cfg_from_list
from maskrcnn_benchmark.engine.test_net import evaluate_checkpoint
from maskrcnn_benchmark.modeling import build_detection_model
from maskrcnn_benchmark.utils.checkpoint import DetectronCheckpointer

LOW_TARGET = ("MLPERF.MIN_BBOX_MAP", "0.0", "MLPERF.MIN_SEGM_MAP", "0.0")


@pytest.mark.slow
def test_two_process_gloo_run_trains_evaluates_and_stops_together(tiny_data, tmp_path):
    out = str(tmp_path / "run")
    os.makedirs(out)
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port=29631"]
    # 16 training images at a global batch of 4: epoch 1 ends at iteration 4, where the checkpoint is taken
    r = run_train(tiny_data, out, "SOLVER.MAX_ITER", 40, "SOLVER.IMS_PER_BATCH", 4, "TEST.IMS_PER_BATCH", 4,
                  "SAVE_CHECKPOINTS", True, "SOLVER.CHECKPOINT_PERIOD", 4, *LOW_TARGET, launcher=launcher,
                  timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    events = mllog_events(r.stdout)
    # one process logs: exactly one run_start/run_stop, success; both ranks exited 0 (torchrun's code)
    assert [e["key"] for e in events].count("run_start") == 1
    stops = [e for e in events if e["key"] == "run_stop"]
    assert len(stops) == 1 and stops[0]["metadata"]["status"] == "success"
    assert [e["value"] for e in events if e["key"] == "global_batch_size"] == [4]
    assert [e["value"] for e in events if e["key"] == "train_samples"] == [16]
    assert "world size 2" in r.stdout
    accuracy = [e for e in events if e["key"] == "eval_accuracy"]
    assert accuracy[0]["metadata"]["epoch_num"] == 1  # later epochs may be scored before the stop (background)

    # The same weights evaluated by one process (the library behind tools/test_net.py, no process group): each
    # rank inferred half of the validation images and rank 0 scored what it gathered; one process infers all of
    # them. Lost, duplicated or mis-attributed images would change the scores.
    cfg = get_cfg()
    merge_cfg_from_file(cfg, CPU_YAML)
    merge_cfg_from_list(cfg, ["DATASETS.DATA_DIR", tiny_data, "OUTPUT_DIR", str(tmp_path / "one"),
                              "DATALOADER.NUM_WORKERS", 0, "INPUT.MIN_SIZE_TEST", 96, "INPUT.MAX_SIZE_TEST", 96,
                              "TEST.IMS_PER_BATCH", 4])
    scores = evaluate_checkpoint(cfg, weights=os.path.join(out, "model_0000004.pth"))
    (one,) = scores.values()
    assert accuracy[0]["value"] == {"BBOX": one["bbox"]["stats"]["AP"], "SEGM": one["segm"]["stats"]["AP"]}


def _small_cfg(data_dir):
    cfg = get_cfg()
    merge_cfg_from_file(cfg, CPU_YAML)
    merge_cfg_from_list(cfg, ["DATASETS.DATA_DIR", data_dir, "DATALOADER.NUM_WORKERS", 0,
                              "INPUT.MIN_SIZE_TEST", 96, "INPUT.MAX_SIZE_TEST", 96,
                              "MODEL.ROI_HEADS.SCORE_THRESH", 0.0])
    return cfg


@pytest.mark.slow
def test_resume_restores_iteration_optimizer_and_schedule(tiny_data, tmp_path):
    out = str(tmp_path / "first")
    os.makedirs(out)
    r = run_train(tiny_data, out, "SOLVER.MAX_ITER", 6, "SOLVER.IMS_PER_BATCH", 4, "SAVE_CHECKPOINTS", True,
                  "SOLVER.CHECKPOINT_PERIOD", 4, extra_args=("--sync-eval",))
    assert r.returncode == 3, r.stderr[-2000:]
    ckpt = os.path.join(out, "model_0000004.pth")
    assert os.path.exists(ckpt) and os.path.exists(os.path.join(out, "model_final.pth"))
    assert not [f for f in os.listdir(out) if f.startswith(".tmp")]
    data = torch.load(ckpt, weights_only=True)
    assert data["iteration"] == 4 and "optimizer" in data and data["scheduler"]["last_epoch"] == 4

    out2 = str(tmp_path / "second")
    os.makedirs(out2)
    r2 = run_train(tiny_data, out2, "SOLVER.MAX_ITER", 6, "SOLVER.IMS_PER_BATCH", 4,
                   extra_args=("--sync-eval", "--resume", ckpt))
    assert r2.returncode == 3, r2.stderr[-2000:]
    assert "RESUMED from" in r2.stdout + r2.stderr
    assert "iter: 6" in r2.stdout and "iter: 20" not in r2.stdout

    # a plain MODEL.WEIGHT load takes the weights only: no resume line, training starts at iteration 1
    model = build_detection_model(_small_cfg(tiny_data))
    extra = DetectronCheckpointer(None, model).load_weights(ckpt)
    assert extra["iteration"] == 4 and extra["seed"] == 5 and len(extra["rng_states"]) == 1
