"""MLPerf Training facts for Mask R-CNN used by the review (targets, rulesets, closed-division rules).

The verdict rules themselves (file count, failed runs, seeds, RCPs, score) are the official tools', run by
:mod:`.official`; what is here explains or warns.
"""

from __future__ import annotations

import datetime as _dt
import math
from typing import Dict, List, Optional, Tuple

BENCHMARK = "maskrcnn"
TARGET_BBOX = 0.377
TARGET_SEGM = 0.339
SUPPORTED_RULESETS = ("0.7.0", "1.0.0", "1.1.0", "2.0.0", "2.1.0", "3.0.0", "3.1.0")
RCP_MIN_RULESET = "1.0.0"  # reference convergence points and seed checks start with v1.0 (closed division)

# Publication day of each round's results (mlcommons/training_results_vX.Y). A log belongs to the first round
# published after the day it was written; later logs to the newest round (Mask R-CNN was retired after 3.1).
ROUND_PUBLISHED = (
    ("0.7.0", _dt.date(2020, 7, 29)),
    ("1.0.0", _dt.date(2021, 6, 30)),
    ("1.1.0", _dt.date(2021, 12, 1)),
    ("2.0.0", _dt.date(2022, 6, 29)),
    ("2.1.0", _dt.date(2022, 11, 9)),
    ("3.0.0", _dt.date(2023, 6, 27)),
    ("3.1.0", _dt.date(2023, 11, 8)),
)

# mllog keys logged once per run that describe the training recipe (shown as hyperparameters).
HPARAM_KEYS = (
    "global_batch_size",
    "gradient_accumulation_steps",
    "opt_name",
    "opt_base_learning_rate",
    "opt_learning_rate_warmup_steps",
    "opt_learning_rate_warmup_factor",
    "opt_learning_rate_decay_factor",
    "opt_learning_rate_decay_steps",
    "opt_weight_decay",
    "num_image_candidates",
    "min_image_size",
    "max_image_size",
    "train_samples",
    "eval_samples",
    "number_of_nodes",
    "accelerators_per_node",
)


