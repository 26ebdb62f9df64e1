"""Calls into mlperf_logging: compliance checker, RCP checker, seed checker and its scoring functions.

Nothing here re-implements those tools. mlperf_logging reports through the root logger, ``print`` and
``warnings``; every call is wrapped so that this output is captured (and returned as messages) instead of
reaching the terminal, and so that an exception inside the tool becomes a reported failure, never a traceback.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import logging
import re
import shutil
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import rules
from .summary import ComplianceResult


def mlperf_logging_version() -> Optional[str]:
    try:
        from importlib.metadata import version
        return version("mlperf-logging")
    except Exception:  # noqa: BLE001 - not installed or odd metadata
        return None


def mlperf_logging_available() -> bool:
    try:
        import mlperf_logging.compliance_checker.mlp_compliance  # noqa: F401
        return True
    except Exception:  # noqa: BLE001
        return False


class _ListHandler(logging.Handler):
    def __init__(self):
        super().__init__(level=logging.DEBUG)
        self.messages: List[Tuple[int, str]] = []

    def emit(self, record):
        try:
            self.messages.append((record.levelno, record.getMessage()))
        except Exception:  # noqa: BLE001
            pass


@contextlib.contextmanager
def captured_output():
    """Capture root-logger records, stdout prints and warnings of mlperf_logging code."""
    root = logging.getLogger()
    handler = _ListHandler()
    old_handlers, old_level = root.handlers[:], root.level
    root.handlers = [handler]
    root.setLevel(logging.INFO)
    buf = io.StringIO()
    try:
        with warnings.catch_warnings(record=True) as warned, contextlib.redirect_stdout(buf):
            warnings.simplefilter("always")
            yield handler.messages, buf, warned
    finally:
        root.handlers = old_handlers
        root.setLevel(old_level)


# ------------------------------------------------------------------------------------------------ staging
@dataclass
class Staging:
    """Plain-text copies of the logs named ``result_<i>.txt`` (what the mlperf_logging tools glob for)."""

    root: Path
    maskrcnn_dir: Path
    plain: Dict[str, Path] = field(default_factory=dict)      # run name -> plain copy
    originals: Dict[str, str] = field(default_factory=dict)   # plain copy path -> original file name

    def rename_paths(self, text: str) -> str:
        for staged, orig in self.originals.items():
            text = text.replace(staged, orig)
        return text


@contextlib.contextmanager
def staged_logs(runs: Sequence[Tuple[str, Path, bool]]):
    """runs: (name, original path, is a maskrcnn run). Decompresses ``.gz`` logs; removed on exit."""
    tmp = Path(tempfile.mkdtemp(prefix="mlperf_review_"))
    try:
        stage = Staging(root=tmp, maskrcnn_dir=tmp / "maskrcnn")
        stage.maskrcnn_dir.mkdir()
        (tmp / "other").mkdir()
        for i, (name, path, is_maskrcnn) in enumerate(runs):
            dest = (stage.maskrcnn_dir if is_maskrcnn else tmp / "other") / f"result_{i}.txt"
            try:
                opener = gzip.open if str(path).endswith(".gz") else open
                with opener(path, "rb") as src, open(dest, "wb") as dst:
                    shutil.copyfileobj(src, dst)
            except (OSError, EOFError):
                # a truncated gzip keeps what could be read; an unreadable file becomes an empty log.
                # The parser reports the problem either way.
                dest.touch()
            stage.plain[name] = dest
            stage.originals[str(dest)] = Path(path).name
        yield stage
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ------------------------------------------------------------------------------------------------ compliance
_CHECKER_LINE_RE = re.compile(r"(failed in line |line )(\d+)(:)")


def translate_checker_lines(msg: str, linenos: Sequence[int]) -> str:
    """The compliance checker numbers lines among the ':::MLLOG ' lines from 0; add the file line number."""
    def sub(m):
        idx = int(m.group(2))
        if 0 <= idx < len(linenos):
            return f"{m.group(1)}{idx} (file line {linenos[idx]}){m.group(3)}"
        return m.group(0)
    return _CHECKER_LINE_RE.sub(sub, msg, count=1)


def _trim_message(msg: str, max_lines: int = 3, width: int = 240) -> str:
    lines = [ln for ln in msg.strip().splitlines() if ln.strip()]
    keep = []
    for ln in lines:
        if ln.startswith("current context") or ln.startswith("current line"):
            break
        if ":::MLLOG" in ln and keep:
            continue
        keep.append(ln if len(ln) <= width else ln[: width - 3] + "...")
        if len(keep) >= max_lines:
            break
    return " | ".join(keep)


def run_compliance(plain_path: Path, ruleset: str, usage: str = "training", max_errors: int = 10,
                   rename=None, linenos: Sequence[int] = ()) -> ComplianceResult:
    """Run mlperf_logging's compliance checker in-process on one plain-text log."""
    try:
        from mlperf_logging.compliance_checker import mlp_compliance
    except Exception as exc:  # noqa: BLE001
        return ComplianceResult(ruleset, None, note=f"mlperf_logging is not importable ({exc})")
    rename = rename or (lambda s: s)
    mlp_compliance.enqueued_configs.clear()  # module-level queue; a crash would leave entries behind
    checker = mlp_compliance.make_checker(usage, ruleset, False, False)
    config = f"{usage}_{ruleset}/common.yaml"
    note = ""
    with captured_output() as (logged, _out, _warned):
        try:
            valid, _, _, _ = mlp_compliance.main(str(plain_path), config, checker)
        except Exception as exc:  # noqa: BLE001 - the checker evaluates YAML rules with eval()
            valid = False
            note = f"the compliance checker stopped with {type(exc).__name__}: {exc}"
        finally:
            mlp_compliance.enqueued_configs.clear()
    errors = [translate_checker_lines(rename(m), linenos)
              for m in list(checker.not_overwritable) + list(checker.overwritable.values())]
    if note:
        errors.insert(0, note)
    warns = [rename(m) for m in checker.warnings.values()]
    parse_errors: List[str] = []
    in_parse = False
    for level, msg in logged:
        if "Found parsing errors" in msg:
            in_parse = True
            continue
        if in_parse and level == logging.WARNING and msg.startswith("  "):
            parse_errors.append(msg.strip())
        else:
            in_parse = False
    return ComplianceResult(ruleset, bool(valid), errors=errors[:max_errors], warnings=warns[:max_errors],
                            parse_errors=parse_errors[: 2 * max_errors], note=note)


