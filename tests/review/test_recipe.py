"""The recipe check before training (tools/check_recipe.py, mlperf_review/recipe.py), against mlperf-logging's own
compliance checker, RCP file and RCP checker; and the shipped H100/H200 configs against the RCPs."""

import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import require_shared
from mlperf_review.recipe import check_recipe
from official_reference import official_compliance

ROOT = Path(__file__).resolve().parents[2]
REF = ROOT.parent / "shared" / "reference_logs" / "v0.7" / "dgxa100_ngc20.06_pytorch"
needs_ref = pytest.mark.usefixtures("reference_logs")


@pytest.fixture
def reference_logs():
    require_shared(str(REF), "NVIDIA's v0.7 reference logs")
H_CONFIGS = ["DGXH100", "DGXH200", "DGXH100_4x8x4", "DGXH200_4x8x4"]


def config_env(system):
    out = subprocess.run(["bash", "-c", f'source "{ROOT}/config_{system}.sh" >/dev/null && env -0'],
                         capture_output=True, check=True, env={"PATH": "/usr/bin:/bin"}).stdout
    return dict(item.split("=", 1) for item in out.decode().split("\0") if "=" in item)


def overrides(extra_config):
    tokens = extra_config.split()
    return dict(zip(tokens[::2], tokens[1::2]))


