"""The official MLPerf tools of mlperf-logging, run on a submission folder or a staged copy of a results folder.

This is the only module of the package that calls mlperf_logging's checkers (the trainer's logger uses its
``mllog``). It stages a results folder the way the package checker expects a submission
(``<org>/results/<system>/maskrcnn/result_*.txt`` plus ``<org>/systems/<system>.json``), or takes a real one
(:mod:`.submission`), and runs, through their public entry points:

- the compliance checker on each log (``mlp_compliance.make_checker`` + ``mlp_compliance.main``),
- the package checker (``package_checker.check_training_package``): file count, compliance of every file with at
  most one failure accepted, distinct seeds and the RCP check (rulesets >= 1.0.0, closed), which writes
  ``scaling.json`` when the score must be normalized,
- the result summarizer (``result_summarizer.summarize_results``): the olympic score, multiplied by
  ``scaling.json``, as published.

For a recipe before training (:mod:`.recipe`) it runs the compliance checker's rule file on the hyperparameter
lines alone (``ComplianceChecker.configured_checks``) and looks the global batch up in the RCP checker's table
(:class:`RCPTable`, the one place that calls the RCP checker's private lookup helpers).

The package checker returns nothing; it reports through the root logger. Its verdict, and the details the review
explains (RCP record, seed errors, file count), are read from those log records by their format strings, pinned
below. Every such string, the signatures called and the result_summarizer behaviour the review mirrors are
checked by ``tests/review/test_official_pins.py``, which fails loudly when mlperf-logging changes them.
"""

from __future__ import annotations

import contextlib
import copy
import gzip
import io
import json
import logging
import math
import os
import re
import shutil
import tempfile
import warnings
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import rules

USAGE = "training"
NEWEST_RULESET = rules.SUPPORTED_RULESETS[-1]
PINNED_VERSION = "4.1.68"  # the mlperf-logging release these pins were checked against

# Format strings of mlperf_logging's log records (LogRecord.msg), package_checker.py / rcp_checker.py /
# seed_checker.py of 4.1.68.
PKG_PASSED = "PACKAGE CHECKER FOUND NO ERRORS, SUCCESS !"
PKG_FAILED = "PACKAGE CHECKER FOUND ERRORS, LOOK INTO ERROR LOG LINES AND FIX THEM."
PKG_FILE_COUNT = ("Incorrect number of files in dir, or wrong file names in directory %s, "
                  "found %d, expected %d")
PKG_NONCOMPLIANT_REJECTED = " %d files do not comply, directory cannot be accepted"
PKG_NONCOMPLIANT_ACCEPTED = " 1 file does not comply, accepting this under olympic scoring"
PKG_RCP_PASSED = "RCP Test Passed: %s"
PKG_RCP_FAILED = "RCP Test Failed: %s"
PKG_SEED_FAILED = "Seed checker failed"
SEED_RUNNING = " Running Seed Checker"
SEED_ERRORS = " Seed checker failed and found the following errors: %s"
RCP_RUNNING = " Running RCP Checker, pass: %s"
RCP_RECORD = " RCP Record: %s"
RCP_SUBMISSION_MEAN = " Submission mean epochs: %.4f"
SCALING_FILE = "scaling.json"  # written by the RCP check, read by the result summarizer
PACKAGE_CHECKER_PARAMS = "package_checker_params"  # the committee's bypasses, per system or per benchmark

# Fields system_desc_checker.check_system_desc requires (training, 1.0.0+); staged with neutral values.
SYSTEM_DESC_FIELDS = (
    "submitter", "division", "status", "system_name", "number_of_nodes", "host_processors_per_node",
    "host_processor_model_name", "host_processor_core_count", "host_processor_vcpu_count",
    "host_processor_frequency", "host_processor_caches", "host_processor_interconnect", "host_memory_capacity",
    "host_storage_type", "host_storage_capacity", "host_networking", "host_networking_topology",
    "host_memory_configuration", "accelerators_per_node", "accelerator_model_name",
    "accelerator_host_interconnect", "accelerator_frequency", "accelerator_on-chip_memories",
    "accelerator_memory_configuration", "accelerator_memory_capacity", "accelerator_interconnect",
    "accelerator_interconnect_topology", "cooling", "hw_notes", "framework", "other_software_stack",
    "operating_system", "sw_notes",
)