# The closed division's fixed parts that a maskrcnn_benchmark config sets and no log records: the reference's
# model and training recipe (the rules let a closed submission choose only the hyperparameters of the rules table,
# which the log records and the compliance checker judges), keyed by config key, with the reference's values
# (maskrcnn-benchmark's e2e_mask_rcnn_R_50_FPN_1x.yaml and defaults as NVIDIA's v0.7 configs ran them; SGD
# momentum 0.9, weight decay 1e-4 and 0 on biases, bias LR x2; images 800/1333, horizontal flip only, no gradient
# clipping). SOLVER.WARMUP_METHOD is judged apart (the logged warmup means mlperf_linear's ramp).
CLOSED_FIXED_CONFIG = {
    "SOLVER.MOMENTUM": 0.9,
    "SOLVER.WEIGHT_DECAY": 0.0001,
    "SOLVER.WEIGHT_DECAY_BIAS": 0,
    "SOLVER.BIAS_LR_FACTOR": 2,
    "SOLVER.CLIP_GRAD_NORM": 0.0,
    "INPUT.MIN_SIZE_TRAIN": (800,),
    "INPUT.MAX_SIZE_TRAIN": 1333,
    "INPUT.MIN_SIZE_TEST": 800,
    "INPUT.MAX_SIZE_TEST": 1333,
    "INPUT.HORIZONTAL_FLIP_PROB_TRAIN": 0.5,
    "INPUT.PIXEL_MEAN": (102.9801, 115.9465, 122.7717),
    "INPUT.PIXEL_STD": (1.0, 1.0, 1.0),
    "INPUT.TO_BGR255": True,
    "DATALOADER.SIZE_DIVISIBILITY": 32,
    "DATALOADER.ASPECT_RATIO_GROUPING": True,
    "MODEL.MASK_ON": True,
    "MODEL.BACKBONE.CONV_BODY": "R-50-FPN",
    "MODEL.BACKBONE.OUT_CHANNELS": 256,
    "MODEL.BACKBONE.FREEZE_CONV_BODY_AT": 2,
    "MODEL.RESNETS.STRIDE_IN_1X1": True,
    "MODEL.RESNETS.NUM_GROUPS": 1,
    "MODEL.RESNETS.WIDTH_PER_GROUP": 64,
    "MODEL.RESNETS.STEM_FUNC": "StemWithFixedBatchNorm",
    "MODEL.RESNETS.TRANS_FUNC": "BottleneckWithFixedBatchNorm",
    "MODEL.RPN.ANCHOR_SIZES": (32, 64, 128, 256, 512),
    "MODEL.RPN.ANCHOR_STRIDE": (4, 8, 16, 32, 64),
    "MODEL.RPN.ASPECT_RATIOS": (0.5, 1.0, 2.0),
    "MODEL.RPN.STRADDLE_THRESH": 0,
    "MODEL.RPN.FG_IOU_THRESHOLD": 0.7,
    "MODEL.RPN.BG_IOU_THRESHOLD": 0.3,
    "MODEL.RPN.BATCH_SIZE_PER_IMAGE": 256,
    "MODEL.RPN.POSITIVE_FRACTION": 0.5,
    "MODEL.RPN.NMS_THRESH": 0.7,
    "MODEL.RPN.MIN_SIZE": 0,
    "MODEL.RPN.PRE_NMS_TOP_N_TRAIN": 2000,
    "MODEL.RPN.POST_NMS_TOP_N_TRAIN": 2000,
    "MODEL.RPN.PRE_NMS_TOP_N_TEST": 1000,
    "MODEL.RPN.POST_NMS_TOP_N_TEST": 1000,
    "MODEL.RPN.FPN_POST_NMS_TOP_N_TEST": 1000,
    "MODEL.RPN.FPN_POST_NMS_PER_BATCH": True,
    "MODEL.ROI_HEADS.FG_IOU_THRESHOLD": 0.5,
    "MODEL.ROI_HEADS.BG_IOU_THRESHOLD": 0.5,
    "MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE": 512,
    "MODEL.ROI_HEADS.POSITIVE_FRACTION": 0.25,
    "MODEL.ROI_HEADS.BBOX_REG_WEIGHTS": (10.0, 10.0, 5.0, 5.0),
    "MODEL.ROI_HEADS.SCORE_THRESH": 0.05,
    "MODEL.ROI_HEADS.NMS": 0.5,
    "MODEL.ROI_HEADS.DETECTIONS_PER_IMG": 100,
    "MODEL.ROI_BOX_HEAD.NUM_CLASSES": 81,
    "MODEL.ROI_BOX_HEAD.MLP_HEAD_DIM": 1024,
    "MODEL.ROI_BOX_HEAD.POOLER_RESOLUTION": 7,
    "MODEL.ROI_BOX_HEAD.POOLER_SAMPLING_RATIO": 2,
    "MODEL.ROI_MASK_HEAD.CONV_LAYERS": (256, 256, 256, 256),
    "MODEL.ROI_MASK_HEAD.POOLER_RESOLUTION": 14,
    "MODEL.ROI_MASK_HEAD.POOLER_SAMPLING_RATIO": 2,
    "MODEL.ROI_MASK_HEAD.RESOLUTION": 28,
    # the quality targets (the compliance checker's eval_accuracy rule: box AP >= 0.377, mask AP >= 0.339): the
    # run stops on them and logs run_stop's status by them, so another value logs "success" the checker refuses,
    # or trains past the target and logs "aborted"
    "MLPERF.MIN_BBOX_MAP": 0.377,
    "MLPERF.MIN_SEGM_MAP": 0.339,
}


def version_tuple(version: str) -> Tuple[int, ...]:
    return tuple(int(x) for x in version.split("."))


def at_least(version: Optional[str], minimum: str) -> bool:
    return version is not None and version_tuple(version) >= version_tuple(minimum)


