"""Review of a folder of MLPerf Mask R-CNN result logs: what the official tools say about it, explained.

The verdict is mlperf-logging's package checker's, the score its result summarizer's, both run on a staged copy
of the folder (:mod:`.official`). The review adds what they do not give: per-run facts read by its own parser
(status, time to train, epochs, AP, throughput, readable line problems), the reasons behind a failure, the
closed-division hyperparameter explanations, plots and the comparison of two folders.
"""

from __future__ import annotations

import collections
import datetime as _dt
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from . import official, rules
from .parse import find_result_files, parse_log, staged_name
from .score import ScoreResult, explain
from .summary import CONVERGED, WRONG_BENCHMARK, RunSummary, summarize


class ReviewError(Exception):
    """Bad input (missing folder, no result files, unknown ruleset): one clear line, no traceback."""


class _Verdict:
    """``label`` of a check result with ``applicable`` and ``passed`` (None: not run)."""

    @property
    def label(self) -> str:
        if not self.applicable:
            return "n/a"
        if self.passed is None:
            return "not run"
        return "PASS" if self.passed else "FAIL"


@dataclass
class RcpResult(_Verdict):
    """The package checker's RCP check, with the numbers behind it."""

    applicable: bool
    passed: Optional[bool] = None
    message: str = ""                                # the RCP checker's own message ('RCP found', ...)
    explanation: str = ""
    ruleset: Optional[str] = None
    global_batch_size: Optional[Any] = None
    submission_epochs: List[float] = field(default_factory=list)
    submission_mean_epochs: Optional[float] = None
    rcp_batch_size: Optional[Any] = None
    rcp_mean_epochs: Optional[float] = None
    min_mean_epochs: Optional[float] = None
    max_speedup: Optional[float] = None
    score_normalization: Optional[float] = None      # only when the check passes (1.0: none)
    summarizer_label: str = ""
    log: List[str] = field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        return {k: getattr(self, k) for k in (
            "applicable", "passed", "message", "explanation", "ruleset", "global_batch_size", "submission_epochs",
            "submission_mean_epochs", "rcp_batch_size", "rcp_mean_epochs", "min_mean_epochs", "max_speedup",
            "score_normalization", "summarizer_label", "log")}


@dataclass
class SeedResult(_Verdict):
    applicable: bool
    passed: Optional[bool] = None
    errors: List[str] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)
    seeds: Dict[str, List[Any]] = field(default_factory=dict)
    duplicates: List[str] = field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        return {"applicable": self.applicable, "passed": self.passed, "errors": self.errors,
                "warnings": self.warnings, "seeds": self.seeds, "duplicates": self.duplicates}