def version() -> Optional[str]:
    try:
        from importlib.metadata import version as _v
        return _v("mlperf-logging")
    except Exception:  # noqa: BLE001 - not installed or odd metadata
        return None


def available() -> bool:
    try:
        import mlperf_logging.compliance_checker.mlp_compliance  # noqa: F401
        import mlperf_logging.package_checker.package_checker  # noqa: F401
        import mlperf_logging.result_summarizer.result_summarizer  # noqa: F401
        return True
    except Exception:  # noqa: BLE001 - missing package or one of its dependencies (pandas, scipy)
        return False


# ------------------------------------------------------------------------------------------------ capture
class _RecordHandler(logging.Handler):
    def __init__(self):
        super().__init__(level=logging.DEBUG)
        self.records: List[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


@dataclass
class Captured:
    records: List[logging.LogRecord] = field(default_factory=list)
    stdout: str = ""
    stderr: str = ""
    warned: List[str] = field(default_factory=list)


class _RuleFiles:
    """What the compliance checker's module sees as ``yaml`` while :func:`captured` runs: PyYAML itself, except that
    ``load(f, Loader=BaseLoader)`` (its only call: every scalar a string) parses each distinct rule file once per
    process, with libyaml's loader of the same semantics when PyYAML has it (``CBaseLoader``), and hands out a deep
    copy. The checker re-reads its rule files for every log it checks; parsing them was most of a review's time
    (tests/review/test_official_pins.py checks that both loaders give the same rules)."""

    def __init__(self, yaml_module):
        self._yaml = yaml_module
        self._parsed: Dict[str, Any] = {}

    def __getattr__(self, name):
        return getattr(self._yaml, name)

    def load(self, stream, Loader):  # noqa: N803 - PyYAML's keyword
        if Loader is not self._yaml.BaseLoader:
            return self._yaml.load(stream, Loader=Loader)
        text = stream.read() if hasattr(stream, "read") else stream
        if text not in self._parsed:
            self._parsed[text] = self._yaml.load(text, Loader=getattr(self._yaml, "CBaseLoader",
                                                                      self._yaml.BaseLoader))
        return copy.deepcopy(self._parsed[text])


_RULE_FILES: List[_RuleFiles] = []


@contextlib.contextmanager
def _parsed_once():
    from mlperf_logging.compliance_checker import mlp_compliance

    if not _RULE_FILES:
        _RULE_FILES.append(_RuleFiles(mlp_compliance.yaml))
    before, mlp_compliance.yaml = mlp_compliance.yaml, _RULE_FILES[0]
    try:
        yield
    finally:
        mlp_compliance.yaml = before


@contextlib.contextmanager
def captured():
    """Root-logger records, prints (stdout and stderr) and warnings of mlperf_logging code, kept off the
    terminal: the tools report through all four. Their rule files are parsed once (:class:`_RuleFiles`)."""
    root = logging.getLogger()
    handler = _RecordHandler()
    old_handlers, old_level = root.handlers[:], root.level
    root.handlers = [handler]
    root.setLevel(logging.INFO)
    out, err = io.StringIO(), io.StringIO()
    cap = Captured()
    try:
        with warnings.catch_warnings(record=True) as warned, contextlib.redirect_stdout(out), \
                contextlib.redirect_stderr(err), _parsed_once():
            warnings.simplefilter("always")
            yield cap
    finally:
        root.handlers = old_handlers
        root.setLevel(old_level)
        cap.records = handler.records
        cap.stdout, cap.stderr = out.getvalue(), err.getvalue()
        cap.warned = [str(w.message) for w in warned]


def record_text(rec: logging.LogRecord) -> str:
    try:
        return rec.getMessage()
    except Exception:  # noqa: BLE001 - a record whose arguments do not fit its format
        return str(rec.msg)


# ------------------------------------------------------------------------------------------------ staging
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(text: Optional[str], default: str) -> str:
    name = _UNSAFE.sub("_", text or "").strip("._")
    return name or default


def _nodes_of(platform: Optional[str]) -> str:
    m = re.match(r"\s*(\d+)\s*x", platform or "")
    return m.group(1) if m else "1"


@dataclass
class Package:
    """A staged submission: ``org_dir/results/<system>/maskrcnn/<result files>`` and the system description."""

    root: Path
    org_dir: Path
    system: str
    benchmark_dir: Path
    files: Dict[str, Path] = field(default_factory=dict)   # original file name -> staged path
    shown: Dict[str, str] = field(default_factory=dict)    # staged path -> name shown in messages

    def rename(self, text: str) -> str:
        """The tools' messages name staged paths; show the original file names (and no temporary folder)."""
        for staged, orig in sorted(self.shown.items(), key=lambda kv: -len(kv[0])):
            text = text.replace(staged, orig)
        return text.replace(str(self.benchmark_dir), "<results folder>").replace(str(self.root) + os.sep, "")

    @property
    def scaling_factor(self) -> Optional[float]:
        path = self.benchmark_dir / SCALING_FILE
        if not path.is_file():
            return None
        try:
            return float(json.loads(path.read_text())["scaling_factor"])
        except (OSError, ValueError, KeyError, TypeError):
            return None


def system_description(org: str, platform: str, division: str, status: str) -> Dict[str, str]:
    """The smallest system description the package checker and result summarizer accept; only ``division``
    (closed runs the seed and RCP checks) and the names matter to them."""
    desc = {k: "" for k in SYSTEM_DESC_FIELDS}
    desc.update({"submitter": org, "division": division, "status": status, "system_name": platform,
                 "number_of_nodes": _nodes_of(platform), "host_processors_per_node": "1",
                 "host_processor_core_count": "1", "accelerators_per_node": "1",
                 "accelerator_model_name": "unknown", "host_processor_model_name": "unknown",
                 "framework": "unknown"})
    return desc


@contextlib.contextmanager
def _scratch_package(org_name: str, system: str):
    """An empty ``<tmp>/<org>/results/<system>/maskrcnn`` and ``systems/`` as a :class:`Package`; removed on exit."""
    root = Path(tempfile.mkdtemp(prefix="mlperf_review_"))
    try:
        org_dir = root / org_name
        bench = org_dir / "results" / system / rules.BENCHMARK
        bench.mkdir(parents=True)
        (org_dir / "systems").mkdir()
        yield Package(root=root, org_dir=org_dir, system=system, benchmark_dir=bench)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def stage(results: Sequence[Tuple[str, Path]], org: Optional[str], platform: Optional[str],
          division: Optional[str], status: Optional[str] = None, params: Sequence[Tuple[str, Path]] = ()):
    """results: (staged file name, source path). ``.gz`` sources are decompressed; a truncated or unreadable
    file keeps what could be read (the review's parser reports the problem). ``params``: the folder's
    ``package_checker_params`` files, ``("benchmark" | "system", path)``, staged where the package checker reads
    them. Removed on exit."""
    org_name = safe_name(org, "unknown_org")
    system = safe_name(platform, "unknown_system")
    with _scratch_package(org_name, system) as pkg:
        desc = system_description(org or org_name, platform or system, division or "closed", status or "onprem")
        (pkg.org_dir / "systems" / f"{system}.json").write_text(json.dumps(desc, indent=2))
        bench = pkg.benchmark_dir
        for name, src in results:
            dest = bench / name
            try:
                opener = gzip.open if str(src).endswith(".gz") else open
                with opener(src, "rb") as fin, open(dest, "wb") as fout:
                    shutil.copyfileobj(fin, fout)
            except (OSError, EOFError, zlib.error):  # the review's parser names the file
                dest.touch(exist_ok=True)
            pkg.files[Path(src).name] = dest
            pkg.shown[str(dest)] = Path(src).name
        for level, src in params:
            shutil.copy2(src, (bench if level == "benchmark" else bench.parent) / PACKAGE_CHECKER_PARAMS)
        yield pkg


@contextlib.contextmanager
def one_system(org_dir: Path, system: str):
    """A copy of one system of a submission folder (its results, its package checker parameters and its
    description) in a folder of its own, for the package checker and the result summarizer: on a folder of several
    systems their verdict is the whole folder's and their score rows are every system's. ``scaling.json`` is this
    check's: an earlier one is left out of the copy, and the folder gets what the RCP check wrote (or none; the
    summarizer applies any it finds). Removed on exit."""
    src = org_dir / "results" / system / rules.BENCHMARK
    with _scratch_package(org_dir.name, system) as pkg:
        shutil.copytree(src, pkg.benchmark_dir, dirs_exist_ok=True, ignore=shutil.ignore_patterns(SCALING_FILE))
        system_params = src.parent / PACKAGE_CHECKER_PARAMS  # a system-wide bypass (rcp-bypass, ...)
        if system_params.is_file():
            shutil.copy2(system_params, pkg.benchmark_dir.parent / PACKAGE_CHECKER_PARAMS)
        shutil.copy2(org_dir / "systems" / f"{system}.json", pkg.org_dir / "systems" / f"{system}.json")
        for f in pkg.benchmark_dir.iterdir():
            pkg.shown[str(f)] = f.name
        yield pkg
        scaling = pkg.benchmark_dir / SCALING_FILE
        if scaling.is_file():
            shutil.copy2(scaling, src / SCALING_FILE)
        elif (src / SCALING_FILE).exists():
            (src / SCALING_FILE).unlink()


# ------------------------------------------------------------------------------------------------ compliance
@dataclass
class ComplianceResult:
    ruleset: str
    passed: Optional[bool]          # None: the checker could not run
    errors: List[str] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)
    parse_errors: List[str] = field(default_factory=list)
    note: str = ""

    @property
    def label(self) -> str:
        if self.passed is None:
            return "not run"
        return "PASS" if self.passed else "FAIL"

    def to_dict(self) -> Dict[str, Any]:
        return {"ruleset": self.ruleset, "passed": self.passed, "errors": self.errors,
                "warnings": self.warnings, "parse_errors": self.parse_errors, "note": self.note}


