"""Is a training recipe acceptable, before the runs are spent? (``tools/check_recipe.py``)

Three questions, the first two answered with mlperf-logging's own files and code (through :mod:`.official`):

* **Would the compliance checker accept the hyperparameters?** The ``:::MLLOG`` lines that the run will log
  (given by the caller) go through the checker's own parser and its rule file of the ruleset and division
  (``compliance_checker/training_<ruleset>/<division>_maskrcnn.yaml``, the ``CHECK`` expressions evaluated by
  ``ComplianceChecker.configured_checks``). A failed check is a refusal.
* **Can the RCP checker judge the global batch?** (closed division, rulesets from 1.0.0) The RCP file of the
  ruleset (``rcp_checker/training_<ruleset>/rcps_maskrcnn.json``), searched with the RCP checker's own lookup: an
  RCP at the batch, or two around it to interpolate. A batch above the largest RCP is refused (the checker
  reports "Missing RCP"); below the smallest it is a warning, since the checker then passes runs that converge
  more slowly than that RCP. A recipe that differs from the RCP at its batch is a warning naming the RCP's
  values: it converges at your own risk.

* **Does it keep the closed division's fixed parts that the checker's rule file leaves out?** Image sizes 800/1333
  (the file only checks ``>= 0``), the optimizer: :func:`.rules.closed_rule_warnings`, refused; and, given the
  config's values (``config``), the reference's model and recipe where no log records them
  (:data:`.rules.CLOSED_FIXED_CONFIG`: momentum, weight decay, bias LR, clipping, every image size, flip, the
  model, the quality targets), refused by key.

A warning, in any division: an ``mlperf_linear`` warmup whose ramp starts below zero (``BASE_LR - WARMUP_ITERS x
WARMUP_FACTOR < 0``: the first iterations step against the gradient).

``allow_non_rcp`` turns refusals into warnings: such a recipe is allowed for a research run, never a closed
submission, and the verdict says so.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from . import official
from .rules import CLOSED_FIXED_CONFIG, RCP_MIN_RULESET, at_least, closed_rule_warnings

# RCP "Hyperparams" names -> the mllog keys the run logs. num_image_candidates is not compared: in the v0.7
# semantics the package logs it is 1000 x images per GPU, and the RCPs record the reference's layout (6000).
RCP_KEYS = {
    "opt_base_learning_rate": "opt_base_learning_rate",
    "opt_learning_rate_warmup_steps": "opt_learning_rate_warmup_steps",
    "opt_learning_rate_warmup_factor": "opt_learning_rate_warmup_factor",
    "opt_learning_decay_steps": "opt_learning_rate_decay_steps",
}


@dataclass
class RecipeVerdict:
    ruleset: str
    division: str
    hparams: Dict[str, object]
    refusals: List[str] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)
    rcp: Optional[str] = None  # the RCP record used, or "interpolated between A and B"
    allowed: List[str] = field(default_factory=list)  # refusals that --allow-non-rcp turned into warnings

    @property
    def ok(self) -> bool:
        return not self.refusals


def hparams_from_log(text: str) -> Dict[str, object]:
    import json

    out = {}
    for line in text.splitlines():
        if ":::MLLOG" in line:
            record = json.loads(line.split(":::MLLOG", 1)[1])
            out[record["key"]] = record["value"]
    return out


def compliance_refusals(log_text: str, ruleset: str, division: str = "closed") -> List[str]:
    """The checker's failed ``CHECK``s on these log lines, one line each: ``KEY VALUE: failed test: EXPR``. Keys
    the lines do not hold (run_start, eval_accuracy, ...) are not judged."""
    rule_file = os.path.basename(official.recipe_rule_file(ruleset, division))
    out = []
    for key, value, message in official.failed_checks(log_text, ruleset, division):
        if value is None or "Required" in message:
            continue  # an occurrence rule about keys this excerpt of a log does not hold
        test = re.search(r"failed test: (.*)", message) or re.search(r"Failed executing CHECK code:\n(.*)", message)
        rule = test.group(1).strip() if test else message.splitlines()[0]
        out.append(f"{key} {value!r}: failed test `{rule}` of {rule_file} (mlperf-logging, training {ruleset})")
    return out


def closed_rule_refusals(hparams: Dict[str, object], ruleset: str, already: List[str],
                         images_per_chip: Optional[int] = None) -> List[str]:
    """The closed-division invariants the review knows (:func:`.rules.closed_rule_warnings`: image sizes 800/1333,
    optimizer, the decay-step formula, candidates per chip, ...) that the compliance checker's rule file does not
    check, each once."""
    judged = {r.split(" ", 1)[0] for r in already}
    return [f"{w} (MLPerf closed rules, training {ruleset})"
            for w in closed_rule_warnings(hparams, ruleset, images_per_chip)
            if w.split(" ", 1)[0] not in judged]


def rcp_check(hparams: Dict[str, object], ruleset: str):
    """``(refusals, warnings, rcp description)`` of the global batch against the ruleset's RCPs."""
    table = official.rcp_table(ruleset)
    bs = hparams.get("global_batch_size")
    batches = table.batches()
    found = table.at(bs)  # the reference's recipe at this batch
    # how the package checker judges the runs' convergence: against the pruned RCPs (an RCP of the full table
    # may be interpolated there)
    judged = None if table.at(bs, judged=True) else table.around(bs)
    judged_as = None if judged is None or None in judged else \
        f"interpolated between {judged[0]['BS']} and {judged[1]['BS']}"
    if found is None:
        low, high = judged
        if low is not None and high is not None:
            return [], [f"global_batch_size {bs} has no RCP of its own (training {ruleset}: {batches}): the "
                        f"package checker interpolates between the RCPs {low['BS']} and {high['BS']}; no RCP "
                        "recipe to compare with, it converges at your own risk"], judged_as
        if low is None and high is not None:  # the checker compares with the smallest RCP (its own rule)
            smallest = table.smallest()
            floor = smallest["RCP Mean"] / smallest["Max Speedup"]
            return [], [f"global_batch_size {bs} is below the smallest RCP of training {ruleset} "
                        f"({smallest['BS']}): the package checker passes it only if the runs' olympic mean is at "
                        f"least {floor:.2f} epochs (that RCP's mean {smallest['RCP Mean']:.2f} over its max "
                        f"speedup {smallest['Max Speedup']:.3f})"], f"below {smallest['BS']}"
        return [f"global_batch_size {bs} is outside the RCPs of training {ruleset} ({batches[0]}..{batches[-1]}): "
                "the RCP checker cannot interpolate it and reports a missing RCP (rcps_maskrcnn.json)"], [], None
    name, record = found
    diffs = []
    for rcp_key, key in RCP_KEYS.items():
        want, got = record["Hyperparams"].get(rcp_key), hparams.get(key)
        if want is not None and got is not None and not _same(want, got):
            diffs.append(f"{key} {got!r} (RCP {want!r})")
    warnings = []
    if diffs:
        warnings.append(f"the recipe differs from RCP {name} at global_batch_size {bs}: " + ", ".join(diffs)
                        + "; it converges at your own risk")
    # the recipe is this RCP's; the runs' convergence is judged by interpolation (the pruned RCPs)
    return [], warnings, f"{name}; the package checker's judgement: {judged_as}" if judged_as else name


