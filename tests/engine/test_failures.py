"""Every failure a user can cause or suffer ends in one line that says what to do, with the documented exit
code, and loses nothing: each path below runs the trainer as a user does, stdout and stderr together, and allows
at most two lines after the run's last log line (its text log or its MLPerf log, which ends with ``run_stop``).
The tracebacks of unexpected errors go to the run's log file, which the line names."""
import json
import os
import shutil
import subprocess

import pytest
import torch
from PIL import Image

from helpers import REPO, bomb_png
from train_runs import CPU_YAML, lines_after_last_log_line, mllog_events, run_in_process, run_merged

NEVER = ("MLPERF.MIN_BBOX_MAP", "1.0", "MLPERF.MIN_SEGM_MAP", "1.0")
SHORT = ("SOLVER.MAX_ITER", 4, "SOLVER.IMS_PER_BATCH", 4, "PER_EPOCH_EVAL", False, *NEVER)


def _one_error_line(r, code):
    tail = lines_after_last_log_line(r.stdout)
    assert r.returncode == code, r.stdout[-3000:]
    assert len(tail) <= 2, tail
    assert tail and tail[-1].startswith("error: "), tail
    assert "Traceback" not in r.stdout
    return tail[-1]


def _copy(tiny_data, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    out = tmp_path / "out"
    out.mkdir()
    return data, out


def _edit_json(path, fn):
    with open(path) as f:
        doc = json.load(f)
    fn(doc)
    with open(path, "w") as f:
        json.dump(doc, f)


FIVE_CATEGORIES = {1: 3, 3: 7, 7: 11}  # the synthetic ids 1, 3, 7 -> 3, 7, 11; plus 42 and 90


def _five_categories(doc):
    doc["categories"] = [{"id": i, "name": f"thing{i}"} for i in (3, 7, 11, 42, 90)]
    for k, a in enumerate(doc["annotations"]):
        a["category_id"] = (42, 90)[k % 2] if k % 4 == 0 else FIVE_CATEGORIES[a["category_id"]]


def test_num_classes_that_does_not_fit_the_data_is_one_line(tiny_data, tmp_path):
    """5 categories (ids 3, 7, 11, 42, 90) with the synthetic config's NUM_CLASSES 4 ran into ``IndexError: Target 5
    is out of bounds`` at iteration 1 (exit 5, 48 lines); now one line names the key, both numbers and the value
    to set, before the first iteration."""
    data, out = _copy(tiny_data, tmp_path)
    for split in ("train2017", "val2017"):
        _edit_json(data / "annotations" / f"instances_{split}.json", _five_categories)
    r = run_in_process(str(data), str(out), *SHORT)
    line = _one_error_line(r, 1)
    assert "MODEL.ROI_BOX_HEAD.NUM_CLASSES is 4" in line and "5 categories (ids 3, 7, 11, 42, 90)" in line
    assert "set MODEL.ROI_BOX_HEAD.NUM_CLASSES 6" in line
    assert "block_start" not in r.stdout  # found before training


@pytest.mark.slow  # a trainer process
def test_num_classes_is_derived_when_the_config_does_not_set_it(tiny_data, tmp_path):
    data, out = _copy(tiny_data, tmp_path)
    for split in ("train2017", "val2017"):
        _edit_json(data / "annotations" / f"instances_{split}.json", _five_categories)
    yaml = tmp_path / "no_num_classes.yaml"
    yaml.write_text("\n".join(line for line in open(CPU_YAML).read().splitlines() if "NUM_CLASSES" not in line))
    r = run_merged(str(data), str(out), *SHORT, config_file=str(yaml))
    assert r.returncode == 3, r.stdout[-3000:]
    # resolved once, before the model is built, and logged with the other resolved values
    assert "MODEL.ROI_BOX_HEAD.NUM_CLASSES 6 (not set: from the training data" in r.stdout
    assert r.stdout.count("NUM_CLASSES 6 (not set") == 1


def test_train_and_val_categories_that_disagree_are_one_line(tiny_data, tmp_path):
    data, out = _copy(tiny_data, tmp_path)
    _edit_json(data / "annotations" / "instances_val2017.json", _five_categories)
    line = _one_error_line(run_in_process(str(data), str(out), *SHORT), 1)
    assert "have different categories" in line and "instances_val2017.json" in line


def test_a_decompression_bomb_is_bad_input_that_names_the_file(tiny_data, tmp_path):
    data, out = _copy(tiny_data, tmp_path)
    victim = sorted((data / "train2017").iterdir())[2]
    victim.write_bytes(bomb_png())
    line = _one_error_line(run_in_process(str(data), str(out), *SHORT), 1)
    assert victim.name in line and "decompression bomb" in line


def test_an_image_whose_size_disagrees_with_its_annotation_is_named(tiny_data, tmp_path):
    data, out = _copy(tiny_data, tmp_path)
    victim = sorted((data / "train2017").iterdir())[1]
    Image.new("RGB", (64, 80), (90, 20, 200)).save(victim, format="JPEG")
    line = _one_error_line(run_in_process(str(data), str(out), *SHORT), 1)
    assert victim.name in line and "is 64x80, but its annotation" in line and "96x96" in line


def test_a_missing_validation_image_is_found_before_training(tiny_data, tmp_path):
    data, out = _copy(tiny_data, tmp_path)
    victim = sorted((data / "val2017").iterdir())[-1]
    victim.unlink()
    r = run_in_process(str(data), str(out), *SHORT)
    line = _one_error_line(r, 1)
    assert victim.name in line and "does not exist" in line and "instances_val2017.json" in line
    keys = [e["key"] for e in mllog_events(r.stdout)]
    assert "block_start" not in keys and keys[-1] == "run_stop"  # not an epoch into the run


ENV_MODULE = """
def setup_environment():
    from maskrcnn_benchmark.engine import trainer

    def run_step(self, images, targets):
        raise IndexError("Target 5 is out of bounds.")

    trainer.Trainer.run_step = run_step
"""


@pytest.mark.slow  # a trainer process
def test_an_unexpected_error_is_one_line_and_its_traceback_goes_to_the_log(tiny_data, tmp_path):
    data, out = _copy(tiny_data, tmp_path)
    hook = tmp_path / "site_env.py"
    hook.write_text(ENV_MODULE)
    r = run_merged(str(data), str(out), *SHORT, env={"TORCH_DETECTRON_ENV_MODULE": str(hook)})
    line = _one_error_line(r, 5)
    log = os.path.join(str(out), "log.txt")
    assert line.startswith("error: IndexError at maskrcnn_benchmark/engine/trainer.py:") or "site_env.py" in line
    assert "Target 5 is out of bounds." in line and f"(traceback in {log})" in line
    text = open(log).read()
    assert "Traceback (most recent call last)" in text and "IndexError: Target 5 is out of bounds." in text


# -- a full disk ---------------------------------------------------------------------------------------------------
def _tmpfs(path, size):
    if os.geteuid() != 0:
        pytest.skip("a full disk is simulated with a small tmpfs, which needs root")
    path.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True,
                       text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")


def _fill(path):
    """Fill the file system of ``path`` up to its last byte."""
    with open(os.path.join(path, "filler"), "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
        except OSError:
            pass


@pytest.fixture
def small_disk(tmp_path):
    """24 MB: the synthetic model's checkpoint (weights and momentum, 14 MB) fits once, not twice."""
    disk = tmp_path / "disk"
    _tmpfs(disk, "24m")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], capture_output=True)


