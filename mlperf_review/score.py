"""The score, as mlperf_logging's result_summarizer publishes it, and which runs make it up.

The number is the summarizer's (olympic mean of the times to train, multiplied by the RCP scaling factor the
package checker wrote). The summarizer does not say which runs it averaged; :func:`explain` works that out
from the per-run compliance verdicts and times to train, with the summarizer's own rules
(:func:`.official.olympic`), and checks that it arrives at the same number.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from . import official
from .summary import RunSummary

SCORE_TOLERANCE_MIN = 1e-6  # explanation and summarizer compute the same float sums


@dataclass
class ScoreResult:
    score_min: Optional[float]                    # result_summarizer's score (normalized), None: no score
    ok: bool
    message: str
    raw_score_min: Optional[float] = None         # before the RCP scaling factor
    scaling_factor: Optional[float] = None        # from scaling.json (1.0: none)
    n_runs: int = 0
    n_counted: int = 0
    used: List[str] = field(default_factory=list)           # runs averaged
    dropped_fastest: Optional[str] = None
    dropped_slowest: Optional[str] = None
    not_counted: List[str] = field(default_factory=list)    # dropped by the summarizer (not compliant, no times)
    times: Dict[str, float] = field(default_factory=dict)   # counted runs' times to train
    warnings: List[str] = field(default_factory=list)
    summarizer_notes: List[str] = field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        return {k: getattr(self, k) for k in (
            "score_min", "ok", "message", "raw_score_min", "scaling_factor", "n_runs", "n_counted", "used",
            "dropped_fastest", "dropped_slowest", "not_counted", "times", "warnings", "summarizer_notes")}


def explain(runs: Sequence[RunSummary], summary: official.SummarizerResult) -> ScoreResult:
    counted = sorted((r for r in runs if r.scored), key=lambda r: r.ttt_min)
    dropped = [r.name for r in runs if not r.scored]
    factor = summary.scaling_factor if summary.scaling_factor is not None else 1.0
    res = ScoreResult(score_min=summary.score_min, ok=summary.score_min is not None, message="",
                      scaling_factor=factor, n_runs=len(runs), n_counted=len(counted), not_counted=dropped,
                      times={r.name: r.ttt_min for r in counted}, summarizer_notes=list(summary.notes))
    if summary.crash:
        res.message = f"result_summarizer stopped: {summary.crash}"
        return res
    mine = official.olympic([r.ttt_min for r in counted], len(dropped))
    if res.score_min is None:
        if len(dropped) > 1:
            res.message = (f"no score: {len(dropped)} runs do not count ({', '.join(dropped)}); result_summarizer "
                           "drops at most one (it counts as the slowest)")
        else:
            res.message = "no score: result_summarizer has too few runs to average"
        if mine is not None:
            res.warnings.append(f"the review would average {mine:.2f} min where result_summarizer gives no score")
        return res
    res.raw_score_min = res.score_min / factor
    if mine is None or abs(mine * factor - res.score_min) > SCORE_TOLERANCE_MIN:
        res.warnings.append("the runs the review takes as averaged do not reproduce result_summarizer's score "
                            f"({'-' if mine is None else f'{mine * factor:.4f}'} vs {res.score_min:.4f} min)")
    else:
        keep_top = len(counted) - (1 - len(dropped))
        kept = counted[1:keep_top]
        res.used = [r.name for r in kept]
        res.dropped_fastest = counted[0].name if counted else None
        res.dropped_slowest = dropped[0] if dropped else counted[-1].name
    parts = [f"olympic mean of {len(res.used)} runs" if res.used else "olympic mean"]
    if res.dropped_fastest:
        parts.append(f"dropped fastest {res.dropped_fastest}, slowest {res.dropped_slowest}"
                     + (" (does not count)" if dropped else ""))
    if factor != 1.0:
        parts.append(f"x{factor:.4f} RCP normalization of {res.raw_score_min:.2f} min")
    res.message = "; ".join(parts)
    return res