def _same(want, got):
    if isinstance(want, (list, tuple)):
        return isinstance(got, (list, tuple)) and len(want) == len(got) and all(_same(a, b) for a, b in zip(want, got))
    try:
        return abs(float(want) - float(got)) <= 1e-12 * max(1.0, abs(float(want)))
    except (TypeError, ValueError):
        return want == got


# config keys whose (first) value the log records: refused under the logged key already, not twice
_LOGGED_AS = {"INPUT.MIN_SIZE_TRAIN": "min_image_size", "INPUT.MAX_SIZE_TRAIN": "max_image_size"}


def fixed_config_refusals(config: Dict[str, object], already: List[str] = ()) -> List[str]:
    """One line per key of :data:`.rules.CLOSED_FIXED_CONFIG` whose value in ``config`` (config key -> value) is
    not the reference's (but for a value refused already under the key the log records it as)."""
    judged = {r.split(" ", 1)[0] for r in already}
    return [f"{key} {_show(config[key])}: not the reference's {_show(want)} (a fixed part of the closed division's "
            "model and recipe, which no log records)"
            for key, want in CLOSED_FIXED_CONFIG.items()
            if key in config and not _same(want, config[key]) and _LOGGED_AS.get(key) not in judged]


def _show(value):
    return str(tuple(value)) if isinstance(value, (list, tuple)) else repr(value)