_CHECKER_LINE_RE = re.compile(r"(failed in line |line )(\d+)(:)")


def translate_checker_lines(msg: str, linenos: Sequence[int]) -> str:
    """The compliance checker numbers lines among the ':::MLLOG ' lines from 0; add the file line number."""
    def sub(m):
        idx = int(m.group(2))
        if 0 <= idx < len(linenos):
            return f"{m.group(1)}{idx} (file line {linenos[idx]}){m.group(3)}"
        return m.group(0)
    return _CHECKER_LINE_RE.sub(sub, msg, count=1)


def trim_message(msg: str, max_lines: int = 3, width: int = 240) -> str:
    """The first lines of a checker message, without the context dumps (``current context[s]=...``)."""
    lines = [ln for ln in msg.strip().splitlines() if ln.strip()]
    keep = []
    for ln in lines:
        if ln.startswith("current context") or ln.startswith("current line"):
            break
        if ":::MLLOG" in ln and keep:
            continue
        ln = ln.strip()
        keep.append(ln if len(ln) <= width else ln[: width - 3] + "...")
        if len(keep) >= max_lines:
            break
    return " | ".join(keep)


def check_log(path: Path, ruleset: str, max_errors: int = 10, rename=None,
              linenos: Sequence[int] = ()) -> ComplianceResult:
    """The compliance checker on one plain-text log, as ``python -m mlperf_logging.compliance_checker`` runs it."""
    from mlperf_logging.compliance_checker import mlp_compliance

    rename = rename or (lambda s: s)
    mlp_compliance.enqueued_configs.clear()  # module-level queue; a crash would leave entries behind
    checker = mlp_compliance.make_checker(USAGE, ruleset, False, False)
    note = ""
    with captured() as cap:
        try:
            valid, _, _, _ = mlp_compliance.main(str(path), f"{USAGE}_{ruleset}/common.yaml", checker)
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
    for rec in cap.records:
        msg = record_text(rec)
        if "Found parsing errors" in msg:
            in_parse = True
            continue
        if in_parse and rec.levelno == logging.WARNING and msg.startswith("  "):
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
    return [trim_message(m) for m in result.errors[:n]]


