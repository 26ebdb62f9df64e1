"""Reading MLPerf result logs: ``:::MLLOG`` events plus the optional training-progress lines.

The parser never raises on bad content: a truncated, corrupt or interleaved ``:::MLLOG`` line becomes a
:class:`Issue` carrying the file name and the 1-based line number, and parsing goes on with the next line.
Only the standard library is used here (no torch, no mlperf_logging).
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple

TOKEN = ":::MLLOG"
LEGACY_TOKENS = (":::MLPv0.5.0", ":::MLL ")  # MLPerf v0.5/v0.6 log formats (not supported)

_RESULT_RE = re.compile(r"^result_.*\.txt(\.gz)?$")
# files a reviewer may take for a run (reported as left out); the review's own outputs are not
_LOGLIKE_RE = re.compile(r"^.*\.(log|txt|out|err)(\.gz)?$")
_OWN_OUTPUT_RE = re.compile(r"^(mlperf_review|mlperf_compare)\.")

# NVIDIA maskrcnn_benchmark MetricLogger line:
#   "... maskrcnn_benchmark.trainer INFO: eta: 6:34:50  iter: 80  loss: 1.3312 (1.9176)  ...  time: 0.2265 (0.2964)
#    data: 0.0029 (0.0188)  lr: 0.007680  max mem: 6469"
_ITER_RE = re.compile(r"\biter:\s*(\d+)")
_LOSS_RE = re.compile(r"(?<![_\w])loss:\s*([-+0-9.eE]+)(?:\s*\(([-+0-9.eE]+)\))?")
_TIME_RE = re.compile(r"(?<![_\w])time:\s*([0-9.eE+-]+)(?:\s*\(([0-9.eE+-]+)\))?")
_LR_RE = re.compile(r"(?<![_\w])lr:\s*([0-9.eE+-]+)")
_IPS_RE = re.compile(r"images/s:\s*([0-9.eE+-]+)")  # this project's MetricsHook line
# NVIDIA v0.7 prints "&&&& MLPERF METRIC THROUGHPUT=179.9648 iterations / s"; the value is
# iterations x global batch / training time, i.e. images per second despite the label.
_METRIC_THROUGHPUT_RE = re.compile(r"&&&&\s*MLPERF METRIC THROUGHPUT\s*=\s*([0-9.eE+-]+)")

_NUM = (int, float)


@dataclass
class Event:
    """One ``:::MLLOG`` record."""

    key: str
    value: Any
    metadata: Dict[str, Any]
    time_ms: float
    event_type: Optional[str]
    lineno: int  # 1-based line number in the file


@dataclass
class Issue:
    """A problem found while reading a log (reported, never raised)."""

    path: str
    lineno: Optional[int]
    kind: str  # truncated | corrupt | interleaved | missing-field | unreadable | legacy-format
    message: str
    excerpt: str = ""

    def __str__(self) -> str:
        where = f"{Path(self.path).name}:{self.lineno}" if self.lineno else Path(self.path).name
        text = f"{where}: {self.kind}: {self.message}"
        if self.excerpt:
            text += f" [{self.excerpt}]"
        return text

    def to_dict(self) -> Dict[str, Any]:
        return {"file": Path(self.path).name, "line": self.lineno, "kind": self.kind,
                "message": self.message, "excerpt": self.excerpt}


@dataclass
class TrainPoint:
    """One training-progress line (NVIDIA MetricLogger format)."""

    iteration: int
    loss: Optional[float]
    loss_avg: Optional[float]
    step_time: Optional[float]  # seconds per iteration (windowed median)
    lr: Optional[float]
    lineno: int
    ips: Optional[float] = None  # images/s printed on the line


@dataclass
class ParsedLog:
    path: Path
    events: List[Event] = field(default_factory=list)
    issues: List[Issue] = field(default_factory=list)
    train_points: List[TrainPoint] = field(default_factory=list)
    metric_throughputs: List[float] = field(default_factory=list)
    n_lines: int = 0
    n_mllog_lines: int = 0
    legacy_lines: int = 0
    # file line numbers of the lines mlperf_logging's parser keeps (those containing ":::MLLOG "), in order:
    # the compliance checker's "line N" is an index into this list
    checker_linenos: List[int] = field(default_factory=list)

    @property
    def name(self) -> str:
        return display_name(self.path)

    def first(self, key: str) -> Optional[Event]:
        for ev in self.events:
            if ev.key == key:
                return ev
        return None

    def all(self, key: str) -> List[Event]:
        return [ev for ev in self.events if ev.key == key]


def display_name(path: Path) -> str:
    """``result_0.txt.gz`` -> ``result_0``; ``run.log`` -> ``run``."""
    name = Path(path).name
    for suffix in (".gz", ".txt", ".log"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name


def _natural_key(path: Path) -> Tuple:
    parts = re.split(r"(\d+)", path.name)
    return tuple(int(p) if p.isdigit() else p for p in parts)


def find_result_files(folder: Path) -> Tuple[List[Path], List[Tuple[Path, str]]]:
    """The result files of a folder (not recursive) and the log-like files left out, with the reason.

    The official tools read ``result_*.txt`` only. ``result_*.txt.gz`` is read as the same file decompressed
    (how published logs are often stored) unless the plain file is there too.
    """
    folder = Path(folder)
    files = sorted((p for p in folder.iterdir() if p.is_file()), key=_natural_key)
    plain = {p.name for p in files if p.name.endswith(".txt")}
    results, left_out = [], []
    for p in files:
        if _RESULT_RE.match(p.name):
            if p.name.endswith(".gz") and p.name[:-3] in plain:
                left_out.append((p, f"{p.name[:-3]} is there too (the plain file is the result)"))
            else:
                results.append(p)
        elif _LOGLIKE_RE.match(p.name) and not _OWN_OUTPUT_RE.match(p.name):
            left_out.append((p, "not a result file: the official tools read result_*.txt only"))
    return results, left_out


def staged_name(path: Path) -> str:
    """The name the official tools see: ``result_0.txt.gz`` is staged as ``result_0.txt``."""
    name = Path(path).name
    return name[:-3] if name.endswith(".gz") else name


def open_text(path: Path):
    """Open a log as text the way mlperf_logging does (latin-1), transparently for ``.gz``."""
    path = Path(path)
    if path.name.endswith(".gz"):
        return gzip.open(path, "rt", encoding="latin-1", newline="")
    return open(path, "rt", encoding="latin-1", newline="")


def _excerpt(text: str, limit: int = 80) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


_decoder = json.JSONDecoder()


def _parse_segment(seg: str, path: str, lineno: int, issues: List[Issue]) -> Tuple[Optional[Event], str]:
    """Parse the JSON after one ``:::MLLOG`` token. Returns (event or None, trailing text)."""
    body = seg.strip()
    if not body:
        issues.append(Issue(path, lineno, "truncated", "':::MLLOG' with no JSON after it"))
        return None, ""
    try:
        obj, end = _decoder.raw_decode(body)
    except json.JSONDecodeError as exc:
        kind = "truncated" if exc.pos >= len(body) - 1 or body.count("{") > body.count("}") else "corrupt"
        issues.append(Issue(path, lineno, kind, f"MLLOG JSON does not parse ({exc.msg}; column {exc.pos})",
                            _excerpt(body)))
        return None, ""
    trailing = body[end:]
    if not isinstance(obj, dict):
        issues.append(Issue(path, lineno, "corrupt", "MLLOG record is not a JSON object", _excerpt(body)))
        return None, trailing
    missing = [k for k in ("key", "time_ms") if k not in obj]
    if missing:
        issues.append(Issue(path, lineno, "missing-field", "MLLOG record lacks " + ", ".join(missing),
                            _excerpt(body)))
        return None, trailing
    key = obj.get("key")
    time_ms = obj.get("time_ms")
    if not isinstance(key, str) or isinstance(time_ms, bool) or not isinstance(time_ms, _NUM):
        try:
            time_ms = float(time_ms)
        except (TypeError, ValueError):
            issues.append(Issue(path, lineno, "corrupt", "MLLOG record has a bad 'key' or 'time_ms'",
                                _excerpt(body)))
            return None, trailing
        if not isinstance(key, str):
            issues.append(Issue(path, lineno, "corrupt", "MLLOG record has a non-string 'key'", _excerpt(body)))
            return None, trailing
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        metadata = {}
    return Event(key=key, value=obj.get("value"), metadata=metadata, time_ms=float(time_ms),
                 event_type=obj.get("event_type"), lineno=lineno), trailing


def _parse_float(text: Optional[str]) -> Optional[float]:
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def _parse_progress(line: str, lineno: int, log: ParsedLog) -> None:
    if "&&&&" in line:
        m = _METRIC_THROUGHPUT_RE.search(line)
        if m:
            val = _parse_float(m.group(1))
            if val is not None:
                log.metric_throughputs.append(val)
        return
    if "iter:" not in line or "loss:" not in line:
        return
    m_iter = _ITER_RE.search(line)
    m_loss = _LOSS_RE.search(line)
    if not m_iter or not m_loss:
        return
    m_time = _TIME_RE.search(line)
    m_lr = _LR_RE.search(line)
    m_ips = _IPS_RE.search(line)
    log.train_points.append(TrainPoint(
        iteration=int(m_iter.group(1)),
        loss=_parse_float(m_loss.group(1)),
        loss_avg=_parse_float(m_loss.group(2)),
        step_time=_parse_float(m_time.group(1)) if m_time else None,
        lr=_parse_float(m_lr.group(1)) if m_lr else None,
        lineno=lineno,
        ips=_parse_float(m_ips.group(1)) if m_ips else None,
    ))


def parse_lines(lines: Iterable[str], path: str = "<log>", log: Optional[ParsedLog] = None) -> ParsedLog:
    """Parse an iterable of text lines (already decoded)."""
    if log is None:
        log = ParsedLog(path=Path(path))
    spath = str(path)
    for lineno, raw in enumerate(lines, 1):
        log.n_lines = lineno
        line = raw.rstrip("\r\n")
        if TOKEN not in line:
            if any(tok in line for tok in LEGACY_TOKENS):
                log.legacy_lines += 1
            else:
                _parse_progress(line, lineno, log)
            continue
        # What mlperf_logging's parser reads (mlp_parser: lines holding ':::MLLOG ', stripped up to its last
        # occurrence): a token without the space is not read, and of several records on a line only the last.
        if TOKEN + " " not in line:
            log.issues.append(Issue(spath, lineno, "not-read", "':::MLLOG' without a space after it: "
                                    "mlperf_logging does not read this line", _excerpt(line)))
            continue
        log.n_mllog_lines += 1
        log.checker_linenos.append(lineno)
        ev, trailing = _parse_segment(line.rsplit(TOKEN + " ", 1)[1], spath, lineno, log.issues)
        if trailing.strip():  # mlperf_logging's json.loads fails on it ("Extra data"): the record is not read
            log.issues.append(Issue(spath, lineno, "interleaved", "text after the MLLOG JSON (output of two "
                                    "processes mixed?): mlperf_logging does not read this record",
                                    _excerpt(trailing)))
        elif ev is not None:
            log.events.append(ev)
        records = line.count(TOKEN)
        if records > 1:
            log.issues.append(Issue(
                spath, lineno, "interleaved",
                f"{records} ':::MLLOG' records on one line; mlperf_logging reads only the last one (the review too)",
                _excerpt(line)))
    return log


def parse_log(path: Path) -> ParsedLog:
    """Parse a result log file (plain or gzip). Never raises for bad content; unreadable files become issues."""
    path = Path(path)
    log = ParsedLog(path=path)
    try:
        with open_text(path) as fh:
            parse_lines(fh, str(path), log)
    except (OSError, EOFError, UnicodeDecodeError, ValueError, zlib.error) as exc:  # zlib: a corrupted .gz
        log.issues.append(Issue(str(path), None, "unreadable",
                                f"file could not be read to the end after line {log.n_lines}: {exc}"))
    if log.legacy_lines and not log.events:
        log.issues.append(Issue(str(path), None, "legacy-format",
                                f"{log.legacy_lines} lines in the MLPerf v0.5/v0.6 log format; only ':::MLLOG' "
                                "logs (rulesets 0.7.0 and later) are supported"))
    return log

