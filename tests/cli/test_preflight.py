"""tools/preflight.py: every cause that would end a run, found before it starts, with its own line and exit code
(in-process through the program's ``main``)."""
import json
import os

import pytest
import torch

from helpers import R50_YAML
from maskrcnn_benchmark.cli import exit_codes, preflight
from maskrcnn_benchmark.engine import preflight as checks

# The H100 recipe (RCP 96) at 8 processes: everything but the machine is right.
RECIPE = ["SOLVER.BASE_LR", "0.12", "SOLVER.WARMUP_FACTOR", "0.000192", "SOLVER.WARMUP_ITERS", "625",
          "SOLVER.WARMUP_METHOD", "mlperf_linear", "SOLVER.STEPS", "(12000,16000)", "SOLVER.IMS_PER_BATCH", "96",
          "TEST.IMS_PER_BATCH", "8", "MODEL.RPN.FPN_POST_NMS_TOP_N_TRAIN", "12000"]


@pytest.fixture
def coco(tmp_path):
    """A COCO 2017 layout with empty image folders and a weights file (nothing is read, only looked for)."""
    for d in ("train2017", "val2017", "annotations", "models"):
        (tmp_path / d).mkdir()
    for split in ("train", "val"):
        (tmp_path / "annotations" / f"instances_{split}2017.json").write_text(json.dumps({"images": []}))
    (tmp_path / "models" / "R-50.pkl").write_bytes(b"")
    return tmp_path


class FakeCuda:
    def __init__(self, n):
        self.n = n

    def is_available(self):
        return self.n > 0

    def device_count(self):
        return self.n


def run(coco, *extra, gpus=8, world=8, per_node=8, monkeypatch, capsys):
    monkeypatch.setattr(torch, "cuda", FakeCuda(gpus))
    code = preflight.main(["--world-size", str(world), "--nproc-per-node", str(per_node), "--config-file",
                           R50_YAML, "DATASETS.DATA_DIR", str(coco), "MODEL.WEIGHT", str(coco / "models/R-50.pkl"),
                           *RECIPE, *extra])
    err = capsys.readouterr().err.strip().splitlines()
    return code, [ln for ln in err if ln.startswith("error:")]


def test_ready(coco, monkeypatch, capsys):
    assert run(coco, monkeypatch=monkeypatch, capsys=capsys) == (0, [])


@pytest.mark.parametrize("change,code,words", [
    (lambda c: os.remove(c / "annotations/instances_val2017.json"), exit_codes.DATASET_MISSING,
     ["annotation file", "instances_val2017.json", "DATASETS.TEST", "--verify-only"]),
    (lambda c: os.rmdir(c / "train2017"), exit_codes.DATASET_MISSING,
     ["image folder", "train2017", "DATASETS.TRAIN"]),
    (lambda c: os.remove(c / "models/R-50.pkl"), exit_codes.WEIGHTS_MISSING, ["MODEL.WEIGHT", "R-50.pkl"]),
])
def test_missing_files(coco, change, code, words, monkeypatch, capsys):
    change(coco)
    rc, errors = run(coco, monkeypatch=monkeypatch, capsys=capsys)
    assert rc == code.code and len(errors) == 1, errors
    assert all(w in errors[0] for w in words), errors[0]


@pytest.mark.parametrize("extra,key", [(["TEST.COCO_BACKEND", "faster_coco_eval"], "TEST.COCO_BACKEND"),
                                       (["--coco-backend", "faster_coco_eval"], "--coco-backend")])
def test_a_scoring_backend_that_is_not_installed_is_refused(coco, monkeypatch, capsys, extra, key):
    """faster-coco-eval is an optional package: asked for where it is not installed, the preflight said ready and
    the first evaluation failed, after run_start and a whole epoch (test_net: after inferring the whole test
    set). One line naming the setting; auto takes pycocotools there."""
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "faster_coco_eval" else find_spec(name, *a))
    rc, errors = run(coco, *extra, monkeypatch=monkeypatch, capsys=capsys)
    assert (rc, errors) == (exit_codes.BAD_INPUT.code, [
        f"error: {key} faster_coco_eval: the package faster-coco-eval, which scores every epoch's AP, is not "
        "installed in this Python: pip install faster-coco-eval, or TEST.COCO_BACKEND auto"])
    assert run(coco, "TEST.COCO_BACKEND", "auto", monkeypatch=monkeypatch, capsys=capsys) == (0, [])


