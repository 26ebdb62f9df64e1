"""MLPerf strong-scaling score: olympic mean of the 5 runs' times to train."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from . import rules
from .summary import RunSummary


@dataclass
class ScoreResult:
    score_min: Optional[float]
    ok: bool
    message: str
    n_runs: int = 0
    n_success: int = 0
    n_failed: int = 0
    used: List[str] = field(default_factory=list)          # runs averaged
    dropped_fastest: Optional[str] = None
    dropped_slowest: Optional[str] = None                  # a failed run when there is one
    failed: List[str] = field(default_factory=list)
    times: Dict[str, float] = field(default_factory=dict)  # converged runs' times to train
    unofficial_mean_min: Optional[float] = None            # plain mean of converged runs (when no score)
    warnings: List[str] = field(default_factory=list)
    mlperf_logging_score_min: Optional[float] = None
    mlperf_logging_times: Dict[str, float] = field(default_factory=dict)
    mlperf_logging_notes: List[str] = field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        return {k: getattr(self, k) for k in (
            "score_min", "ok", "message", "n_runs", "n_success", "n_failed", "used", "dropped_fastest",
            "dropped_slowest", "failed", "times", "unofficial_mean_min", "warnings", "mlperf_logging_score_min",
            "mlperf_logging_times", "mlperf_logging_notes")}


def olympic_score(runs: Sequence[RunSummary], required: int = rules.REQUIRED_RUNS,
                  max_failed: int = rules.MAX_FAILED_RUNS) -> ScoreResult:
    """Score of the maskrcnn runs given (other benchmarks' logs must be left out by the caller).

    Drop the fastest and the slowest run and average the rest. A run that did not converge (or that the
    compliance checker rejects) counts as the slowest; more than ``max_failed`` such runs give no score.
    """
    ok_runs = sorted((r for r in runs if r.scored), key=lambda r: r.ttt_min)
    failed = [r.name for r in runs if not r.scored]
    res = ScoreResult(score_min=None, ok=False, message="", n_runs=len(runs), n_success=len(ok_runs),
                      n_failed=len(failed), failed=failed, times={r.name: r.ttt_min for r in ok_runs})
    if ok_runs:
        res.unofficial_mean_min = sum(r.ttt_min for r in ok_runs) / len(ok_runs)
    if not runs:
        res.message = "no maskrcnn runs: no score"
        return res
    if len(failed) > max_failed:
        res.message = (f"too many failed runs: {len(failed)} of {len(runs)} did not converge or are not compliant "
                       f"({', '.join(failed)}); at most {max_failed} is allowed: no score")
        return res
    if len(runs) < required:
        res.message = (f"too few runs: {len(runs)} found, {required} required for an MLPerf score; "
                       f"no olympic score (plain mean of the {len(ok_runs)} converged shown as unofficial)")
        return res
    if len(runs) > required:
        res.warnings.append(f"{len(runs)} runs found, MLPerf expects exactly {required} result files for maskrcnn; "
                            "all of them are scored")
    res.dropped_fastest = ok_runs[0].name
    if failed:
        res.dropped_slowest = failed[0]
        kept = ok_runs[1:]
    else:
        res.dropped_slowest = ok_runs[-1].name
        kept = ok_runs[1:-1]
    res.used = [r.name for r in kept]
    res.score_min = sum(r.ttt_min for r in kept) / len(kept)
    res.ok = True
    res.message = (f"olympic mean of {len(kept)} runs (dropped fastest {res.dropped_fastest}, slowest "
                   f"{res.dropped_slowest}{' (failed)' if failed else ''})")
    return res