def meets_target(bbox, segm) -> bool:
    try:
        return float(bbox) >= TARGET_BBOX and float(segm) >= TARGET_SEGM
    except (TypeError, ValueError):
        return False


def init_limit_minutes(ruleset: Optional[str], division: Optional[str]) -> float:
    """Untimed initialisation allowed between the first init_start and init_stop."""
    if ruleset is None or not at_least(ruleset, "1.0.0"):
        return 20.0
    if division == "open" and at_least(ruleset, "2.0.0"):
        return 240.0
    return 30.0


def detect_ruleset(time_ms: Optional[float]) -> Tuple[str, str]:
    """Ruleset of the round a log was written for, from its date (``time_ms`` of run_start).

    Not from the keys it logs: the keys whose absence fails newer rulesets cannot tell which ruleset applies
    (and NVIDIA's 3.x logs still carry the 1.1.0-2.1.0 ``weights_initialization`` records).
    """
    newest = SUPPORTED_RULESETS[-1]
    if time_ms is None:
        return newest, "no timestamps; the newest ruleset"
    try:
        day = _dt.datetime.fromtimestamp(float(time_ms) / 1000.0, tz=_dt.timezone.utc).date()
    except (OverflowError, OSError, ValueError):
        return newest, "unreadable timestamps; the newest ruleset"
    for ruleset, published in ROUND_PUBLISHED:
        if day <= published:
            return ruleset, f"log dated {day.isoformat()}; {ruleset} results published {published.isoformat()}"
    return newest, f"log dated {day.isoformat()}, after the last Mask R-CNN round {newest}"