def negative_warmup(hparams: Dict[str, object]) -> Optional[str]:
    """mlperf_linear's first LR, ``base - steps x factor``, when it is below zero (else None)."""
    try:
        base, steps, factor = (float(hparams[k]) for k in ("opt_base_learning_rate", "opt_learning_rate_warmup_steps",
                                                         "opt_learning_rate_warmup_factor"))
    except (KeyError, TypeError, ValueError):
        return None
    first = base - steps * factor
    if first >= -1e-9 * abs(base):
        return None
    return (f"the mlperf_linear warmup starts at a negative learning rate: opt_base_learning_rate {base:g} - "
            f"opt_learning_rate_warmup_steps {steps:g} x opt_learning_rate_warmup_factor {factor:g} = {first:.4g} "
            f"(the weights step against the gradient until iteration {steps - base / factor:.0f}); "
            "a factor of at most base / steps starts it at zero")


def check_recipe(log_text: str, ruleset: str = "3.1.0", division: str = "closed",
                 allow_non_rcp: bool = False, images_per_chip: Optional[int] = None,
                 config: Optional[Dict[str, object]] = None) -> RecipeVerdict:
    """The verdict on the hyperparameter lines a run would log (``log_text``); ``images_per_chip``: the run's
    images per GPU, when known (num_image_candidates is then judged exactly); ``config``: the config's values
    (config key -> value) of :data:`.rules.CLOSED_FIXED_CONFIG` and SOLVER.WARMUP_METHOD, when known (the log does
    not hold them)."""
    config = config or {}
    hparams = hparams_from_log(log_text)
    verdict = RecipeVerdict(ruleset, division, hparams)
    verdict.refusals += compliance_refusals(log_text, ruleset, division)
    if division == "closed":
        verdict.refusals += closed_rule_refusals(hparams, ruleset, verdict.refusals, images_per_chip)
        verdict.refusals += fixed_config_refusals(config, verdict.refusals)
    warmup_method = config.get("SOLVER.WARMUP_METHOD")
    if warmup_method in (None, "mlperf_linear"):
        negative = negative_warmup(hparams)
        if negative:
            verdict.warnings.append(negative)
    if division == "closed" and warmup_method not in (None, "mlperf_linear"):
        verdict.refusals.append(
            f"SOLVER.WARMUP_METHOD {warmup_method!r}: the logged opt_learning_rate_warmup_factor and _steps are "
            "mlperf_linear's ramp (the RCPs' warmup; NVIDIA's configs set SOLVER.WARMUP_METHOD mlperf_linear), so "
            "the run would train otherwise than its log says")
    if division == "closed" and at_least(ruleset, RCP_MIN_RULESET):
        refusals, warnings, verdict.rcp = rcp_check(hparams, ruleset)
        verdict.refusals += refusals
        verdict.warnings += warnings
    if allow_non_rcp and verdict.refusals:
        verdict.warnings += [f"not an RCP recipe, allowed for a research run, not a closed submission: {r}"
                             for r in verdict.refusals]
        verdict.allowed = list(verdict.refusals)
        verdict.refusals = []
    return verdict