# ------------------------------------------------------------------------------------------------ package checker
@dataclass
class PackageCheck:
    """What ``package_checker.check_training_package`` said about the staged folder."""

    ruleset: str
    passed: Optional[bool] = None
    errors: List[str] = field(default_factory=list)     # its ERROR records, in order
    other_errors: List[str] = field(default_factory=list)  # ERROR records of no format the review explains
    notes: List[str] = field(default_factory=list)      # its WARNING records (compliance dumps left out)
    crash: str = ""
    file_count: Optional[Tuple[int, int]] = None        # (found, expected) when wrong
    noncompliant_rejected: Optional[int] = None
    noncompliant_accepted: bool = False
    seeds_checked: bool = False
    seeds_passed: Optional[bool] = None
    seed_errors: List[str] = field(default_factory=list)
    seed_warnings: List[str] = field(default_factory=list)
    rcp_checked: bool = False
    rcp_passed: Optional[bool] = None
    rcp_message: str = ""
    rcp_record: Optional[Dict[str, Any]] = None
    rcp_submission_mean: Optional[float] = None
    rcp_warnings: List[str] = field(default_factory=list)
    scaling_factor: Optional[float] = None               # scaling.json after the check (None: not written)

    def to_dict(self) -> Dict[str, Any]:
        rec = None
        if self.rcp_record:
            rec = {k: self.rcp_record.get(k) for k in ("BS", "RCP Mean", "RCP Stdev", "Max Speedup", "Min Epochs")
                   if k in self.rcp_record}
        return {"ruleset": self.ruleset, "passed": self.passed, "errors": self.errors, "notes": self.notes,
                "seeds_checked": self.seeds_checked, "seeds_passed": self.seeds_passed,
                "rcp_checked": self.rcp_checked, "rcp_passed": self.rcp_passed, "rcp_message": self.rcp_message,
                "crash": self.crash, "scaling_factor": self.scaling_factor, "rcp_record": rec}