@pytest.mark.parametrize("env,line", [
    ({"MLPERF_RULESET": "4.0.0"}, "error: --ruleset (or MLPERF_RULESET) '4.0.0' is not a Mask R-CNN training "
                                  "ruleset: 0.7.0, 1.0.0, 1.1.0, 2.0.0, 2.1.0, 3.0.0, 3.1.0"),
    ({"MLPERF_SUBMISSION_DIVISION": "Closed"}, "error: --division (or MLPERF_SUBMISSION_DIVISION) 'Closed' is "
                                               "neither closed nor open"),
])
def test_a_ruleset_or_division_from_the_environment_is_one_line(coco, monkeypatch, capsys, env, line):
    """An environment default escapes argparse's choices: MLPERF_RULESET=4.0.0 (mlperf-logging has no Mask R-CNN
    rules for it) or MLPERF_SUBMISSION_DIVISION=Closed was an internal error (exit 5, a traceback file), and
    run_and_time.sh stopped before a run the trainer would have taken."""
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert run(coco, monkeypatch=monkeypatch, capsys=capsys) == (exit_codes.BAD_INPUT.code, [line])


@pytest.mark.parametrize("names", ["('coco_2017_val','coco_2017_train')", "()"])
def test_a_training_run_scores_one_test_set(coco, monkeypatch, capsys, names):
    """The run evaluates and stops on one validation set (MLPerf's eval_accuracy is one pair of APs): a second
    DATASETS.TEST name was built, its files read on every rank, and then never evaluated, silently."""
    rc, errors = run(coco, "DATASETS.TEST", names, monkeypatch=monkeypatch, capsys=capsys)
    assert (rc, len(errors)) == (exit_codes.BAD_INPUT.code, 1), errors
    assert errors[0].startswith("error: DATASETS.TEST ") and "must name one dataset" in errors[0]
    assert "tools/test_net.py" in errors[0]


def test_a_training_run_has_masks_to_score(coco, monkeypatch, capsys):
    """The run stops on box and mask AP: with MODEL.MASK_ON False (the reference's default, where a config file
    does not set it) it scored a mask AP of 0 every epoch and trained to SOLVER.MAX_ITER, to log aborted. (The
    closed recipe check refuses it first; a research run got through.)"""
    monkeypatch.setenv("ALLOW_NON_RCP", "1")
    rc, errors = run(coco, "MODEL.MASK_ON", "False", monkeypatch=monkeypatch, capsys=capsys)
    assert (rc, len(errors)) == (exit_codes.BAD_INPUT.code, 1), errors
    assert errors[0].startswith("error: MODEL.MASK_ON False: ") and "mask AP" in errors[0], errors


@pytest.mark.parametrize("status", ["available", "on-prem", "onprem", "cloud", "preview", "research"])
def test_a_submission_status_the_checker_refuses_is_refused_before_the_run(coco, monkeypatch, capsys, status):
    """MLPERF_SUBMISSION_STATUS was logged as given: 'available' (the system description's word) passed the
    preflight and the whole run, and the log then failed mlperf-logging's compliance checker. The values taken
    are those the checker's own rule accepts (its common.yaml CHECK, evaluated here as the checker does)."""
    import yaml
    from mlperf_logging import compliance_checker

    rules = os.path.join(os.path.dirname(compliance_checker.__file__), "training_3.1.0", "common.yaml")
    with open(rules) as f:
        rule = next(r["KEY"] for r in yaml.safe_load(f) if r.get("KEY", {}).get("NAME") == "submission_status")
    accepted = eval(rule["CHECK"], {}, {"v": {"value": status}})  # noqa: S307 - the checker's own rule
    monkeypatch.setenv("MLPERF_SUBMISSION_STATUS", status)
    rc, errors = run(coco, monkeypatch=monkeypatch, capsys=capsys)
    if accepted:
        assert (rc, errors) == (0, [])
    else:
        assert (rc, errors) == (exit_codes.BAD_INPUT.code, [
            f"error: MLPERF_SUBMISSION_STATUS '{status}' is not a submission status mlperf-logging accepts: "
            "cloud, onprem, preview, research"])