def _number(value) -> bool:
    """A finite int or float (mllog writes a float nan as NaN and inf as Infinity; a logged value may be null)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_multiple(value: float, unit: float) -> bool:
    q = value / unit
    return abs(round(q) - q) < 1e-5


# The hyperparameter table's rules that reviewers check by hand (marked "*" in training_rules.adoc: the checker's
# rule file does not check them). Decay steps: "(60000, 80000) * (1 + K / 10) * 16 / global_batch_size where K is
# integer", in the rules of v0.7 and v1.0 (the text read); NVIDIA's accepted v3.0 8-node recipe (6125, 8000 at a
# global batch of 256) does not meet it, so from 3.0.0 it is not applied. Candidates: "1000 or 1000 * batches per
# chip", and until 2.1.0 (training_policies PR #504 dropped the duplicate row) also 2000.
DECAY_STEPS_BASE = (60000, 80000)
DECAY_RULE_BEFORE = "3.0.0"
CANDIDATES_2000_BEFORE = "2.1.0"


def _nearest_k(steps, global_batch_size) -> int:
    """The integer K whose first decay step is nearest to ``steps[0]``."""
    return round((float(steps[0]) * float(global_batch_size) / (16.0 * DECAY_STEPS_BASE[0]) - 1.0) * 10.0)


def decay_steps_k(steps, global_batch_size) -> Optional[int]:
    """The integer K with ``steps`` = (60000, 80000) * (1 + K/10) * 16 / global batch, each step rounded either
    way (the RCPs' 272 record: 5294 and 7058), or None."""
    if not (isinstance(steps, (list, tuple)) and len(steps) == 2) or not global_batch_size:
        return None
    scale = 16.0 / float(global_batch_size)
    k = _nearest_k(steps, global_batch_size)
    if k <= -10:  # no decay steps at or before iteration 0
        return None
    exact = [b * (1.0 + k / 10.0) * scale for b in DECAY_STEPS_BASE]
    return k if all(abs(float(s) - e) < 1.0 for s, e in zip(steps, exact)) else None


def _candidates_rule(cand, ruleset, images_per_chip) -> Optional[str]:
    allowed = {1000.0} | ({2000.0} if not at_least(ruleset, CANDIDATES_2000_BEFORE) else set())
    if images_per_chip is None or float(cand) in allowed or float(cand) == 1000.0 * images_per_chip:
        return None
    rule = "1000" + (" or 2000" if 2000.0 in allowed else "") + " or 1000 x images per chip"
    return f"num_image_candidates {cand!r} is not {rule} ({images_per_chip} images per chip: {1000 * images_per_chip})"


def closed_rule_warnings(hparams: Dict, ruleset: Optional[str], images_per_chip: Optional[int] = None) -> List[str]:
    """Warnings where logged hyperparameters break the closed-division rules for Mask R-CNN.

    Covers what the compliance checker checks (so that the reason is explicit) and what it does not check
    (fixed image sizes, optimizer, the decay-step formula, the candidates per chip). ``images_per_chip`` (the
    recipe gate knows it): num_image_candidates is judged against it. A log does not say it, and the RCP records
    themselves log 6000 at global batches that no chip count of 6 images makes (64, 128, 256, 272), so from a log
    only the positive multiple of 1000 is judged.
    """
    out: List[str] = []
    gbs = hparams.get("global_batch_size")
    lr = hparams.get("opt_base_learning_rate")
    if _number(lr) and lr > 0:
        ok = _is_multiple(lr, 0.02)
        small_ok = at_least(ruleset, "2.0.0") and _number(gbs) and gbs < 16
        if not ok and not (small_ok and _is_multiple(0.02, lr)):
            rule = "0.02*K" + (" (or 0.02/K when the global batch is < 16)" if at_least(ruleset, "2.0.0") else "")
            out.append(f"opt_base_learning_rate {lr:g} is not {rule}")
    elif lr is not None:
        out.append(f"opt_base_learning_rate {lr!r} is not a positive number")
    decay = hparams.get("opt_learning_rate_decay_factor")
    if decay is not None and decay != 0.1:
        out.append(f"opt_learning_rate_decay_factor {decay!r} is not 0.1")
    steps = hparams.get("opt_learning_rate_decay_steps")
    if steps is not None and not (isinstance(steps, (list, tuple)) and len(steps) == 2):
        out.append(f"opt_learning_rate_decay_steps {steps!r} is not two steps")
    elif steps is not None and not all(_number(step) for step in steps):
        out.append(f"opt_learning_rate_decay_steps {list(steps)!r} is not two iteration numbers")
    elif (steps is not None and _number(gbs) and gbs > 0
          and not at_least(ruleset, DECAY_RULE_BEFORE) and decay_steps_k(steps, gbs) is None):
        k = max(-9, _nearest_k(steps, gbs))
        near = [round(b * (1 + k / 10) * 16 / gbs) for b in DECAY_STEPS_BASE]
        out.append(f"opt_learning_rate_decay_steps {list(steps)} is not (60000, 80000) x (1 + K/10) x 16 / "
                   f"global_batch_size {gbs:g} for an integer K (K={k}: {near})")
    cand = hparams.get("num_image_candidates")
    if cand is not None:
        if not _number(cand) or not _is_multiple(cand, 1000.0):
            out.append(f"num_image_candidates {cand!r} is not a multiple of 1000")
        elif cand <= 0:
            out.append(f"num_image_candidates {cand!r} is not positive")
        else:
            problem = _candidates_rule(cand, ruleset, images_per_chip)
            if problem:
                out.append(problem)
    min_size = hparams.get("min_image_size")
    if min_size is not None and min_size != 800:
        out.append(f"min_image_size {min_size!r} is not 800 (fixed in the closed division)")
    max_size = hparams.get("max_image_size")
    if max_size is not None and max_size != 1333:
        out.append(f"max_image_size {max_size!r} is not 1333 (fixed in the closed division)")
    opt = hparams.get("opt_name")
    if opt is not None and opt not in ("sgd_with_momentum", "sgd"):
        out.append(f"opt_name {opt!r} is not SGD with momentum (the reference optimizer)")
    warm = hparams.get("opt_learning_rate_warmup_steps")
    if _number(warm) and warm < 0:
        out.append(f"opt_learning_rate_warmup_steps {warm!r} is negative")
    if gbs is not None and not (_number(gbs) and gbs > 0):
        out.append(f"global_batch_size {gbs!r} is not a positive number")
    return out
