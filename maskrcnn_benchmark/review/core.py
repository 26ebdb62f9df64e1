"""Review of a folder of MLPerf Mask R-CNN result logs (what a reviewer would say about it)."""

from __future__ import annotations

import collections
import datetime as _dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from . import checks, rules
from .parse import find_logs, is_result_file, parse_log
from .score import ScoreResult, olympic_score
from .summary import CONVERGED, WRONG_BENCHMARK, RunSummary, summarize

SCORE_TOLERANCE_MIN = 0.01


class ReviewError(Exception):
    """Bad input (missing folder, no logs, unknown ruleset): one clear line, no traceback."""


@dataclass
class Review:
    folder: Path
    runs: List[RunSummary]
    ruleset: Optional[str]
    ruleset_reason: str
    division: Optional[str]
    org: Optional[str]
    platform: Optional[str]
    score: ScoreResult
    rcp: checks.RcpResult
    seeds: checks.SeedResult
    hparam_warnings: List[str] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)
    ignored: List[str] = field(default_factory=list)
    mlperf_logging_version: Optional[str] = None
    plot_data: Dict[str, Dict[str, tuple]] = field(default_factory=dict)
    outputs: Dict[str, str] = field(default_factory=dict)

    @property
    def scored_runs(self) -> List[RunSummary]:
        """The runs that make up the submission (all but other benchmarks' logs)."""
        return [r for r in self.runs if r.status != WRONG_BENCHMARK]

    @property
    def problems(self) -> List[str]:
        out = []
        for r in self.scored_runs:
            if r.compliance is not None and r.compliance.passed is False:
                out.append(f"{r.name} is not compliant ({r.compliance.ruleset})")
            elif r.compliance is not None and r.compliance.passed is None:
                out.append(f"{r.name}: compliance not checked ({r.compliance.note})")
        if not self.score.ok:
            out.append(self.score.message)
        if self.rcp.applicable and self.rcp.passed is not True:
            out.append(f"RCP check: {self.rcp.message or 'not run'}")
        if self.seeds.applicable and self.seeds.passed is not True:
            out.append("seed check failed")
        return out

    @property
    def verdict(self) -> str:
        return "PASS" if not self.problems else "FAIL"

    def hparams_common(self) -> Dict[str, Any]:
        """Hyperparameters of the maskrcnn runs; a value that differs between runs is shown as a list."""
        out: Dict[str, Any] = {}
        keys = []
        for r in self.scored_runs:
            for k in r.hparams:
                if k not in keys:
                    keys.append(k)
        for k in keys:
            vals = [r.hparams.get(k) for r in self.scored_runs if k in r.hparams]
            distinct = []
            for v in vals:
                if v not in distinct:
                    distinct.append(v)
            out[k] = distinct[0] if len(distinct) == 1 else distinct
        return out

    def to_dict(self) -> Dict[str, Any]:
        return {
            "tool": "maskrcnn_benchmark.review",
            "generated_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "folder": str(self.folder),
            "mlperf_logging_version": self.mlperf_logging_version,
            "benchmark": rules.BENCHMARK,
            "targets": {"BBOX": rules.TARGET_BBOX, "SEGM": rules.TARGET_SEGM},
            "ruleset": self.ruleset, "ruleset_reason": self.ruleset_reason,
            "division": self.division, "org": self.org, "platform": self.platform,
            "verdict": self.verdict, "problems": self.problems,
            "score": self.score.to_dict(),
            "rcp": self.rcp.to_dict(),
            "seeds": self.seeds.to_dict(),
            "hyperparameters": self.hparams_common(),
            "hyperparameter_warnings": self.hparam_warnings,
            "warnings": self.warnings,
            "ignored_files": self.ignored,
            "runs": [r.to_dict() for r in self.runs],
            "outputs": self.outputs,
        }


