"""MLPerf Training facts for Mask R-CNN used by the review (targets, run counts, rulesets, closed-division rules)."""

from __future__ import annotations

import datetime as _dt
from typing import Dict, Iterable, List, Optional, Tuple

BENCHMARK = "maskrcnn"
TARGET_BBOX = 0.377
TARGET_SEGM = 0.339
REQUIRED_RUNS = 5          # result files per maskrcnn submission
MAX_FAILED_RUNS = 1        # at most one run may fail to converge; it counts as the slowest
SUPPORTED_RULESETS = ("0.7.0", "1.0.0", "1.1.0", "2.0.0", "2.1.0", "3.0.0", "3.1.0")
RCP_MIN_RULESET = "1.0.0"  # reference convergence points and seed checks start with v1.0

# First day from which a log is taken to belong to a round (used only to break ties in ruleset detection).
_ROUND_START = {
    "0.7.0": _dt.date(2020, 1, 1),
    "1.0.0": _dt.date(2020, 9, 1),
    "1.1.0": _dt.date(2021, 7, 1),
    "2.0.0": _dt.date(2022, 1, 1),
    "2.1.0": _dt.date(2022, 7, 1),
    "3.0.0": _dt.date(2023, 1, 1),
    "3.1.0": _dt.date(2023, 7, 1),
}

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


def detect_ruleset(keys: Iterable[str], time_ms: Optional[float]) -> Tuple[str, str]:
    """Ruleset a log was written for, from the keys it logs (the date of the log breaks ties).

    0.7.0 logs have no ``gradient_accumulation_steps``; 1.0.0+ closed logs have it; 1.1.0-2.1.0 logs also carry
    the 21 ``weights_initialization`` records.
    """
    keys = set(keys)
    if "weights_initialization" in keys:
        candidates = ["1.1.0", "2.0.0", "2.1.0"]
        why = "'weights_initialization' logged (rulesets 1.1.0-2.1.0)"
    elif "gradient_accumulation_steps" in keys:
        candidates = ["1.0.0", "3.0.0", "3.1.0"]
        why = "'gradient_accumulation_steps' logged without 'weights_initialization' (1.0.0 or 3.x)"
    else:
        return "0.7.0", "no 'gradient_accumulation_steps' (logged from 1.0.0 on)"
    if time_ms is None:
        return candidates[-1], why + "; no timestamps, newest chosen"
    try:
        day = _dt.datetime.fromtimestamp(float(time_ms) / 1000.0, tz=_dt.timezone.utc).date()
    except (OverflowError, OSError, ValueError):
        return candidates[-1], why + "; bad timestamps, newest chosen"
    chosen = candidates[0]
    for cand in candidates:
        if _ROUND_START[cand] <= day:
            chosen = cand
    return chosen, why + f"; log dated {day.isoformat()}"


def _is_multiple(value: float, unit: float) -> bool:
    q = value / unit
    return abs(round(q) - q) < 1e-5


def closed_rule_warnings(hparams: Dict, ruleset: Optional[str]) -> List[str]:
    """Warnings where logged hyperparameters break the closed-division rules for Mask R-CNN.

    Covers what the compliance checker checks (so that the reason is explicit) and what it does not check
    (fixed image sizes, optimizer).
    """
    out: List[str] = []
    gbs = hparams.get("global_batch_size")
    lr = hparams.get("opt_base_learning_rate")
    if isinstance(lr, (int, float)) and not isinstance(lr, bool) and lr > 0:
        ok = _is_multiple(lr, 0.02)
        small_ok = at_least(ruleset, "2.0.0") and isinstance(gbs, (int, float)) and gbs < 16
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
    cand = hparams.get("num_image_candidates")
    if cand is not None:
        if not isinstance(cand, (int, float)) or isinstance(cand, bool) or not _is_multiple(cand, 1000.0):
            out.append(f"num_image_candidates {cand!r} is not a multiple of 1000")
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
    if isinstance(warm, (int, float)) and warm < 0:
        out.append(f"opt_learning_rate_warmup_steps {warm!r} is negative")
    if isinstance(gbs, (int, float)) and not isinstance(gbs, bool) and gbs <= 0:
        out.append(f"global_batch_size {gbs!r} is not positive")
    return out