@dataclass
class Review:
    folder: Path
    runs: List[RunSummary]
    ruleset: str
    ruleset_reason: str
    division: Optional[str]
    org: Optional[str]
    platform: Optional[str]
    package: official.PackageCheck
    summarizer: official.SummarizerResult
    score: ScoreResult
    rcp: RcpResult
    seeds: SeedResult
    # run -> first error under the newest ruleset, for the runs that pass the reviewed ruleset
    newest_failures: Dict[str, str] = field(default_factory=dict)
    hparam_warnings: List[str] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)
    ignored: List[str] = field(default_factory=list)
    mlperf_logging_version: Optional[str] = None
    plot_data: Dict[str, Dict[str, tuple]] = field(default_factory=dict)
    outputs: Dict[str, str] = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        return "PASS" if self.package.passed else "FAIL"

    @property
    def newest_ruleset_checked(self) -> bool:
        return self.ruleset != official.NEWEST_RULESET

    @property
    def problems(self) -> List[str]:
        """Why the package checker rejects the folder, one line per reason it logged."""
        pkg = self.package
        out: List[str] = []
        if pkg.crash:
            out.append(f"the package checker stopped with {pkg.crash}: the official tools cannot check this folder")
        if pkg.file_count:
            found, expected = pkg.file_count
            out.append(f"{found} result files: {rules.BENCHMARK} needs exactly {expected} result_*.txt")
        if pkg.noncompliant_rejected:
            bad = [r.name for r in self.runs if r.compliance is not None and r.compliance.passed is not True]
            out.append(f"{pkg.noncompliant_rejected} result files fail the compliance checker ({', '.join(bad)}); "
                       "the package checker accepts at most one (olympic scoring)")
        if pkg.seeds_passed is False:
            first = official.trim_message(self.seeds.errors[0]) if self.seeds.errors else "see its messages"
            out.append(f"seed check failed: {first}")
        if pkg.rcp_passed is False:
            out.append(f"RCP check failed: {self.rcp.explanation or self.rcp.message}")
        out += [f"package checker: {e}" for e in pkg.other_errors]
        if pkg.passed is None and not pkg.crash:
            out.append("the package checker gave no verdict (mlperf-logging changed? see "
                       "tests/review/test_official_pins.py)")
        elif pkg.passed is False and not out:
            out.append("the package checker found errors: " + "; ".join(pkg.errors[:3]))
        return out

    def hparams_common(self) -> Dict[str, Any]:
        """Hyperparameters of the runs; a value that differs between runs is shown as a list."""
        out: Dict[str, Any] = {}
        keys = []
        for r in self.runs:
            for k in r.hparams:
                if k not in keys:
                    keys.append(k)
        for k in keys:
            distinct = []
            for v in (r.hparams.get(k) for r in self.runs if k in r.hparams):
                if v not in distinct:
                    distinct.append(v)
            out[k] = distinct[0] if len(distinct) == 1 else distinct
        return out

    def to_dict(self) -> Dict[str, Any]:
        return {
            "tool": "mlperf_review",
            "generated_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "folder": str(self.folder),
            "mlperf_logging_version": self.mlperf_logging_version,
            "benchmark": rules.BENCHMARK,
            "targets": {"BBOX": rules.TARGET_BBOX, "SEGM": rules.TARGET_SEGM},
            "ruleset": self.ruleset, "ruleset_reason": self.ruleset_reason,
            "division": self.division, "org": self.org, "platform": self.platform,
            "verdict": self.verdict, "problems": self.problems,
            "package_checker": self.package.to_dict(),
            "result_summarizer": self.summarizer.to_dict(),
            "score": self.score.to_dict(),
            "rcp": self.rcp.to_dict(),
            "seeds": self.seeds.to_dict(),
            "newest_ruleset": {"ruleset": official.NEWEST_RULESET, "checked": self.newest_ruleset_checked,
                               "failures": self.newest_failures},
            "hyperparameters": self.hparams_common(),
            "hyperparameter_warnings": self.hparam_warnings,
            "warnings": self.warnings,
            "ignored_files": self.ignored,
            "runs": [r.to_dict() for r in self.runs],
            "outputs": self.outputs,
        }


def majority(values: List[Optional[str]]) -> Optional[str]:
    """The most frequent value (ties: the newest ruleset, the last name); None where there is none."""
    vals = [v for v in values if v is not None]
    if not vals:
        return None
    counts = collections.Counter(vals)
    best = max(counts.values())
    tied = sorted(v for v, c in counts.items() if c == best)  # ties: the newest ruleset / the last name
    return tied[-1]


def _system_division(folder: Path):
    """``(path, division)`` of systems/<system>.json when ``folder`` is a submission's results/<system>/maskrcnn
    and the file names a division (what the package checker reads from it: closed runs the seed and RCP checks),
    else None; a file that is not a JSON object is a ReviewError naming it."""
    if folder.name != rules.BENCHMARK or folder.parent.parent.name != "results":
        return None
    path = folder.parent.parent.parent / "systems" / f"{folder.parent.name}.json"
    if not path.is_file():
        return None
    try:
        desc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ReviewError(f"cannot read the system description {path}: {e}") from None
    if not isinstance(desc, dict):
        raise ReviewError(f"the system description {path} is not a JSON object")
    return (path, desc["division"]) if isinstance(desc.get("division"), str) else None