def _arg(rec: logging.LogRecord, i: int = 0):
    args = rec.args
    if isinstance(args, dict):  # logging unwraps a lone dict argument
        return args if i == 0 else None
    if isinstance(args, tuple) and len(args) > i:
        return args[i]
    return None


_SEED_ERROR_START = re.compile(r"\n(?=Result file |Error found when querying seeds from )")
_EXPLAINED_ERRORS = (PKG_FILE_COUNT, PKG_NONCOMPLIANT_REJECTED, SEED_ERRORS, PKG_SEED_FAILED, PKG_RCP_FAILED)


def run_package_checker(pkg: Package, ruleset: str) -> PackageCheck:
    from mlperf_logging.package_checker import package_checker

    res = PackageCheck(ruleset=ruleset)
    with captured() as cap:
        try:
            package_checker.check_training_package(
                str(pkg.org_dir), USAGE, ruleset, False, False, False, False, False, os.devnull)
        except Exception as exc:  # noqa: BLE001 - the official tool crashing is an answer too
            res.crash = f"{type(exc).__name__}: {exc}"
    in_rcp = False
    for rec in cap.records:
        msg = rec.msg if isinstance(rec.msg, str) else str(rec.msg)
        text = pkg.rename(record_text(rec))
        if rec.levelno >= logging.ERROR:
            res.errors.append(text)
            if msg not in _EXPLAINED_ERRORS:
                res.other_errors.append(text)
        if msg == PKG_PASSED:
            res.passed = True
        elif msg == PKG_FAILED:
            res.passed = False
        elif msg == PKG_FILE_COUNT:
            res.file_count = (int(_arg(rec, 1)), int(_arg(rec, 2)))
        elif msg == PKG_NONCOMPLIANT_REJECTED:
            res.noncompliant_rejected = int(_arg(rec))
        elif msg == PKG_NONCOMPLIANT_ACCEPTED:
            res.noncompliant_accepted = True
            res.notes.append(text.strip())
        elif msg == SEED_RUNNING:
            res.seeds_checked, res.seeds_passed = True, True
        elif msg == SEED_ERRORS:
            res.seeds_passed = False
            # one message per result file, each possibly several lines long
            res.seed_errors = [pkg.rename(e).strip() for e in _SEED_ERROR_START.split(str(_arg(rec))) if e.strip()]
        elif msg == PKG_SEED_FAILED:
            res.seeds_passed = False
        elif msg == RCP_RUNNING:
            res.rcp_checked, in_rcp = True, True
        elif msg == RCP_RECORD and in_rcp:
            rec_arg = _arg(rec)
            res.rcp_record = dict(rec_arg) if isinstance(rec_arg, dict) else None
        elif msg == RCP_SUBMISSION_MEAN and in_rcp:
            res.rcp_submission_mean = float(_arg(rec))
        elif msg in (PKG_RCP_PASSED, PKG_RCP_FAILED):
            res.rcp_passed = msg == PKG_RCP_PASSED
            res.rcp_message = str(_arg(rec))
            in_rcp = False
        elif rec.levelno == logging.WARNING and rec.module == "rcp_checker":
            if text.strip() not in res.rcp_warnings:
                res.rcp_warnings.append(text.strip())
        elif rec.levelno == logging.WARNING and rec.module == "package_checker":
            res.notes.append(text.strip())  # file naming, unknown files (compliance messages: see check_log)
    res.seed_warnings = [pkg.rename(w) for w in cap.warned if "seed" in w.lower()]
    res.scaling_factor = pkg.scaling_factor
    if res.crash:
        res.passed = False
    return res