def _majority(values: List[Optional[str]]) -> Optional[str]:
    vals = [v for v in values if v is not None]
    if not vals:
        return None
    counts = collections.Counter(vals)
    best = max(counts.values())
    # ties: the newest ruleset / the alphabetically first other value
    tied = sorted(v for v, c in counts.items() if c == best)
    return tied[-1]


def review_folder(folder, ruleset: Optional[str] = None, run_checkers: bool = True,
                  max_errors: int = 10) -> Review:
    """Parse, check and score every log of ``folder``. Raises :class:`ReviewError` only for bad input."""
    folder = Path(folder)
    if not folder.exists():
        raise ReviewError(f"results folder not found: {folder}")
    if not folder.is_dir():
        raise ReviewError(f"not a folder: {folder}")
    if ruleset is not None and ruleset not in rules.SUPPORTED_RULESETS:
        raise ReviewError(f"ruleset {ruleset} is not supported for maskrcnn (use one of "
                          f"{', '.join(rules.SUPPORTED_RULESETS)}; maskrcnn was retired after 3.1.0)")
    try:
        files = find_logs(folder)
    except OSError as exc:
        raise ReviewError(f"cannot list {folder}: {exc}") from None
    if not files:
        raise ReviewError(f"no result logs in {folder} (expected result_*.txt or *.log, optionally .gz)")

    runs: List[RunSummary] = []
    ignored: List[str] = []
    for path in files:
        log = parse_log(path)
        if not log.events and not is_result_file(path) and not any(i.kind == "unreadable" for i in log.issues):
            ignored.append(f"{path.name}: no ':::MLLOG' lines")
            continue
        runs.append(summarize(log))
    if not runs:
        raise ReviewError(f"no MLPerf logs in {folder}: none of {len(files)} file(s) has ':::MLLOG' lines")
    names = collections.Counter(r.name for r in runs)
    for r in runs:  # result_0.txt next to result_0.txt.gz: keep the names apart
        if names[r.name] > 1:
            r.name = Path(r.path).name

    warnings: List[str] = []
    if ruleset is not None:
        for r in runs:
            r.ruleset, r.ruleset_reason = ruleset, "given with --ruleset"
        folder_ruleset, ruleset_reason = ruleset, "given with --ruleset"
    else:
        population = [r for r in runs if r.status != WRONG_BENCHMARK and r.n_events] or runs
        folder_ruleset = _majority([r.ruleset for r in population]) or "0.7.0"
        reasons = {r.ruleset_reason for r in population if r.ruleset == folder_ruleset}
        ruleset_reason = "detected: " + (sorted(reasons)[0] if reasons else "default")
        for r in runs:
            if r.ruleset is None:
                r.ruleset, r.ruleset_reason = folder_ruleset, "no MLLOG lines; folder ruleset used"
        distinct = sorted({r.ruleset for r in population})
        if len(distinct) > 1:
            warnings.append("logs look written for different rulesets (" + ", ".join(
                f"{r.name}: {r.ruleset}" for r in population) + f"); folder-level checks use {folder_ruleset}")

    scoring = [r for r in runs if r.status != WRONG_BENCHMARK]
    others = [r for r in runs if r.status == WRONG_BENCHMARK]
    if others:
        warnings.append("not maskrcnn, left out of the score: " + ", ".join(
            f"{r.name} ({r.benchmark})" for r in others))

    division = _majority([r.division for r in scoring])
    org = _majority([r.org for r in scoring])
    platform = _majority([r.platform for r in scoring])
    for attr, label in (("division", "divisions"), ("org", "organizations"), ("platform", "platforms")):
        vals = {repr(getattr(r, attr)) for r in scoring if getattr(r, attr) is not None}
        if len(vals) > 1:
            warnings.append(f"runs report different {label}: " + ", ".join(
                f"{r.name}={getattr(r, attr)}" for r in scoring))
    for key in rules.HPARAM_KEYS:
        vals = {repr(r.hparams[key]) for r in scoring if key in r.hparams}
        if len(vals) > 1:
            warnings.append(f"runs log different {key}: " + ", ".join(
                f"{r.name}={r.hparams[key]}" for r in scoring if key in r.hparams))

    for r in scoring:
        if r.init_min is not None and r.status != WRONG_BENCHMARK:
            limit = rules.init_limit_minutes(r.ruleset, r.division)
            if r.init_min >= limit:
                warnings.append(f"{r.name}: initialization took {r.init_min:.1f} min (limit {limit:g} min)")

    hparam_warnings: List[str] = []
    if division != "open":
        grouped: Dict[str, List[str]] = collections.OrderedDict()
        for r in scoring:
            for msg in rules.closed_rule_warnings(r.hparams, r.ruleset):
                grouped.setdefault(msg, []).append(r.name)
        hparam_warnings = [f"{msg} ({', '.join(names) if len(names) < len(scoring) else 'all runs'})"
                           for msg, names in grouped.items()]

    rcp_applicable = rules.at_least(folder_ruleset, rules.RCP_MIN_RULESET) and division != "open"
    rcp = checks.RcpResult(applicable=rcp_applicable, ruleset=folder_ruleset)
    if not rules.at_least(folder_ruleset, rules.RCP_MIN_RULESET):
        rcp.message = (f"reference convergence points apply from ruleset {rules.RCP_MIN_RULESET} "
                       f"(this is {folder_ruleset})")
    elif division == "open":
        rcp.message = "open division: no RCP check"
    seeds_by_run = {r.name: r.seeds for r in scoring}
    seeds = checks.SeedResult(applicable=rcp_applicable, seeds=seeds_by_run)

    version = checks.mlperf_logging_version()
    if run_checkers and not checks.mlperf_logging_available():
        warnings.append("mlperf-logging is not installed: compliance, RCP, seed and official-score checks skipped "
                        "(pip install mlperf-logging)")
        run_checkers = False
        for r in runs:
            r.compliance = None
    if run_checkers:
        staged = [(r.name, Path(r.path), r.status != WRONG_BENCHMARK) for r in runs]
        with checks.staged_logs(staged) as stage:
            for r in runs:
                rename = (lambda s, st=stage: st.rename_paths(s))
                r.compliance = checks.run_compliance(stage.plain[r.name], r.ruleset, max_errors=max_errors,
                                                     rename=rename, linenos=r.checker_linenos)
            if scoring:
                ml = checks.mlperf_logging_score(stage, folder_ruleset)
            if rcp_applicable and scoring:
                gbs_vals = [r.gbs for r in scoring if r.gbs is not None]
                gbs = gbs_vals[0] if gbs_vals else None
                epochs = [r.epochs for r in scoring if r.status == CONVERGED]
                rcp = checks.run_rcp(stage, folder_ruleset, epochs, gbs)
            seeds = checks.run_seed_check(stage, [r.name for r in scoring], folder_ruleset, rcp_applicable,
                                          seeds_by_run)
    # the score counts compliance, so it comes after the checkers
    score = olympic_score(scoring)
    if run_checkers and scoring:
        score.mlperf_logging_score_min, score.mlperf_logging_times, score.mlperf_logging_notes = ml
        if score.score_min is not None and ml[0] is not None and abs(score.score_min - ml[0]) > SCORE_TOLERANCE_MIN:
            warnings.append(f"our score {score.score_min:.2f} min differs from mlperf_logging's {ml[0]:.2f} min "
                            "(mlperf_logging scores every compliant run, even one whose run_stop is not 'success')")
        elif score.score_min is None and ml[0] is not None:
            warnings.append(f"mlperf_logging computes {ml[0]:.2f} min although this review gives no score: "
                            + score.message)
    if not run_checkers and rcp_applicable:
        rcp.message = "not run"
    return Review(folder=folder, runs=runs, ruleset=folder_ruleset, ruleset_reason=ruleset_reason,
                  division=division, org=org, platform=platform, score=score, rcp=rcp, seeds=seeds,
                  hparam_warnings=hparam_warnings, warnings=warnings, ignored=ignored,
                  mlperf_logging_version=version)