def test_global_batch_not_divisible(coco, monkeypatch, capsys):
    rc, errors = run(coco, world=40, per_node=8, monkeypatch=monkeypatch, capsys=capsys)
    assert rc == exit_codes.BATCH_NOT_DIVISIBLE.code
    assert errors == ["error: SOLVER.IMS_PER_BATCH (96) is not divisible by the number of processes (40): every "
                      "process takes the same number of images; use a multiple of 40 or another number of GPUs"]
    # 3 nodes: the training batch splits (96 / 24: 4 images per GPU, so 4000 candidates), the test batch of 8 does
    # not
    rc, errors = run(coco, "MODEL.RPN.FPN_POST_NMS_TOP_N_TRAIN", "4000", world=24, per_node=8,
                     monkeypatch=monkeypatch, capsys=capsys)
    assert rc == exit_codes.BATCH_NOT_DIVISIBLE.code and errors[0].startswith("error: TEST.IMS_PER_BATCH (8)")


def test_fewer_gpus_than_processes_per_node(coco, monkeypatch, capsys):
    rc, errors = run(coco, gpus=4, monkeypatch=monkeypatch, capsys=capsys)
    assert rc == exit_codes.TOO_FEW_GPUS.code and "8 processes per node but torch sees 4 GPU(s)" in errors[0]


def test_srun_with_gpus_per_task_gives_each_task_its_own_gpu(coco, monkeypatch, capsys):
    """srun --ntasks-per-node=8 --gpus-per-task=1: each task sees one GPU (Slurm binds them), and the check asked
    for 8 there (exit 14, 'two ranks would share a GPU') while the run works: the process group takes local rank
    modulo the GPUs it sees. A task given fewer GPUs than it asked for is still refused."""
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "32")
    monkeypatch.setenv("SLURM_GPUS_PER_TASK", "h100:1")
    assert run(coco, gpus=1, world=8, per_node=8, monkeypatch=monkeypatch, capsys=capsys) == (0, [])
    monkeypatch.setenv("SLURM_GPUS_PER_TASK", "2")
    rc, errors = run(coco, gpus=1, world=8, per_node=8, monkeypatch=monkeypatch, capsys=capsys)
    assert rc == exit_codes.TOO_FEW_GPUS.code and "srun --gpus-per-task=2 but torch sees 1 GPU(s)" in errors[0]
    monkeypatch.delenv("SLURM_GPUS_PER_TASK")  # no per-task binding: the node's GPUs, one per local rank
    rc, errors = run(coco, gpus=1, world=8, per_node=8, monkeypatch=monkeypatch, capsys=capsys)
    assert rc == exit_codes.TOO_FEW_GPUS.code


def test_no_gpu_on_a_gpu_system(coco, monkeypatch, capsys):
    monkeypatch.setattr(checks, "_nvidia_devices", lambda: [])
    monkeypatch.setattr(checks, "_driver_version", lambda: None)
    rc, errors = run(coco, gpus=0, monkeypatch=monkeypatch, capsys=capsys)
    assert rc == exit_codes.NO_GPU.code and "no GPU is visible" in errors[0]


def test_gpus_present_but_unusable_names_the_driver(coco, monkeypatch, capsys):
    monkeypatch.setattr(checks, "_nvidia_devices", lambda: ["nvidia0", "nvidia1"])
    monkeypatch.setattr(checks, "_driver_version", lambda: "535.104.05")
    monkeypatch.setattr(checks, "_torch_cuda", lambda: "2.12.1 (CUDA 13.0)")
    rc, errors = run(coco, gpus=0, monkeypatch=monkeypatch, capsys=capsys)
    assert rc == exit_codes.NO_GPU.code
    assert "driver 535.104.05" in errors[0] and "CUDA 13.0" in errors[0] and "--nv" in errors[0]