def _rcp_result(pkg: official.PackageCheck, summarizer: official.SummarizerResult, runs: List[RunSummary],
                ruleset: str, division: Optional[str]) -> RcpResult:
    gbs_vals = [r.gbs for r in runs if r.gbs is not None]
    res = RcpResult(applicable=pkg.rcp_checked, ruleset=ruleset, global_batch_size=gbs_vals[0] if gbs_vals else None,
                    summarizer_label=summarizer.rcp, log=pkg.rcp_warnings[:10])
    res.submission_epochs = sorted(float(r.epochs) for r in runs
                                   if r.run_stop_status == "success" and r.epochs is not None)
    if not pkg.rcp_checked:
        if not rules.at_least(ruleset, rules.RCP_MIN_RULESET):
            res.explanation = f"reference convergence points apply from ruleset {rules.RCP_MIN_RULESET} (this is {ruleset})"
        elif division == "open":
            res.explanation = "open division: no RCP check"
        else:
            res.explanation = "the package checker did not reach its RCP check"
        return res
    res.passed, res.message = pkg.rcp_passed, pkg.rcp_message
    rec = pkg.rcp_record
    if rec:
        res.rcp_batch_size = rec.get("BS")
        res.rcp_mean_epochs = float(rec["RCP Mean"])
        res.max_speedup = float(rec["Max Speedup"])
        res.min_mean_epochs = res.rcp_mean_epochs / res.max_speedup
    res.submission_mean_epochs = pkg.rcp_submission_mean
    where = ""
    if rec:
        kind = {"RCP found": "the RCP", "RCP Interpolation": "the RCP interpolated"}.get(
            res.message.replace(" passed using rcp_bypass", ""),
            f"the RCP of the smallest batch size ({res.rcp_batch_size})")
        where = (f"{kind} for GBS {res.global_batch_size}: mean {res.rcp_mean_epochs:.2f} epochs, fastest mean "
                 f"allowed {res.min_mean_epochs:.2f} (max speedup {res.max_speedup:.3f})")
    sub = f"{res.submission_mean_epochs:.2f}" if res.submission_mean_epochs is not None else "?"
    if res.passed and res.message.endswith("passed using rcp_bypass"):
        res.score_normalization = pkg.scaling_factor if pkg.scaling_factor is not None else 1.0
        why = (f"no RCP for GBS {res.global_batch_size}" if res.message.startswith("Missing RCP") else
               f"olympic mean of the epochs to converge {sub}, faster than the RCP allows ({where or res.message})")
        res.explanation = f"{why}: passed by the rcp-bypass of package_checker_params, for the submission committee " \
                          "to review"
        return res
    if res.passed:
        res.score_normalization = pkg.scaling_factor if pkg.scaling_factor is not None else 1.0
        res.explanation = f"olympic mean of the epochs to converge {sub} >= " + (where or res.message)
        if res.score_normalization > 1.0:
            res.explanation += (f"; faster than the RCP mean, so the score is multiplied by "
                                f"{res.rcp_mean_epochs:.4g} / {sub} = {res.score_normalization:.4f}")
        return res
    msg = res.message
    if msg.startswith("Missing RCP"):
        if rec:
            res.explanation = (f"GBS {res.global_batch_size} is smaller than every RCP's and converges faster "
                               f"({sub} epochs) than {where}; an RCP for GBS {res.global_batch_size} is needed")
        else:
            res.explanation = (f"no RCP for GBS {res.global_batch_size}, which is larger than every RCP's batch "
                               f"size; an RCP for GBS {res.global_batch_size} is needed")
    elif rec:
        res.explanation = (f"converges too fast: olympic mean of the epochs to converge {sub} < {where}")
    elif msg == "Insufficient convergence":
        failed = [r.name for r in runs if r.run_stop_status != "success"]
        res.explanation = (f"{len(failed)} of {len(runs)} runs did not converge (run_stop status not 'success': "
                           f"{', '.join(failed)}); the RCP checker accepts at most one")
    elif msg == "Could not detect global_batch_size":
        values = {r.name: r.gbs for r in runs}
        benchmarks = sorted({str(r.benchmark) for r in runs})
        if any(v is None for v in values.values()):
            why = "no global_batch_size in " + ", ".join(n for n, v in values.items() if v is None)
        elif len({repr(v) for v in values.values()}) > 1:
            why = "global_batch_size differs between runs (" + ", ".join(f"{n}={v}" for n, v in values.items()) + ")"
        elif len(benchmarks) > 1:
            why = "the logs name different benchmarks (" + ", ".join(benchmarks) + ")"
        else:
            why = "the RCP checker could not read the global batch size"
        res.explanation = why
    elif msg == "Cannot find any RCPs":
        res.explanation = f"mlperf-logging has no {rules.BENCHMARK} RCPs for ruleset {ruleset}"
    else:
        res.explanation = msg or "no message"
    return res