# ------------------------------------------------------------------------------------------------ summarizer
@dataclass
class SummarizerResult:
    """The maskrcnn columns of ``result_summarizer.summarize_results`` for the staged system."""

    score_min: Optional[float] = None           # olympic mean x scaling factor, as published
    scaling_factor: Optional[float] = None      # from scaling.json (1.0 when none)
    rcp: str = ""                               # 'Pass', 'Fail', 'Interp. Fail', 'Missing', ... ('' when not run)
    gbs: Optional[float] = None
    samples_to_converge: Optional[float] = None
    notes: List[str] = field(default_factory=list)
    crash: str = ""

    def to_dict(self) -> Dict[str, Any]:
        return {"score_min": self.score_min, "scaling_factor": self.scaling_factor, "rcp": self.rcp,
                "gbs": self.gbs, "samples_to_converge": self.samples_to_converge, "notes": self.notes,
                "crash": self.crash}


def _finite(x) -> Optional[float]:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def run_result_summarizer(pkg: Package, ruleset: str) -> SummarizerResult:
    """Run after the package checker: the summarizer reads the ``scaling.json`` the RCP check wrote."""
    from mlperf_logging.result_summarizer import result_summarizer

    res = SummarizerResult()
    with captured() as cap:
        try:
            strong, _weak, detailed, _power = result_summarizer.summarize_results(str(pkg.org_dir), USAGE, ruleset)
        except Exception as exc:  # noqa: BLE001
            res.crash = f"{type(exc).__name__}: {exc}"
            strong = detailed = None
    # Its one-line messages ("NOTICE: Dropping non-converged run(s)", "... in result_3.txt"); not the traceback
    # it prints after trying the RCP checker, which has no RCPs before 1.0.0 (that is expected, not news).
    no_rcps = not rules.at_least(ruleset, rules.RCP_MIN_RULESET)
    res.notes = [pkg.rename(ln) for ln in cap.stdout.splitlines() if ln.strip()
                 and not (no_rcps and ln.startswith("WARNING: RCP/GBS computation failed"))][:10]
    if res.crash or strong is None or len(strong) == 0:
        if not res.crash:
            res.crash = "no row for the staged system (system description rejected?)"
        return res
    def of_system(table):  # the row of the package's system file (its details_url names it)
        rows = table.to_dict("records") if table is not None and len(table) else []
        return next((r for r in rows if str(r.get("details_url", "")).endswith(f"/systems/{pkg.system}.json")),
                    None)

    row = of_system(strong)
    if row is None:
        res.crash = f"no row for the system {pkg.system} (system description rejected?)"
        return res
    res.score_min = _finite(row.get(rules.BENCHMARK))
    drow = of_system(detailed) or {}
    res.scaling_factor = _finite(drow.get(f"{rules.BENCHMARK}:rcp_scaling_factor"))
    res.rcp = str(drow.get(f"{rules.BENCHMARK}:RCP") or "")
    res.gbs = _finite(drow.get(f"{rules.BENCHMARK}:GBS"))
    res.samples_to_converge = _finite(drow.get(f"{rules.BENCHMARK}:samples_to_converge"))
    return res


# ------------------------------------------------------------------------------------------------ conventions
def summarizer_start_stop(events) -> Tuple[Optional[Any], Optional[Any]]:
    """The run_start and run_stop records result_summarizer takes (``_query_run_start_stop``): in file order,
    run_start is updated until a run_stop has been seen as well, so with repeated run_start lines (multi-rank
    logs) the last one before the first run_stop counts. ``events`` need ``key``."""
    start = stop = None
    for ev in events:
        if ev.key == "run_start":
            start = ev
        if ev.key == "run_stop":
            stop = ev
        if start is not None and stop is not None:
            break
    return start, stop