def test_recipe_refused_before_anything_else(coco, monkeypatch, capsys):
    rc, errors = run(coco, "INPUT.MIN_SIZE_TRAIN", "(640,)", monkeypatch=monkeypatch, capsys=capsys)
    assert rc == exit_codes.RECIPE_REFUSED.code and "min_image_size 640 is not 800" in errors[-1]


def test_a_cpu_config_needs_no_gpu(coco, monkeypatch, capsys):
    assert run(coco, "MODEL.DEVICE", "cpu", gpus=0, monkeypatch=monkeypatch, capsys=capsys) == (0, [])


def test_each_cause_has_its_own_code():
    codes = [c.code for c in exit_codes.EXIT_CODES]
    assert len(codes) == len(set(codes))
    assert {exit_codes.PREFLIGHT[k].code for k in exit_codes.PREFLIGHT} == {10, 11, 12, 13, 14, 15}


@pytest.mark.slow  # starts a Python of its own (this process has torch loaded): under a second
def test_a_cpu_run_is_judged_without_loading_torch(coco):
    """run_and_time.sh starts tools/preflight.py before every run (and the Slurm job before its first trial,
    tools/check_recipe.py before a job): for a CPU config neither loads torch (about 4 CPU-seconds of imports before
    a line is printed), with the number of classes read from the annotation files and a weights file looked for.
    A CUDA config imports torch to count the GPUs (test_fewer_gpus_than_processes_per_node)."""
    import subprocess
    import sys

    for split in ("train", "val"):
        (coco / "annotations" / f"instances_{split}2017.json").write_text(json.dumps(
            {"images": [], "categories": [{"id": 3 * i + 1, "name": f"c{i}"} for i in range(80)]}))  # ids with gaps
    no_classes = coco / "no_num_classes.yaml"
    no_classes.write_text("\n".join(ln for ln in open(R50_YAML).read().splitlines() if "NUM_CLASSES" not in ln))
    argv = ["--world-size", "8", "--config-file", str(no_classes), "DATASETS.DATA_DIR", str(coco), "MODEL.WEIGHT",
            str(coco / "models/R-50.pkl"), "MODEL.DEVICE", "cpu", *RECIPE]
    script = ("import sys\nfrom maskrcnn_benchmark.cli import check_recipe, preflight\n"
              f"codes = [preflight.main({argv!r}), check_recipe.main({argv!r})]\n"
              "print(codes, sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'torchvision'}), "
              "'maskrcnn_benchmark.data.catalog' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    # both accepted, nothing of torch loaded, the categories read through the data's catalog module
    assert r.stdout.strip().splitlines()[-1] == "[0, 0] [] True", r.stdout + r.stderr


def test_a_missing_training_annotation_file_is_a_missing_dataset_when_the_classes_come_from_it(coco, monkeypatch,
                                                                                                capsys):
    """With MODEL.ROI_BOX_HEAD.NUM_CLASSES unset, the recipe's judge reads the number of classes from the training
    annotation file: a missing one ended the preflight with exit 1 (a file it could not read), where the trainer,
    which checks the files first, says 11 (dataset missing)."""
    no_classes = coco / "no_num_classes.yaml"
    no_classes.write_text("\n".join(ln for ln in open(R50_YAML).read().splitlines() if "NUM_CLASSES" not in ln))
    os.remove(coco / "annotations/instances_train2017.json")
    monkeypatch.setattr(torch, "cuda", FakeCuda(8))
    code = preflight.main(["--world-size", "8", "--nproc-per-node", "8", "--config-file", str(no_classes),
                           "DATASETS.DATA_DIR", str(coco), "MODEL.WEIGHT", str(coco / "models/R-50.pkl"), *RECIPE])
    errors = [ln for ln in capsys.readouterr().err.strip().splitlines() if ln.startswith("error:")]
    assert code == exit_codes.DATASET_MISSING.code and len(errors) == 1, (code, errors)
    assert "instances_train2017.json" in errors[0] and "DATASETS.TRAIN" in errors[0]


def test_a_resumed_run_needs_its_checkpoint_not_model_weight(coco, monkeypatch, capsys):
    """--resume reads the checkpoint, never MODEL.WEIGHT: a missing R-50.pkl stopped the resumed run (exit 12, a
    file it does not read), and a missing checkpoint was found only after init_start and the model's build,
    named a 'weights file'. The checkpoint is what is checked, by its option's name."""
    os.remove(coco / "models/R-50.pkl")
    ckpt = coco / "model_0001000.pth"
    ckpt.write_bytes(b"")
    assert run(coco, "--resume", str(ckpt), monkeypatch=monkeypatch, capsys=capsys) == (0, [])
    rc, errors = run(coco, "--resume", str(coco / "model_0002000.pth"), monkeypatch=monkeypatch, capsys=capsys)
    assert rc == exit_codes.WEIGHTS_MISSING.code and len(errors) == 1
    assert "--resume" in errors[0] and "model_0002000.pth" in errors[0] and "MODEL.WEIGHT" not in errors[0]


def test_a_resumed_run_may_name_its_folder(coco, monkeypatch, capsys, tmp_path):
    """`--resume OUTPUT_DIR` (the reference's trainer resumed from its folder by itself) said the checkpoint "does
    not exist" for a folder that does; `--resume OUTPUT_DIR/last_checkpoint` (the tag) passed the preflight and
    failed after init_start and the model's build as "not a torch checkpoint". Both name the folder's last
    checkpoint; a folder without one is one line."""
    from maskrcnn_benchmark.engine.preflight import resume_checkpoint

    out = tmp_path / "run"
    out.mkdir()
    rc, errors = run(coco, "--resume", str(out), monkeypatch=monkeypatch, capsys=capsys)
    assert rc == exit_codes.WEIGHTS_MISSING.code and len(errors) == 1, errors
    assert "names no checkpoint (no last_checkpoint there" in errors[0], errors
    (out / "model_0001000.pth").write_bytes(b"")
    (out / "last_checkpoint").write_text("/elsewhere/run/model_0001000.pth")  # written where the run started
    assert run(coco, "--resume", str(out), monkeypatch=monkeypatch, capsys=capsys) == (0, [])
    for given in (out, out / "last_checkpoint", out / "model_0001000.pth"):
        assert resume_checkpoint(str(given)) == str(out / "model_0001000.pth")


@pytest.mark.parametrize("name,option", [("WORLD_SIZE", "--world-size"), ("LOCAL_WORLD_SIZE", "--nproc-per-node")])
def test_a_count_from_the_environment_that_is_not_a_number_is_one_line(monkeypatch, capsys, name, option):
    """The options' defaults were read with int() while the parser was built: WORLD_SIZE=8x was a ValueError
    traceback before any error handling."""
    from maskrcnn_benchmark.cli import preflight

    monkeypatch.setenv(name, "8x")
    with pytest.raises(SystemExit) as e:
        preflight.main(["--config-file", "x.yaml"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code != 0 and len(err) == 1 and option in err[0] and "'8x'" in err[0], err


def test_the_trainer_checks_the_division_it_logs_too():
    """The trainer checked the submission status before init_start, not the division: MLPERF_SUBMISSION_DIVISION
    =Closed with the trainer started alone (or PREFLIGHT_DONE=1) was logged, and the compliance check failed after
    the run."""
    from maskrcnn_benchmark.engine.preflight import check_submission_status
    from maskrcnn_benchmark.utils.errors import ConfigError

    with pytest.raises(ConfigError, match="MLPERF_SUBMISSION_DIVISION 'Closed' is neither closed nor open"):
        check_submission_status({"MLPERF_SUBMISSION_DIVISION": "Closed"})
    for division in ("", "closed", "open"):
        check_submission_status({"MLPERF_SUBMISSION_DIVISION": division})