@pytest.mark.slow  # a trainer process
def test_a_full_disk_names_the_checkpoint_and_keeps_the_previous_one(tiny_data, tmp_path, small_disk):
    data, _ = _copy(tiny_data, tmp_path)
    r = run_merged(str(data), str(small_disk), "SOLVER.MAX_ITER", 12, "SOLVER.IMS_PER_BATCH", 4,
                   "SAVE_CHECKPOINTS", True, "SOLVER.CHECKPOINT_PERIOD", 1, "PER_EPOCH_EVAL", False, *NEVER)
    line = _one_error_line(r, 1)
    saved = sorted(p for p in os.listdir(small_disk) if p.startswith("model_") and p.endswith(".pth"))
    assert saved, "no checkpoint fit at all: make the disk larger"
    failed = f"model_{int(saved[-1][6:13]) + 1:07d}.pth"
    assert line == (f"error: cannot write the checkpoint '{small_disk / failed}': [Errno 28] No space left on "
                    "device"), line
    state = torch.load(small_disk / saved[-1], weights_only=True)  # the one before is complete
    assert state["iteration"] == int(saved[-1][6:13])
    assert not [p for p in os.listdir(small_disk) if p.startswith(".tmp-")]


@pytest.mark.slow  # a trainer process
def test_a_full_disk_names_the_mlperf_log(tiny_data, tmp_path, small_disk):
    """The disk fills while the run trains: the next MLPerf log line (or text log line) cannot be written."""
    data, _ = _copy(tiny_data, tmp_path)
    env = {"TORCH_DETECTRON_ENV_MODULE": str(tmp_path / "fill_env.py")}
    (tmp_path / "fill_env.py").write_text(FILL_AT_ITERATION_2.format(disk=str(small_disk)))
    r = run_merged(str(data), str(small_disk), "SOLVER.MAX_ITER", 12, "SOLVER.IMS_PER_BATCH", 4, *NEVER, env=env)
    line = _one_error_line(r, 1)
    assert line.startswith((f"error: cannot write the MLPerf log '{small_disk / 'mlperf_log.txt'}': [Errno 28]",
                            f"error: cannot write the run log '{small_disk / 'log.txt'}': [Errno 28]")), line
    before = mllog_events(open(small_disk / "mlperf_log.txt").read())  # every line written is whole JSON
    assert before and before[0]["key"] == "submission_benchmark"


