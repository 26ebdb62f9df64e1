import os
import pytest
import sys

from train_runs import CPU_YAML, mllog_events, run_train
from maskrcnn_benchmark.config import get_cfg, merge_cfg_from_file, merge_cfg_from_list
from maskrcnn_benchmark.engine.test_net import evaluate_checkpoint

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
    # the final checkpoint (gathering every rank's random state, then writing) is written after the clock stops
    assert r.stdout.index('"key": "run_stop"') < r.stdout.index("model_final.pth"), r.stdout[-3000:]
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


@pytest.mark.slow
def test_scoring_slower_than_the_collective_timeout_keeps_every_rank(tiny_data, tmp_path):
    """Rank 0 waited alone for the scores still pending (at MAX_ITER, and for the earlier epochs' before an epoch
    end's checkpoint) while the other ranks sat in a collective (the stop agreement, the checkpoint's gather of the
    random states) that gives up after DISTRIBUTED_TIMEOUT: pycocotools scoring COCO val for minutes, and the
    other ranks failed with 'another rank stopped answering'. Rank 0 waits in slices, every rank agreeing after
    each whether it still waits. Here scoring takes 2.5 times the 8 s timeout; the run converges as it would."""
    out = str(tmp_path / "run")
    os.makedirs(out)
    slow = tmp_path / "slow"
    slow.mkdir()
    (slow / "sitecustomize.py").write_text(
        "import os, time\n"
        "if os.environ.get('SLOW_SCORING_S'):\n"
        "    from maskrcnn_benchmark.evaluation import scoring\n"
        "    _score = scoring.score_coco\n"
        "    def score_coco(*a, **k):\n"
        "        time.sleep(float(os.environ['SLOW_SCORING_S']))\n"
        "        return _score(*a, **k)\n"
        "    scoring.score_coco = score_coco\n")
    env = {"SLOW_SCORING_S": "20", "PYTHONPATH": os.pathsep.join(filter(None, [str(slow),
                                                                           os.environ.get("PYTHONPATH")]))}
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port=29637"]
    # 16 training images at a global batch of 4: epochs end at iterations 4 and 8 (MAX_ITER), each checkpointed
    r = run_train(tiny_data, out, "SOLVER.MAX_ITER", 8, "SOLVER.IMS_PER_BATCH", 4, "TEST.IMS_PER_BATCH", 4,
                  "SAVE_CHECKPOINTS", True, "SOLVER.CHECKPOINT_PERIOD", 4, "DISTRIBUTED_TIMEOUT", 8, *LOW_TARGET,
                  launcher=launcher, timeout=900, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    stops = [e for e in mllog_events(r.stdout) if e["key"] == "run_stop"]
    assert len(stops) == 1 and stops[0]["metadata"]["status"] == "success", r.stdout[-3000:]


def test_evaluation_of_a_checkpoint_waits_as_long_as_the_config_says(monkeypatch):
    """tools/test_net.py's ranks wait for each other (rank 0 scores and writes 150 MB of results while the others
    wait in the next dataset's gather) under the config's DISTRIBUTED_TIMEOUT, not a fixed 300 s."""
    from maskrcnn_benchmark.engine import test_net

    seen = {}

    def init(local_rank=None, device="cuda", timeout_s=300, side_group=False):
        seen["timeout_s"] = timeout_s
        raise RuntimeError("stop here")

    monkeypatch.setattr(test_net.comm, "init_distributed", init)
    cfg = get_cfg()
    merge_cfg_from_file(cfg, CPU_YAML)
    merge_cfg_from_list(cfg, ["DISTRIBUTED_TIMEOUT", 1800])
    with pytest.raises(RuntimeError, match="stop here"):
        evaluate_checkpoint(cfg)
    assert seen == {"timeout_s": 1800}


@pytest.mark.slow
def test_a_box_only_model_is_scored_for_boxes_only(tiny_data, tmp_path):
    """MODEL.MASK_ON False (the reference's default, a Faster R-CNN): tools/test_net.py scored segm too, on no
    masks, and printed a mask AP of 0 and a table of zeros; the reference's evaluation asks for segm only with
    MASK_ON."""
    import torch

    from maskrcnn_benchmark.engine.test_net import report
    from maskrcnn_benchmark.modeling import build_detection_model

    cfg = get_cfg()
    merge_cfg_from_file(cfg, CPU_YAML)
    merge_cfg_from_list(cfg, ["DATASETS.DATA_DIR", tiny_data, "OUTPUT_DIR", str(tmp_path / "out"),
                              "DATALOADER.NUM_WORKERS", 0, "INPUT.MIN_SIZE_TEST", 96, "INPUT.MAX_SIZE_TEST", 96,
                              "TEST.IMS_PER_BATCH", 4, "MODEL.MASK_ON", False, "MODEL.DEVICE", "cpu"])
    torch.manual_seed(0)
    weights = str(tmp_path / "boxes.pth")
    torch.save({"model": build_detection_model(cfg).state_dict()}, weights)
    (scores,) = evaluate_checkpoint(cfg, weights=weights).values()
    assert "bbox" in scores and "segm" not in scores
    text = report(cfg, "synthetic_val", scores)
    assert "box AP" in text and "mask AP" not in text, text


@pytest.mark.slow
def test_an_evaluation_stopped_before_its_results_keeps_the_earlier_summary(tiny_data, tmp_path, monkeypatch):
    """tools/test_net.py removed the earlier coco_eval.md before inferring: stopped (Ctrl-C, a time limit) or
    failed during the long inference, the earlier evaluation's summary was gone while its results json stayed.
    The summary goes once the results it summed up are replaced."""
    import torch

    from maskrcnn_benchmark.engine import test_net
    from maskrcnn_benchmark.modeling import build_detection_model

    cfg = get_cfg()
    merge_cfg_from_file(cfg, CPU_YAML)
    merge_cfg_from_list(cfg, ["DATASETS.DATA_DIR", tiny_data, "OUTPUT_DIR", str(tmp_path / "out"),
                              "DATALOADER.NUM_WORKERS", 0, "INPUT.MIN_SIZE_TEST", 96, "INPUT.MAX_SIZE_TEST", 96,
                              "TEST.IMS_PER_BATCH", 4, "MODEL.DEVICE", "cpu"])
    weights = str(tmp_path / "w.pth")
    torch.save({"model": build_detection_model(cfg).state_dict()}, weights)
    (folder := __import__("pathlib").Path(test_net.results_folder(cfg, cfg.DATASETS.TEST[0]))).mkdir(parents=True)
    for name in ("bbox.json", "segm.json", "coco_eval.md"):  # an earlier evaluation's
        (folder / name).write_text("[]" if name.endswith(".json") else "earlier: box AP 0.3\n")

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(test_net, "inference_on_dataset", stopped)
    with pytest.raises(KeyboardInterrupt):
        test_net.evaluate_checkpoint(cfg, weights=weights)
    assert (folder / "coco_eval.md").read_text() == "earlier: box AP 0.3\n"
    monkeypatch.undo()
    (scores,) = test_net.evaluate_checkpoint(cfg, weights=weights, skip_eval=True).values()  # results replaced
    assert scores["detections"] >= 0 and not (folder / "coco_eval.md").exists()