@pytest.mark.slow
@pytest.mark.parametrize("system", H_CONFIGS)
def test_h100_h200_configs_equal_an_rcp_exactly(system):
    """Batch, base LR, warmup steps and factor, decay steps: the values of the RCP at the config's batch, read from
    mlperf-logging's rcps_maskrcnn.json (not from our code); sockets x cores of a DGX H100/H200 (2 x 56)."""
    import mlperf_logging

    env = config_env(system)
    o = overrides(env["EXTRA_CONFIG"])
    rcps = json.loads((Path(mlperf_logging.__file__).parent / "rcp_checker" / "training_3.1.0"
                       / "rcps_maskrcnn.json").read_text())
    batch = int(o["SOLVER.IMS_PER_BATCH"])
    (rcp,) = [r for r in rcps.values() if r["BS"] == batch]
    h = rcp["Hyperparams"]
    assert float(o["SOLVER.BASE_LR"]) == h["opt_base_learning_rate"]
    assert int(o["SOLVER.WARMUP_ITERS"]) == h["opt_learning_rate_warmup_steps"]
    assert float(o["SOLVER.WARMUP_FACTOR"]) == h["opt_learning_rate_warmup_factor"]
    assert [int(x) for x in o["SOLVER.STEPS"].strip("()").split(",")] == h["opt_learning_decay_steps"]
    assert o["SOLVER.WARMUP_METHOD"] == "mlperf_linear"
    gpus = int(env["DGXNNODES"]) * int(env["DGXNGPU"])
    assert batch % gpus == 0 and int(o["MODEL.RPN.FPN_POST_NMS_TOP_N_TRAIN"]) == 1000 * batch // gpus
    assert (env["DGXNSOCKET"], env["DGXSOCKETCORES"], env["DGXNGPU"]) == ("", "", "8")  # layout: detected
    # and our check, run as the scripts run it, accepts it without a warning
    r = subprocess.run([sys.executable, "tools/check_recipe.py", f"--world-size={gpus}", "--config-file",
                        "configs/e2e_mask_rcnn_R_50_FPN_1x.yaml", *env["EXTRA_CONFIG"].split()],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0 and "WARNING" not in r.stderr, r.stderr
    assert f"RCP maskrcnn_ref_{batch}" in r.stdout


def _log_with(text, values):
    out = []
    for line in text.splitlines():
        if ":::MLLOG" in line:
            rec = json.loads(line.split(":::MLLOG ", 1)[1])
            if rec["key"] in values:
                rec["value"] = values[rec["key"]]
                line = ":::MLLOG " + json.dumps(rec)
        out.append(line)
    return "\n".join(out) + "\n"


BAD_RECIPES = {
    "as published": {},
    "lr not 0.02k": {"opt_base_learning_rate": 0.13},
    "decay factor": {"opt_learning_rate_decay_factor": 0.2},
    "three decay steps": {"opt_learning_rate_decay_steps": [18000, 24000, 26000]},
    "candidates": {"num_image_candidates": 6500},
    "small batch lr": {"global_batch_size": 8, "opt_base_learning_rate": 0.01},
}


@needs_ref
@pytest.mark.parametrize("case", sorted(BAD_RECIPES))
def test_refusals_match_the_official_compliance_checker(case, tmp_path):
    """Differential: NVIDIA's published DGX A100 log with its hyperparameter lines changed goes through the official
    compliance checker (ruleset 0.7.0, the log's); our check of the same lines refuses exactly when it fails."""
    text = _log_with(gzip.open(REF / "result_0.txt.gz", "rt").read(), BAD_RECIPES[case])
    log = tmp_path / "result_0.txt"
    log.write_text(text)
    official_ok = official_compliance(log, "0.7.0")
    verdict = check_recipe(text, ruleset="0.7.0")
    assert verdict.ok == official_ok, verdict.refusals
    assert official_ok == (case == "as published")
    for key in BAD_RECIPES[case]:
        if case != "small batch lr" or key == "opt_base_learning_rate":
            assert any(r.startswith(key) for r in verdict.refusals) or verdict.ok, verdict.refusals


@needs_ref
@pytest.mark.parametrize("batch, accepted", [(64, True), (96, True), (100, True), (128, True), (300, False),
                                            (4, True), (20, True)])
def test_global_batch_verdict_matches_the_rcp_checker(batch, accepted, tmp_path):
    """Differential: NVIDIA's five DGX A100 logs with global_batch_size changed, through mlperf-logging's RCP checker
    as the package checker runs it (training 3.1.0, the pruned RCPs: 8, 128, 272): an RCP at the batch ("RCP
    found"), interpolated (64 and 96 among them: their RCPs hold the reference's recipe, and were named as what the
    checker judges with), missing above the largest RCP (refused), or judged against the smallest RCP below it (a
    warning with the checker's floor: that RCP's mean over its max speedup)."""
    from mlperf_logging.rcp_checker import rcp_checker

    for gz in sorted(REF.glob("result_*.txt.gz")):
        # num_image_candidates 1000 (allowed at any batch): the logs' 8000 (8 images per chip) cannot make a batch of
        # 100 or 4, which the rules refuse before any RCP question
        (tmp_path / gz.name[:-3]).write_text(_log_with(gzip.open(gz, "rt").read(), {"global_batch_size": batch,
                                                                                      "num_image_candidates": 1000}))
    official_ok, message, _ = rcp_checker.check_directory(str(tmp_path), "training", "3.1.0", False, False,
                                                          rcp_pass="pruned_rcps")
    from mlperf_review.rules import HPARAM_KEYS

    lines = "".join(line + "\n" for line in (tmp_path / "result_0.txt").read_text().splitlines()
                    if any(f'"key": "{k}"' in line for k in HPARAM_KEYS))
    verdict = check_recipe(lines, ruleset="3.1.0")
    assert verdict.ok == accepted == (not message.startswith("Missing RCP")), (message, verdict.refusals)
    assert official_ok == accepted
    checker = rcp_checker.RCP_Checker("training", "3.1.0", "maskrcnn", False)
    full = checker._find_rcp(batch, "full_rcps")
    # the logs keep NVIDIA's v0.7 recipe (batch 64's): at another RCP's batch it differs from that RCP's recipe
    differs = [w for w in verdict.warnings if w.startswith("the recipe differs from RCP")]
    assert bool(differs) == (full is not None and batch != 64), verdict.warnings
    if message == "RCP found":
        assert verdict.rcp == f"maskrcnn_ref_{batch}" and verdict.warnings == differs
    elif message == "RCP Interpolation":
        low = checker._find_top_min_rcp(batch, "pruned_rcps")["BS"]
        high = checker._find_bottom_max_rcp(batch, "pruned_rcps")["BS"]
        if full is not None:  # an RCP's own batch: its recipe is compared, the checker's judgement named
            assert verdict.rcp == f"maskrcnn_ref_{batch}; the package checker's judgement: interpolated between " \
                f"{low} and {high}" and verdict.warnings == differs
        else:
            assert verdict.rcp == f"interpolated between {low} and {high}"
            assert any("has no RCP of its own" in w and f"between the RCPs {low} and {high}" in w
                       for w in verdict.warnings)
    elif accepted:
        smallest = checker._find_min_rcp("pruned_rcps")
        assert "below the smallest RCP" in verdict.warnings[0]
        assert f"at least {smallest['RCP Mean'] / smallest['Max Speedup']:.2f} epochs" in verdict.warnings[0]


def test_allow_non_rcp_turns_refusals_into_warnings():
    lines = "".join(":::MLLOG " + json.dumps({"namespace": "", "time_ms": 0, "event_type": "POINT_IN_TIME",
                                              "key": k, "value": v, "metadata": {}}) + "\n"
                    for k, v in {"global_batch_size": 512, "opt_base_learning_rate": 0.13}.items())
    refused = check_recipe(lines)
    assert not refused.ok and len(refused.refusals) == 2
    allowed = check_recipe(lines, allow_non_rcp=True)
    assert allowed.ok and len(allowed.warnings) == 2


@pytest.mark.slow
def test_config_dgx1_warns_that_its_warmup_differs_from_the_rcp():
    env = config_env("DGX1")
    r = subprocess.run([sys.executable, "tools/check_recipe.py", "--world-size=8", "--config-file",
                        "configs/e2e_mask_rcnn_R_50_FPN_1x.yaml", *env["EXTRA_CONFIG"].split()],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "maskrcnn_ref_48" in r.stderr and "opt_learning_rate_warmup_steps 625 (RCP 800)" in r.stderr


def test_check_recipe_refuses_image_sizes_other_than_800_1333(capsys):
    """closed_maskrcnn.yaml only checks the logged sizes are >= 0; the package's own 800/1333 rule
    (mlperf_review/rules.py) refuses 640/1066 in tools/check_recipe.py, with exit 10 (recipe refused) and one line
    naming each value. The same recipe at 800/1333 passes."""
    from maskrcnn_benchmark.cli import check_recipe as program

    base = ["--world-size=8", "--config-file", str(ROOT / "configs" / "e2e_mask_rcnn_R_50_FPN_1x.yaml"),
            *re.search(r'EXTRA_CONFIG="\$\{EXTRA_CONFIG:-(.*)\}"', (ROOT / "config_DGXH100.sh").read_text()).group(1).split()]
    assert program.main(base) == 0
    capsys.readouterr()
    assert program.main(base + ["INPUT.MIN_SIZE_TRAIN", "(640,)", "INPUT.MAX_SIZE_TRAIN", "1066"]) == 10
    err = capsys.readouterr().err
    assert "640 is not 800" in err and "1066 is not 1333" in err, err


@pytest.mark.parametrize("override, message", [
    (["SOLVER.STEPS", "(9100,12000)"], "opt_learning_rate_decay_steps [9100, 12000] is not (60000, 80000)"),
    (["MODEL.RPN.FPN_POST_NMS_TOP_N_TRAIN", "7000"], "num_image_candidates 7000 is not 1000 or 2000 or 1000 x "
                                                      "images per chip (4 images per chip: 4000)"),
])
def test_check_recipe_refuses_the_rules_reviewers_check_by_hand(capsys, override, message):
    """The two hyperparameter rules the compliance checker leaves to the reviewers (decay steps, candidates per
    chip), refused by tools/check_recipe.py at the 4-node H100 recipe's 32 GPUs, 4 images each (ruleset 1.0.0,
    where both apply)."""
    from maskrcnn_benchmark.cli import check_recipe as program

    base = ["--world-size=32", "--ruleset", "1.0.0", "--config-file",
            str(ROOT / "configs" / "e2e_mask_rcnn_R_50_FPN_1x.yaml"),
            *re.search(r'EXTRA_CONFIG="\$\{EXTRA_CONFIG:-(.*)\}"',
                       (ROOT / "config_DGXH100_4x8x4.sh").read_text()).group(1).split()]
    assert program.main(base) == 0
    capsys.readouterr()
    assert program.main(base + override) == 10
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("method", ["linear", "constant"])
def test_a_warmup_other_than_mlperf_linear_is_refused(capsys, method):
    """The log states the warmup as opt_learning_rate_warmup_factor and _steps, which mean mlperf_linear's ramp
    (NVIDIA's configs pass SOLVER.WARMUP_METHOD mlperf_linear; the default is linear). The H100 recipe with
    'constant' was accepted as RCP 96 and would have trained 625 iterations at 2.3e-5 while its log said the RCP's
    warmup. Refused in the closed division; ALLOW_NON_RCP turns it into a warning."""
    from maskrcnn_benchmark.cli import check_recipe as program

    base = ["--world-size=8", "--config-file", str(ROOT / "configs" / "e2e_mask_rcnn_R_50_FPN_1x.yaml"),
            *re.search(r'EXTRA_CONFIG="\$\{EXTRA_CONFIG:-(.*)\}"', (ROOT / "config_DGXH100.sh").read_text()).group(1).split()]
    assert program.main(base + ["SOLVER.WARMUP_METHOD", method]) == 10
    err = capsys.readouterr().err
    assert f"SOLVER.WARMUP_METHOD '{method}'" in err and "mlperf_linear" in err, err
    assert program.main(base + ["SOLVER.WARMUP_METHOD", method, "--allow-non-rcp"]) == 0
    assert "WARNING" in capsys.readouterr().err


H100_BASE = ["--world-size=8", "--config-file", str(ROOT / "configs" / "e2e_mask_rcnn_R_50_FPN_1x.yaml"),
             *re.search(r'EXTRA_CONFIG="\$\{EXTRA_CONFIG:-(.*)\}"',
                        (ROOT / "config_DGXH100.sh").read_text()).group(1).split()]


@pytest.mark.parametrize("key,value", [
    ("SOLVER.MOMENTUM", "0.0"), ("SOLVER.WEIGHT_DECAY", "0.0005"), ("SOLVER.BIAS_LR_FACTOR", "1"),
    ("SOLVER.WEIGHT_DECAY_BIAS", "1"), ("SOLVER.CLIP_GRAD_NORM", "1.0"), ("INPUT.MIN_SIZE_TRAIN", "(800,1024)"),
    ("INPUT.HORIZONTAL_FLIP_PROB_TRAIN", "0.0"), ("INPUT.MAX_SIZE_TEST", "1024"),
    ("MODEL.RPN.BATCH_SIZE_PER_IMAGE", "512"), ("MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE", "256"),
    ("MODEL.ROI_MASK_HEAD.CONV_LAYERS", "(256,256)"), ("MODEL.BACKBONE.FREEZE_CONV_BODY_AT", "1"),
    ("MLPERF.MIN_BBOX_MAP", "0.3"), ("MLPERF.MIN_SEGM_MAP", "0.5"),
])
def test_a_fixed_part_of_the_closed_recipe_that_no_log_records_is_refused(capsys, key, value):
    """The closed division fixes the reference's model and training recipe but for the hyperparameters the rules
    let a submitter choose (those the log records). The check only judged the logged values: momentum 0, weight
    decay 5e-4, bias LR x1, gradient clipping, several training sizes (only the first is logged), no flip, or
    another model were all "recipe accepted". Each is one refusal naming the key and the reference's value; an
    open-division or research run may change them."""
    from maskrcnn_benchmark.cli import check_recipe as program

    assert program.main(H100_BASE) == 0
    capsys.readouterr()
    assert program.main(H100_BASE + [key, value]) == 10
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error:")]
    assert len(err) == 1 and f"{key} " in err[0] and "the reference's" in err[0], err
    assert program.main(H100_BASE + [key, value, "--division", "open"]) == 0
    assert program.main(H100_BASE + [key, value, "--allow-non-rcp"]) == 0


def test_a_warmup_that_starts_below_zero_is_named(capsys):
    """mlperf_linear's first LR is BASE_LR - WARMUP_ITERS x WARMUP_FACTOR: with the GBS-48 RCP's 800 x 9.6e-5 at
    0.06 it is -0.0168, the first 175 iterations stepping against the gradient; nothing said so."""
    from maskrcnn_benchmark.cli import check_recipe as program

    base = ["--world-size=8", "--ruleset", "3.1.0", "--config-file",
            str(ROOT / "configs" / "e2e_mask_rcnn_R_50_FPN_1x.yaml"),
            *re.search(r'EXTRA_CONFIG="\$\{EXTRA_CONFIG:-(.*)\}"', (ROOT / "config_DGX1.sh").read_text()).group(1).split()]
    program.main(base)
    assert "negative" not in capsys.readouterr().err
    program.main(base + ["SOLVER.WARMUP_ITERS", "800"])
    err = capsys.readouterr().err
    assert "starts at a negative learning rate" in err and "-0.0168" in err, err


def test_the_closed_targets_are_the_compliance_checkers():
    """A closed run's targets (MLPERF.MIN_BBOX_MAP / MIN_SEGM_MAP decide its stop and run_stop's status) are the
    thresholds of the checker's own eval_accuracy rule, in every ruleset it judges (the oracle: mlperf-logging's
    closed_maskrcnn.yaml)."""
    from mlperf_review import official
    from mlperf_review.rules import CLOSED_FIXED_CONFIG, SUPPORTED_RULESETS

    for ruleset in SUPPORTED_RULESETS:
        rule = Path(official.recipe_rule_file(ruleset, "closed")).read_text()
        box = re.search(r"\['BBOX'\] >= ([0-9.]+)", rule)
        mask = re.search(r"\['SEGM'\] >= ([0-9.]+)", rule)
        assert box and mask, (ruleset, rule)
        assert (CLOSED_FIXED_CONFIG["MLPERF.MIN_BBOX_MAP"], CLOSED_FIXED_CONFIG["MLPERF.MIN_SEGM_MAP"]) == (
            float(box.group(1)), float(mask.group(1))), ruleset
