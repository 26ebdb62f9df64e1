"""Rendering a review: terminal table, Markdown, JSON, and the side-by-side comparison of two folders."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from maskrcnn_benchmark.utils.fileio import write_text

from . import official, rules
from .core import Review

MD_NAME = "mlperf_review.md"
JSON_NAME = "mlperf_review.json"
PNG_NAME = "mlperf_review.png"
COMPARE_MD_NAME = "mlperf_compare.md"
COMPARE_JSON_NAME = "mlperf_compare.json"


# ------------------------------------------------------------------------------------------------ helpers
def write_atomic(path: Path, text: str) -> None:
    """Write a review file atomically (the project's one writer, :func:`maskrcnn_benchmark.utils.fileio.write_text`)."""
    write_text(path, text, what="review file")


def _clean(obj):
    """JSON-safe copy: NaN/inf -> None, tuples -> lists, unknown objects -> str."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if obj is None or isinstance(obj, (str, int, bool)):
        return obj
    return str(obj)


def to_json(obj) -> str:
    return json.dumps(_clean(obj), indent=2, sort_keys=False) + "\n"


def fmt(x, digits: int = 2, empty: str = "-") -> str:
    if x is None:
        return empty
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        return f"{x:.{digits}f}" if math.isfinite(x) else empty
    return str(x)


def fmt_epoch(x) -> str:
    if x is None:
        return "-"
    return f"{x:g}"


def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]], markdown: bool = False) -> str:
    cells = [[str(c) for c in headers]] + [[str(c) for c in row] for row in rows]
    if markdown:
        esc = [[c.replace("|", "\\|") for c in row] for row in cells]
        lines = ["| " + " | ".join(esc[0]) + " |", "|" + "|".join("---" for _ in headers) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in esc[1:]]
        return "\n".join(lines)
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    out = ["  ".join(c.ljust(w) for c, w in zip(cells[0], widths)).rstrip(),
           "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells[1:]]
    return "\n".join(out)


# ------------------------------------------------------------------------------------------------ review
RUN_HEADERS = ("run", "status", "compliance", "TTT min", "init min", "epochs", "BBOX AP", "SEGM AP", "GBS",
               "img/s", "seed")


def run_rows(review: Review) -> List[List[str]]:
    rows = []
    for r in review.runs:
        comp = "-" if r.compliance is None else f"{r.compliance.label} {r.compliance.ruleset}"
        seed = ", ".join(str(s) for s in r.seeds[:2]) + ("..." if len(r.seeds) > 2 else "") if r.seeds else "-"
        status = r.status + ("" if r.scored else " *")
        rows.append([r.name, status, comp, fmt(r.ttt_min), fmt(r.init_min), fmt_epoch(r.epochs),
                     fmt(r.final_bbox, 4), fmt(r.final_segm, 4), fmt(r.gbs),
                     fmt(r.throughput_ips, 1), seed])
    return rows


def score_line(review: Review) -> str:
    s = review.score
    if s.ok:
        text = f"{s.score_min:.2f} min (result_summarizer: {s.message})"
        if review.verdict != "PASS":
            text += "; not publishable: the package checker rejects the folder"
    else:
        text = s.message
    return text


def rcp_line(review: Review) -> str:
    rcp = review.rcp
    if not rcp.applicable:
        return f"n/a ({rcp.explanation})" if rcp.explanation else "n/a"
    return f"{rcp.label} ({rcp.message}): {rcp.explanation}"


def seed_line(review: Review) -> str:
    sd = review.seeds
    if not sd.applicable:
        text = f"n/a (distinct seeds are checked from ruleset {rules.RCP_MIN_RULESET}, closed division)"
        if sd.duplicates:
            text += "; note: " + "; ".join(sd.duplicates)
        return text
    if sd.passed:
        warnings = f" ({'; '.join(sd.warnings)})" if sd.warnings else ""
        if sd.duplicates:  # the official check rejects a seed logged twice from one source line only
            return ("PASS (mlperf-logging's check: no seed logged twice from one source line)" + warnings
                    + "; note: " + "; ".join(sd.duplicates))
        return "PASS: every run logs its own seed" + warnings
    return f"{sd.label}: " + "; ".join(official.trim_message(e, 2) for e in (sd.errors[:3] or sd.duplicates[:3]))


def package_line(review: Review) -> str:
    pkg = review.package
    text = (f"{review.verdict} (mlperf-logging {review.mlperf_logging_version or '?'} package checker, ruleset "
            f"{review.ruleset}")
    text += ")" if pkg.passed is not None or pkg.crash else "; no verdict)"
    if pkg.noncompliant_accepted:
        bad = [r.name for r in review.runs if r.compliance is not None and r.compliance.passed is not True]
        text += f"; 1 file does not comply ({', '.join(bad)}), accepted under olympic scoring"
    return text


def newest_line(review: Review) -> Optional[str]:
    if not review.newest_ruleset_checked:
        return None
    newest = official.NEWEST_RULESET
    if not review.newest_failures:
        return (f"every log that passes {review.ruleset} also passes the compliance checker of the newest Mask R-CNN "
                f"ruleset, {newest}")
    first = next(iter(review.newest_failures.items()))
    return (f"{len(review.newest_failures)} of {len(review.runs)} logs pass {review.ruleset} but fail the newest "
            f"Mask R-CNN ruleset, {newest} ({first[0]}: {first[1]}); --ruleset {newest} reviews the folder under it")


def _throughput_sources(review: Review) -> str:
    sources = []
    for r in review.runs:
        if r.throughput_source and r.throughput_source not in sources:
            sources.append(r.throughput_source)
    return "; ".join(sources)


def _hparam_text(review: Review) -> str:
    hp = review.hparams_common()
    return ", ".join(f"{k}={v}" for k, v in hp.items()) if hp else "-"


def _details(review: Review, max_errors: int) -> List[tuple]:
    """(heading, lines) blocks shared by the text and Markdown renderings."""
    blocks = []
    comp = []
    for r in review.runs:
        if r.compliance is not None and r.compliance.passed is not True:
            errs = official.first_errors(r.compliance, max_errors) or ["(no message)"]
            comp += [f"{r.name}: {e}" for e in errs]
            comp += [f"{r.name}: unparsable line: {p}" for p in r.compliance.parse_errors[:2] if "^^" not in p]
    if comp:
        blocks.append(("Compliance checker errors (first of each log)", comp))
    status = []
    for r in review.runs:
        if r.scored:
            continue
        if r.status == "converged" and r.compliance is not None and r.compliance.passed is False:
            status.append(f"{r.name}: converged ({r.status_detail}) but the compliance checker rejects the log")
        elif r.status_detail:
            status.append(f"{r.name}: {r.status}: {r.status_detail}")
        else:
            status.append(f"{r.name}: the compliance checker rejects the log")
    if status:
        blocks.append(("Runs that do not count", status))
    if review.package.errors or review.package.notes:
        blocks.append(("Package checker messages", [f"ERROR: {e}" for e in review.package.errors]
                       + [f"WARNING: {n}" for n in review.package.notes]))
    issues = []
    for r in review.runs:
        for i, issue in enumerate(r.issues):
            if i >= max_errors:
                issues.append(f"{r.name}: ... {len(r.issues) - max_errors} more")
                break
            issues.append(str(issue))
    if issues:
        blocks.append(("Log line problems (file:line)", issues))
    if review.hparam_warnings:
        blocks.append(("Closed-division hyperparameter warnings", review.hparam_warnings))
    notes = [f"{r.name}: {n}" for r in review.runs for n in r.notes]
    notes += [f"{r.name}: compliance checker warning: {official.trim_message(w)}" for r in review.runs
              if r.compliance is not None for w in r.compliance.warnings]
    warns = review.warnings + review.score.warnings + notes + [f"left out {x}" for x in review.ignored]
    warns += [f"result_summarizer: {n}" for n in review.score.summarizer_notes]
    if warns:
        blocks.append(("Warnings", warns))
    return blocks


def _summary_lines(review: Review) -> List[tuple]:
    lines = [("Package checker", package_line(review)), ("Score", score_line(review)),
             ("RCP", rcp_line(review)), ("Seeds", seed_line(review))]
    newest = newest_line(review)
    if newest:
        lines.append(("Newest ruleset", newest))
    return lines


def render_text(review: Review, max_errors: int = 3) -> str:
    head = (f"MLPerf Mask R-CNN review of {review.folder}\n"
            f"  {len(review.runs)} result file(s); ruleset {review.ruleset} ({review.ruleset_reason}); division "
            f"{review.division or '?'}; org {review.org or '?'}; platform {review.platform or '?'}; "
            f"mlperf-logging {review.mlperf_logging_version or 'not installed'}")
    rows = run_rows(review)
    parts = [head, "", render_table(RUN_HEADERS, rows)]
    if any(row[1].endswith(" *") for row in rows):
        parts.append("  (* not counted by result_summarizer: the compliance checker rejects the log, or no "
                     "run_start/run_stop)")
    parts.append("")
    parts += [f"{label + ':':17s}{text}" for label, text in _summary_lines(review)]
    parts.append(f"Hyperparameters: {_hparam_text(review)}")
    src = _throughput_sources(review)
    if src:
        parts.append(f"img/s: {src}")
    for heading, lines in _details(review, max_errors):
        parts.append("")
        parts.append(heading + ":")
        parts += [f"  - {ln}" for ln in lines]
    parts.append("")
    problems = review.problems
    parts.append(f"Verdict: {review.verdict}" + (" - " + "; ".join(problems) if problems else
                                                 " - the package checker accepts the folder"))
    if review.outputs:
        parts.append("Written: " + ", ".join(review.outputs.values()))
    return "\n".join(parts)


def render_markdown(review: Review, max_errors: int = 3, png_name: Optional[str] = None) -> str:
    lines = [f"# MLPerf Mask R-CNN review: `{review.folder.name or review.folder}`", "",
             f"- folder: `{review.folder}`",
             f"- ruleset: {review.ruleset} ({review.ruleset_reason})",
             f"- division: {review.division or '?'}, org: {review.org or '?'}, platform: {review.platform or '?'}",
             f"- mlperf-logging: {review.mlperf_logging_version or 'not installed'}",
             f"- targets: BBOX AP >= {rules.TARGET_BBOX}, SEGM AP >= {rules.TARGET_SEGM}",
             f"- **verdict: {review.verdict}**" + (" - " + "; ".join(review.problems) if review.problems else ""),
             "", "## Runs", "", render_table(RUN_HEADERS, run_rows(review), markdown=True), "",
             "`*` not counted by result_summarizer. img/s: " + (_throughput_sources(review) or "not logged") + ".",
             "", "## Official checks and score", ""]
    lines += [f"- **{label}**: {text}" for label, text in _summary_lines(review)]
    lines += ["", "## Hyperparameters", ""]
    hp = review.hparams_common()
    if hp:
        lines += [render_table(("key", "value"), [[k, str(v)] for k, v in hp.items()], markdown=True)]
    else:
        lines.append("none logged")
    for heading, items in _details(review, max_errors):
        lines += ["", f"## {heading}", ""] + [f"- {x}" for x in items]
    if png_name:
        lines += ["", "## Curves", "", f"![training curves]({png_name})"]
    return "\n".join(lines) + "\n"


def write_review_outputs(review: Review, out_dir: Path, plot: bool = True, max_errors: int = 3) -> Dict[str, str]:
    """Markdown, JSON and PNG next to each other in ``out_dir`` (each written atomically)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    outputs: Dict[str, str] = {}
    png_name = None
    if plot:
        try:
            from .plots import plot_runs
        except ImportError as exc:  # pragma: no cover - matplotlib missing
            review.warnings.append(f"no PNG: matplotlib is not importable ({exc})")
        else:
            try:
                title = (f"{review.folder.name}: {review.platform or ''} "
                         f"(targets {rules.TARGET_BBOX}/{rules.TARGET_SEGM})")
                review.plot_data = plot_runs(review.runs, out_dir / PNG_NAME, title=title)
                outputs["png"] = str(out_dir / PNG_NAME)
                png_name = PNG_NAME
            except ImportError as exc:  # pragma: no cover
                review.warnings.append(f"no PNG: matplotlib is not importable ({exc})")
            except OSError:
                raise
            except Exception as exc:  # noqa: BLE001 - odd values in a log must not stop the review
                review.warnings.append(f"no PNG: plotting failed with {type(exc).__name__}: {exc}")
    outputs["markdown"] = str(out_dir / MD_NAME)
    outputs["json"] = str(out_dir / JSON_NAME)
    review.outputs = outputs
    write_atomic(out_dir / MD_NAME, render_markdown(review, max_errors, png_name))
    write_atomic(out_dir / JSON_NAME, to_json(review.to_dict()))
    return outputs


# ------------------------------------------------------------------------------------------------ compare
def _mean(xs: List[float]) -> Optional[float]:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def compare_metrics(review: Review) -> Dict[str, Any]:
    runs = review.runs
    conv = [r for r in runs if r.scored]
    epochs = sorted(r.epochs for r in conv if r.epochs is not None)
    # the RCP checker's olympic mean: a run that did not converge counts as never converging (it is the one
    # dropped as the slowest); two such runs and there is none
    never = float("inf")
    rcp_epochs = sorted(float(r.epochs) if r.run_stop_status == "success" and r.epochs is not None else never
                        for r in runs)
    middle = rcp_epochs[1:-1] if len(rcp_epochs) >= 3 else rcp_epochs
    olympic = sum(middle) / len(middle) if middle and never not in middle else None
    hp = review.hparams_common()
    ttts = [r.ttt_min for r in conv]
    return {
        "folder": str(review.folder),
        "platform": review.platform, "org": review.org, "division": review.division, "ruleset": review.ruleset,
        "runs": len(runs),
        "compliant": sum(1 for r in runs if r.compliance is not None and r.compliance.passed),
        "converged": sum(1 for r in runs if r.status == "converged"),
        "score_min": review.score.score_min,
        "raw_score_min": review.score.raw_score_min,
        "scaling_factor": review.score.scaling_factor,
        "ttt_min_fastest": min(ttts) if ttts else None,
        "ttt_min_median": statistics.median(ttts) if ttts else None,
        "ttt_min_slowest": max(ttts) if ttts else None,
        "epochs": epochs,
        "epochs_olympic_mean": olympic,
        "init_min_mean": _mean([r.init_min for r in runs]),
        "throughput_ips_mean": _mean([r.throughput_ips for r in runs]),
        "final_bbox_mean": _mean([r.final_bbox for r in conv]),
        "final_segm_mean": _mean([r.final_segm for r in conv]),
        "global_batch_size": hp.get("global_batch_size"),
        "opt_base_learning_rate": hp.get("opt_base_learning_rate"),
        "opt_learning_rate_warmup_steps": hp.get("opt_learning_rate_warmup_steps"),
        "opt_learning_rate_decay_steps": hp.get("opt_learning_rate_decay_steps"),
        "num_image_candidates": hp.get("num_image_candidates"),
        "rcp": review.rcp.label,
        "verdict": review.verdict,
    }


_COMPARE_ROWS = (
    ("platform", "platform", None), ("org", "org", None), ("division", "division", None),
    ("ruleset", "ruleset", None), ("runs", "runs", None), ("compliant", "compliant", None),
    ("converged", "converged", None), ("score (min)", "score_min", 2),
    ("score before RCP normalization (min)", "raw_score_min", 2), ("RCP normalization", "scaling_factor", 4),
    ("fastest run (min)", "ttt_min_fastest", 2), ("median run (min)", "ttt_min_median", 2),
    ("slowest run (min)", "ttt_min_slowest", 2), ("epochs to converge", "epochs", None),
    ("epochs (olympic mean)", "epochs_olympic_mean", 2), ("init time (min, mean)", "init_min_mean", 2),
    ("throughput (img/s, mean)", "throughput_ips_mean", 1), ("final BBOX AP (mean)", "final_bbox_mean", 4),
    ("final SEGM AP (mean)", "final_segm_mean", 4), ("global batch size", "global_batch_size", None),
    ("base LR", "opt_base_learning_rate", None), ("warmup steps", "opt_learning_rate_warmup_steps", None),
    ("decay steps", "opt_learning_rate_decay_steps", None), ("num_image_candidates", "num_image_candidates", None),
    ("RCP", "rcp", None), ("verdict (package checker)", "verdict", None),
)
_RATIO_KEYS = {"score_min", "raw_score_min", "ttt_min_fastest", "ttt_min_median", "ttt_min_slowest",
               "epochs_olympic_mean", "init_min_mean", "throughput_ips_mean"}


def compare_rows(a: Dict[str, Any], b: Dict[str, Any]) -> List[List[str]]:
    rows = []
    for label, key, digits in _COMPARE_ROWS:
        va, vb = a.get(key), b.get(key)
        if isinstance(va, list) and key == "epochs":
            sa, sb = ", ".join(f"{x:g}" for x in va) or "-", ", ".join(f"{x:g}" for x in vb or []) or "-"
        elif digits is not None:
            sa, sb = fmt(va, digits), fmt(vb, digits)
        else:
            sa, sb = fmt(va), fmt(vb)
        ratio = ""
        if key in _RATIO_KEYS and isinstance(va, (int, float)) and isinstance(vb, (int, float)) and va:
            ratio = f"{vb / va:.3f}"
        rows.append([label, sa, sb, ratio])
    return rows


def render_compare(a: Review, b: Review, markdown: bool = False) -> str:
    ma, mb = compare_metrics(a), compare_metrics(b)
    headers = ("", a.folder.name or str(a.folder), b.folder.name or str(b.folder), "B/A")
    table = render_table(headers, compare_rows(ma, mb), markdown=markdown)
    if markdown:
        return (f"# MLPerf Mask R-CNN comparison\n\n- A: `{a.folder}`\n- B: `{b.folder}`\n\n{table}\n")
    return f"Comparison (A = {a.folder}, B = {b.folder})\n{table}"


def write_compare_outputs(a: Review, b: Review, out_dir: Path) -> Dict[str, str]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(out_dir / COMPARE_MD_NAME, render_compare(a, b, markdown=True))
    write_atomic(out_dir / COMPARE_JSON_NAME, to_json({"a": compare_metrics(a), "b": compare_metrics(b),
                                                        "rows": compare_rows(compare_metrics(a),
                                                                             compare_metrics(b))}))
    return {"compare_markdown": str(out_dir / COMPARE_MD_NAME), "compare_json": str(out_dir / COMPARE_JSON_NAME)}