FILL_AT_ITERATION_2 = """
def setup_environment():
    from maskrcnn_benchmark.engine import trainer

    step = trainer.Trainer.run_step

    def run_step(self, images, targets):
        if self.iter == 2:
            with open("{disk}/filler", "wb", buffering=0) as f:
                try:
                    while True:
                        f.write(bytes(4096))
                        f.flush()
                except OSError:
                    pass
        return step(self, images, targets)

    trainer.Trainer.run_step = run_step
"""


@pytest.mark.slow  # a trainer process
def test_a_full_disk_names_the_results_json_and_keeps_the_previous_one(tiny_data, tmp_path, small_disk):
    data, out = _copy(tiny_data, tmp_path)
    r = run_merged(str(data), str(out), "SOLVER.MAX_ITER", 2, "SOLVER.IMS_PER_BATCH", 4, "SAVE_CHECKPOINTS", True,
                   "PER_EPOCH_EVAL", False, *NEVER)
    assert r.returncode == 3, r.stdout[-2000:]
    weights = str(out / "model_final.pth")
    folder = small_disk / "inference" / "coco_2017_val"
    folder.mkdir(parents=True)
    (folder / "bbox.json").write_text("[]")
    _fill(small_disk)
    cmd = [os.path.join(REPO, ".venv", "bin", "python") if os.path.exists(os.path.join(REPO, ".venv")) else
           "python", os.path.join(REPO, "tools", "test_net.py"), "--config-file", CPU_YAML, "--ckpt", weights,
           "DATASETS.DATA_DIR", str(data), "OUTPUT_DIR", str(small_disk), "DATALOADER.NUM_WORKERS", "0",
           "INPUT.MIN_SIZE_TEST", "96", "INPUT.MAX_SIZE_TEST", "96"]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    tail = lines_after_last_log_line(r.stdout)
    assert r.returncode == 1 and len(tail) <= 2, r.stdout[-2000:]
    assert tail[-1].startswith("error: cannot write the ") and "No space left on device" in tail[-1], tail
    assert (folder / "bbox.json").read_text() == "[]"  # what was there before is still there, whole