def first_errors(result: Optional[ComplianceResult], n: int = 3) -> List[str]:
    if result is None:
        return []
    if result.passed is None:
        return [result.note] if result.note else []
    return [_trim_message(m) for m in result.errors[:n]]


# ------------------------------------------------------------------------------------------------ RCP
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
    applicable: bool
    passed: Optional[bool] = None
    message: str = ""
    ruleset: Optional[str] = None
    global_batch_size: Optional[Any] = None
    submission_epochs: List[float] = field(default_factory=list)
    submission_mean_epochs: Optional[float] = None
    rcp_mean_epochs: Optional[float] = None
    min_mean_epochs: Optional[float] = None
    score_normalization: Optional[float] = None
    log: List[str] = field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        return {k: getattr(self, k) for k in (
            "applicable", "passed", "message", "ruleset", "global_batch_size", "submission_epochs",
            "submission_mean_epochs", "rcp_mean_epochs", "min_mean_epochs", "score_normalization", "log")}


def run_rcp(stage: Staging, ruleset: str, epochs: List[Optional[float]], gbs) -> RcpResult:
    """mlperf_logging's RCP verdict for the maskrcnn logs of a staging folder (pruned RCPs, as the package
    checker uses them). ``epochs`` only feed the explanation (submission olympic mean vs. the RCP record)."""
    res = RcpResult(applicable=True, ruleset=ruleset, global_batch_size=gbs)
    try:
        from mlperf_logging.rcp_checker import rcp_checker
    except Exception as exc:  # noqa: BLE001
        res.message = f"mlperf_logging RCP checker is not importable ({exc})"
        return res
    ok_epochs = sorted(float(e) for e in epochs if e is not None)
    res.submission_epochs = ok_epochs
    with captured_output() as (logged, _out, _warned):
        try:
            passed, msg, norm = rcp_checker.check_directory(
                str(stage.maskrcnn_dir), "training", ruleset, False, False, rcp_file=None,
                rcp_pass="pruned_rcps", rcp_bypass=False, set_scaling=False)
            res.passed, res.message, res.score_normalization = bool(passed), msg, norm
        except Exception as exc:  # noqa: BLE001
            res.passed = False
            res.message = f"the RCP checker stopped with {type(exc).__name__}: {exc}"
        try:
            checker = rcp_checker.RCP_Checker("training", ruleset, rules.BENCHMARK, False)
            record = checker._find_rcp(gbs, "pruned_rcps")
            if record is None:
                lo = checker._find_top_min_rcp(gbs, "pruned_rcps")
                hi = checker._find_bottom_max_rcp(gbs, "pruned_rcps")
                if lo is not None and hi is not None:
                    _, record = checker._create_interp_rcp(gbs, lo, hi)
                elif hi is not None:
                    record = checker._find_min_rcp("pruned_rcps")
            if record is not None:
                res.rcp_mean_epochs = float(record["RCP Mean"])
                res.min_mean_epochs = float(record["RCP Mean"] / record["Max Speedup"])
        except Exception:  # noqa: BLE001 - details are optional
            pass
    if len(ok_epochs) >= 3:
        res.submission_mean_epochs = sum(ok_epochs[1:-1]) / (len(ok_epochs) - 2)
    elif ok_epochs:
        res.submission_mean_epochs = sum(ok_epochs) / len(ok_epochs)
    res.log = [stage.rename_paths(m.strip()) for lvl, m in logged if lvl >= logging.INFO and m.strip()
               and not set(m.strip()) <= {"-"}][:20]
    return res