def review_folder(folder, ruleset: Optional[str] = None, max_errors: int = 10) -> Review:
    """Stage, check and score the result files of ``folder``. Raises :class:`ReviewError` only for bad input."""
    folder = Path(folder)
    if not folder.exists():
        raise ReviewError(f"results folder not found: {folder}")
    if not folder.is_dir():
        raise ReviewError(f"not a folder: {folder}")
    if ruleset is not None and ruleset not in rules.SUPPORTED_RULESETS:
        raise ReviewError(f"ruleset {ruleset} is not supported for maskrcnn (use one of "
                          f"{', '.join(rules.SUPPORTED_RULESETS)}; maskrcnn was retired after 3.1.0)")
    if not official.available():
        raise ReviewError("mlperf-logging is not installed or incomplete (pip install mlperf-logging): the review "
                          "runs its package checker and result summarizer")
    try:
        results, left_out = find_result_files(folder)
    except OSError as exc:
        raise ReviewError(f"cannot list {folder}: {exc}") from None
    ignored = [f"{p.name}: {why}" for p, why in left_out]
    if not results:
        hint = f" (left out: {', '.join(p.name for p, _ in left_out[:5])})" if left_out else ""
        raise ReviewError(f"no result files in {folder}: the official tools read result_*.txt (or .gz){hint}")

    runs = [summarize(parse_log(p)) for p in results]
    warnings: List[str] = []
    with_events = [r for r in runs if r.n_events]
    if ruleset is not None:
        folder_ruleset, ruleset_reason = ruleset, "given with --ruleset"
    else:
        folder_ruleset = majority([r.ruleset for r in with_events]) or official.NEWEST_RULESET
        reasons = sorted({r.ruleset_reason for r in with_events if r.ruleset == folder_ruleset})
        ruleset_reason = "detected from the date: " + (reasons[0] if reasons else "no dated log, the newest") + \
            "; --ruleset overrides"
        if len({r.ruleset for r in with_events}) > 1:
            warnings.append("logs are dated for different rounds (" + ", ".join(
                f"{r.name}: {r.ruleset}" for r in with_events) + f"); all are checked against {folder_ruleset}")

    division = majority([r.division for r in runs])
    org = majority([r.org for r in runs])
    platform = majority([r.platform for r in runs])
    status = majority([r.submission_status for r in runs])
    chosen = {"division": division, "org": org, "platform": platform}
    for attr, label in (("division", "divisions"), ("org", "organizations"), ("platform", "platforms")):
        if len({repr(getattr(r, attr)) for r in runs if getattr(r, attr) is not None}) > 1:
            warnings.append(f"runs report different {label}: " + ", ".join(
                f"{r.name}={getattr(r, attr)}" for r in runs) + f"; the package is staged as {chosen[attr]}")
    described = _system_division(folder.resolve())
    if described is not None:  # a submission's results/<system>/maskrcnn: the package checker reads its system's
        path, described_division = described
        if described_division != division:
            warnings.append(f"{path} says division {described_division!r}, the logs {division!r}: the package "
                            "checker takes the system description's, and so does this review")
        division = described_division
    if division is None:
        warnings.append("no submission_division logged: staged as a closed-division submission")
    zipped = [Path(r.path).name for r in runs if str(r.path).endswith(".gz")]
    if zipped:
        warnings.append(f"gzip-compressed result files ({', '.join(zipped)}): reviewed decompressed; a submission "
                        "folder holds them as result_<n>.txt (the package checker on this folder as it is does not "
                        "count them)")
    others = [r for r in runs if r.status == WRONG_BENCHMARK]
    if others:
        warnings.append("not maskrcnn logs (the official tools still count them as result files): " + ", ".join(
            f"{r.name} ({r.benchmark})" for r in others))
    for key in rules.HPARAM_KEYS:
        vals = {repr(r.hparams[key]) for r in runs if key in r.hparams}
        if len(vals) > 1:
            warnings.append(f"runs log different {key}: " + ", ".join(
                f"{r.name}={r.hparams[key]}" for r in runs if key in r.hparams))
    for r in runs:
        # the checker only asks for the key; the rules ("You must flush the cache or restart the system prior to
        # benchmarking") ask for its truth
        if r.cache_clear and not any(v is True or str(v).lower() == "true" for v in r.cache_clear):
            warnings.append(f"{r.name}: cache_clear is {r.cache_clear[0]!r}: the rules require the cache flushed "
                            "before every run (the compliance checker only checks that the key is logged)")
        if r.resumed_from is not None:
            warnings.append(f"{r.name}: resumed from a checkpoint at iteration {r.resumed_from:g} (run_start "
                            "resumed_from_iteration), timed from the restart: not a valid result (the compliance "
                            "checker does not check this)")
        elif r.first_epoch is not None and r.first_epoch > 1:
            warnings.append(f"{r.name}: its first epoch is {r.first_epoch:g} (block_start first_epoch_num): a run "
                            "resumed from a checkpoint, timed from the restart: not a valid result (the compliance "
                            "checker does not check this)")
        if r.init_min is not None:
            limit = rules.init_limit_minutes(folder_ruleset, division)
            if r.init_min >= limit:
                warnings.append(f"{r.name}: initialization took {r.init_min:.1f} min (limit {limit:g} min)")

    hparam_warnings: List[str] = []
    if division != "open":
        grouped: Dict[str, List[str]] = collections.OrderedDict()
        for r in runs:
            for msg in rules.closed_rule_warnings(r.hparams, folder_ruleset):
                grouped.setdefault(msg, []).append(r.name)
        hparam_warnings = [f"{msg} ({', '.join(names) if len(names) < len(runs) else 'all runs'})"
                           for msg, names in grouped.items()]

    newest_failures: Dict[str, str] = {}
    installed = official.version()
    if installed != official.PINNED_VERSION:  # its verdicts are read from its messages, pinned on that release
        warnings.append(f"mlperf-logging {installed or '?'} is installed; this review reads the official tools' "
                        f"verdicts as mlperf-logging {official.PINNED_VERSION} words them (pip install "
                        f"mlperf-logging=={official.PINNED_VERSION} for a verdict this review was checked against)")
    staged = [(staged_name(Path(r.path)), Path(r.path)) for r in runs]
    # the committee's bypasses (rcp-bypass, ...) of a submission's folder: the benchmark's own, and its system's
    # when the folder is a submission's results/<system>/maskrcnn
    params = [("benchmark", folder / official.PACKAGE_CHECKER_PARAMS)]
    if folder.name == rules.BENCHMARK:
        params.append(("system", folder.parent / official.PACKAGE_CHECKER_PARAMS))
    params = [(level, p) for level, p in params if p.is_file()]
    if params:
        warnings.append("the package checker reads " + ", ".join(str(p) for _, p in params) + " (the bypasses "
                        "the review committee granted)")
    with official.stage(staged, org, platform, division, status, params=params) as pkg:
        for r in runs:
            path = pkg.files[Path(r.path).name]
            r.compliance = official.check_log(path, folder_ruleset, max_errors=max_errors, rename=pkg.rename,
                                              linenos=r.checker_linenos)
            if folder_ruleset != official.NEWEST_RULESET:
                r.newest_compliance = official.check_log(path, official.NEWEST_RULESET, max_errors=max_errors,
                                                         rename=pkg.rename, linenos=r.checker_linenos)
                # only what the newest ruleset adds: a log the reviewed ruleset rejects is reported already
                if r.newest_compliance.passed is not True and r.compliance.passed is True:
                    errs = official.first_errors(r.newest_compliance, 1)
                    newest_failures[r.name] = errs[0] if errs else "fails"
        package = official.run_package_checker(pkg, folder_ruleset)
        summarizer = official.run_result_summarizer(pkg, folder_ruleset)

    rcp = _rcp_result(package, summarizer, runs, folder_ruleset, division)
    seeds_by_run = {r.name: r.seeds for r in runs}
    seeds = SeedResult(applicable=package.seeds_checked, passed=package.seeds_passed if package.seeds_checked
                       else None, errors=package.seed_errors, warnings=package.seed_warnings, seeds=seeds_by_run)
    by_seed: Dict[str, List[str]] = {}
    for name, vals in seeds_by_run.items():
        for v in vals:
            by_seed.setdefault(repr(v), []).append(name)
    seeds.duplicates = [f"seed {s} used by {', '.join(ns)}" for s, ns in by_seed.items() if len(set(ns)) > 1]

    score = explain(runs, summarizer)
    for r in runs:
        if r.scored and r.run_stop_status != "success":
            st = "no status" if r.run_stop_status is None else f"status '{r.run_stop_status}'"
            warnings.append(f"{r.name}: run_stop has {st}, yet result_summarizer counts its time (it checks "
                            "compliance only; the RCP checker counts it as not converged)")
        if r.status == CONVERGED and r.compliance is not None and r.compliance.passed is False:
            warnings.append(f"{r.name} reached the target but the compliance checker rejects the log")
    return Review(folder=folder, runs=runs, ruleset=folder_ruleset, ruleset_reason=ruleset_reason,
                  division=division, org=org, platform=platform, package=package, summarizer=summarizer,
                  score=score, rcp=rcp, seeds=seeds, newest_failures=newest_failures,
                  hparam_warnings=hparam_warnings, warnings=warnings, ignored=ignored,
                  mlperf_logging_version=official.version())