def olympic(scores: List[float], dropped: int, max_dropped: int = 1) -> Optional[float]:
    """result_summarizer's strong-scaling score before scaling: no score with more than ``max_dropped`` runs
    dropped; else ``_compute_olympic_average``: sort, drop ``max_dropped`` from the bottom and
    ``max_dropped - dropped`` from the top (a dropped run counts as the slowest)."""
    if dropped > max_dropped:
        return None
    scores = sorted(scores)
    kept = scores[max_dropped: len(scores) - (max_dropped - dropped)]
    return sum(kept) / len(kept) if kept else None


# ------------------------------------------------------------------------------------------------ recipe checks
def recipe_rule_file(ruleset: str, division: str = "closed") -> str:
    import mlperf_logging

    path = os.path.join(os.path.dirname(mlperf_logging.__file__), "compliance_checker", f"training_{ruleset}",
                        f"{division}_{rules.BENCHMARK}.yaml")
    if not os.path.exists(path):
        raise ValueError(f"mlperf-logging has no {division} {rules.BENCHMARK} rules for ruleset {ruleset} ({path})")
    return path


def failed_checks(log_text: str, ruleset: str, division: str = "closed") -> List[Tuple[str, Any, str]]:
    """``(key, value, message)`` of every ``CHECK`` of the ruleset's rule file that the ``:::MLLOG`` lines in
    ``log_text`` fail (the compliance checker's parser and ``ComplianceChecker.configured_checks``)."""
    from mlperf_logging.compliance_checker import mlp_compliance, mlp_parser

    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as f:
        f.write(log_text)
    try:
        loglines, errors = mlp_parser.parse_file(f.name, ruleset=ruleset)
    finally:
        os.unlink(f.name)
    if errors:
        raise ValueError(f"the recipe's log lines do not parse: {errors[0]}")
    checker = mlp_compliance.ComplianceChecker(USAGE, ruleset, quiet=True, werror=False)
    with captured():
        checker.configured_checks(loglines, recipe_rule_file(ruleset, division))
    logged = {ll.key: ll.value["value"] for ll in loglines}
    return [(key, logged.get(key), message) for key, message in checker.overwritable.items()]


PRUNED = "pruned_rcps"  # the RCPs package_checker.check_training_package judges convergence with


@dataclass
class RCPTable:
    """The RCP checker's table for Mask R-CNN of one ruleset, searched with the checker's own lookups
    (``RCP_Checker._find_rcp``, ``_find_top_min_rcp``, ``_find_bottom_max_rcp``, ``_find_min_rcp``: private, so
    pinned by tests/review/test_official_pins.py)."""

    ruleset: str
    checker: Any

    @property
    def records(self) -> Dict[str, Dict[str, Any]]:
        return self.checker.rcp_data

    def batches(self) -> List[int]:
        return sorted(r["BS"] for r in self.records.values())

    def at(self, batch, judged: bool = False) -> Optional[Tuple[str, Dict[str, Any]]]:
        """``(name, record)`` of the RCP at exactly this global batch, or None. ``judged``: among the RCPs the
        package checker judges convergence with (``pruned_rcps``: the fastest-converging ones, e.g. 8, 128 and
        272 of training 3.1.0's 8..272); else among all (each holds the reference's recipe at its batch)."""
        record = self.checker._find_rcp(batch, PRUNED if judged else "full_rcps")
        if record is None:
            return None
        return next(k for k, r in self.records.items() if r is record), record

    def around(self, batch) -> Tuple[Optional[Dict[str, Any]], Optional[Dict[str, Any]]]:
        """The nearest judged RCPs below and above ``batch`` (what the package checker interpolates between)."""
        return self.checker._find_top_min_rcp(batch, PRUNED), self.checker._find_bottom_max_rcp(batch, PRUNED)

    def smallest(self) -> Dict[str, Any]:
        """The smallest judged RCP (what the package checker compares a smaller batch with)."""
        return self.checker._find_min_rcp(PRUNED)


def rcp_table(ruleset: str) -> RCPTable:
    from mlperf_logging.rcp_checker.rcp_checker import RCP_Checker

    with captured():
        checker = RCP_Checker(USAGE, ruleset, rules.BENCHMARK, verbose=False)
    return RCPTable(ruleset, checker)