# ------------------------------------------------------------------------------------------------ seeds
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


def run_seed_check(stage: Staging, names: List[str], ruleset: str, applicable: bool,
                   seeds: Dict[str, List[Any]]) -> SeedResult:
    """mlperf_logging's seed checker (distinct seed per run, logged through mllog) over the maskrcnn runs."""
    res = SeedResult(applicable=applicable, seeds=seeds)
    by_seed: Dict[str, List[str]] = {}
    for name, vals in seeds.items():
        for v in vals:
            by_seed.setdefault(repr(v), []).append(name)
    res.duplicates = [f"seed {s} used by {', '.join(ns)}" for s, ns in by_seed.items() if len(set(ns)) > 1]
    if not applicable:
        return res
    try:
        from mlperf_logging.package_checker.seed_checker import SeedChecker
    except Exception as exc:  # noqa: BLE001
        res.errors = [f"mlperf_logging seed checker is not importable ({exc})"]
        return res
    files = [str(stage.plain[n]) for n in names if n in stage.plain]
    with captured_output() as (_logged, _out, warned):
        try:
            errors = SeedChecker(ruleset)._assert_unique_seed_per_run(files)
        except Exception as exc:  # noqa: BLE001
            errors = [f"the seed checker stopped with {type(exc).__name__}: {exc}"]
    res.errors = [_trim_message(stage.rename_paths(str(e)), max_lines=2) for e in errors]
    res.warnings = [stage.rename_paths(str(w.message)) for w in warned]
    res.passed = not errors
    return res


# ------------------------------------------------------------------------------------------------ score
def mlperf_logging_score(stage: Staging, ruleset: str) -> Tuple[Optional[float], Dict[str, float], List[str]]:
    """The strong-scaling score as mlperf_logging's result_summarizer computes it.

    ``result_summarizer.compute_score`` (4.1.68) unpacks 4 of the 5 values returned by
    ``_compute_strong_score_standalone``; this calls the lower-level function directly. Returns
    (score or None, {file name: minutes}, printed notices).
    """
    try:
        from mlperf_logging.result_summarizer import result_summarizer as rs
    except Exception as exc:  # noqa: BLE001
        return None, {}, [f"mlperf_logging result_summarizer is not importable ({exc})"]
    with captured_output() as (_logged, out, _warned):
        try:
            ret = rs._compute_strong_score_standalone(
                rules.BENCHMARK, None, False, str(stage.maskrcnn_dir), "training", ruleset,
                return_full_scores=True)
        except Exception as exc:  # noqa: BLE001
            return None, {}, [f"result_summarizer stopped with {type(exc).__name__}: {exc}"]
    scores_track, score = ret[0], ret[2]
    per_file = {stage.originals.get(str(k), Path(k).name): float(v) for k, v in scores_track.items()}
    notices = [stage.rename_paths(ln.strip()) for ln in out.getvalue().splitlines() if ln.strip()]
    return (float(score) if score is not None else None), per_file, notices
