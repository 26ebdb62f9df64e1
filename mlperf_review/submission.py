"""The MLPerf submission folder, built from a results folder and checked with the official tools on that folder.

    python -m mlperf_review submission RESULTS_DIR --out SUBMISSION_DIR [--org ORG] [--system NAME]
        [--system-json FILE] [--ruleset R]

builds what mlcommons' training_results repositories hold for one submitter (and what mlperf-logging's package
checker reads)::

    SUBMISSION_DIR/<org>/results/<system>/maskrcnn/result_0.txt ... result_4.txt   the five runs, renumbered
    SUBMISSION_DIR/<org>/systems/<system>.json                                    the system description
    SUBMISSION_DIR/<org>/benchmarks/maskrcnn/implementations/<implementation>/    the code that ran (git files)

then runs the package checker (compliance of each run, the system description, seeds, RCPs) and the result
summarizer (the olympic score) on this system's part of ``SUBMISSION_DIR/<org>`` (a copy holding only its results
and description: the folder may hold the submitter's other systems), under the round the logs are dated in unless
``--ruleset`` says, and writes the review (Markdown, JSON, PNG) to ``SUBMISSION_DIR/review/<system>/``, outside the
submitter's folder so that it holds nothing the checker does not know.

The system description starts from :data:`TEMPLATE` (every field the system-description checker requires), with
what the run knows filled in (submitter, division, status, system name, nodes, accelerators per node from the
platform name of NVIDIA's systems), then the fields of ``--system-json`` (the site's own file: processors, memory,
interconnect, the framework ...).
Fields still holding :data:`TO_FILL` are listed at the end: the checker accepts the file, a reviewer will not.

The submitter is ``--org``, else ``MLPERF_SUBMISSION_ORG`` (the variable the trainer logs as ``submission_org``
and the RESULT line prints); every run must have logged that same submitter, platform, division and status, and
``--system-json`` may add to what the runs say, not contradict it. Nothing is written before the inputs are
checked; building the same runs again checks them again (their files as they were), other runs into a system's
results folder are refused.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from maskrcnn_benchmark.utils.fileio import write_text

from . import official, rules
from .parse import find_result_files, parse_log
from .summary import summarize

TO_FILL = "TO FILL"
IMPLEMENTATION = "pytorch-maskrcnn_benchmark"

# The fields of mlperf-logging's system_desc_checker (training), in its order, with what a DGX H100 node would
# hold where the value is a property of the run, and TO_FILL where only the site knows it.
TEMPLATE: Dict[str, str] = {
    "submitter": TO_FILL,
    "division": "closed",
    "status": "onprem",
    "system_name": TO_FILL,
    "number_of_nodes": TO_FILL,
    "host_processors_per_node": TO_FILL,
    "host_processor_model_name": TO_FILL,
    "host_processor_core_count": TO_FILL,
    "host_processor_vcpu_count": TO_FILL,
    "host_processor_frequency": TO_FILL,
    "host_processor_caches": TO_FILL,
    "host_processor_interconnect": TO_FILL,
    "host_memory_capacity": TO_FILL,
    "host_storage_type": TO_FILL,
    "host_storage_capacity": TO_FILL,
    "host_networking": TO_FILL,
    "host_networking_topology": TO_FILL,
    "host_memory_configuration": TO_FILL,
    "accelerators_per_node": TO_FILL,
    "accelerator_model_name": TO_FILL,
    "accelerator_host_interconnect": TO_FILL,
    "accelerator_frequency": TO_FILL,
    "accelerator_on-chip_memories": TO_FILL,
    "accelerator_memory_configuration": TO_FILL,
    "accelerator_memory_capacity": TO_FILL,
    "accelerator_interconnect": TO_FILL,
    "accelerator_interconnect_topology": TO_FILL,
    "cooling": TO_FILL,
    "hw_notes": "",
    "framework": TO_FILL,
    "other_software_stack": TO_FILL,
    "operating_system": TO_FILL,
    "sw_notes": "",
}


class SubmissionError(Exception):
    """Bad input for the assembly; the message names the file, run or value."""


@dataclass
class Assembly:
    org_dir: Path
    system: str
    results: List[Path]
    system_json: Path
    implementation: Path
    to_fill: List[str]
    package: official.PackageCheck
    summarizer: official.SummarizerResult
    review_dir: Optional[Path] = None
    warnings: List[str] = field(default_factory=list)
    other_systems: List[str] = field(default_factory=list)  # the folder's other systems (not judged here)

    @property
    def passed(self) -> bool:
        """The package checker accepts it and the result summarizer scores it (a folder without a score cannot
        be published)."""
        return self.package.passed is True and self.summarizer.score_min is not None


# NVIDIA's systems by name (DGXH100 as config_DGXH100.sh names it, "NVIDIA DGX A100" as its v0.7 logs do): host
# CPU sockets and GPUs per node, from NVIDIA's published specifications. Any other name: the site's to say.
_SYSTEMS = ((r"DGX[\s_-]*STATION", "1", "4"),        # DGX Station (V100, A100): 1 CPU, 4 GPUs
            (r"DGX[\s_-]*2H?(?![\w])", "2", "16"),    # DGX-2, DGX-2H
            (r"DGX[\s_-]*1(?![\w])", "2", "8"),       # DGX-1
            (r"DGX[\s_-]*[ABH]\d00(?![\w])", "2", "8"))  # DGX A100, H100, H200, B200


def _known_from_platform(platform: str) -> Dict[str, str]:
    """What a platform name says: ``4xDGXH100`` -> 4 nodes, and for NVIDIA's systems known by name (:data:`_SYSTEMS`)
    the CPU sockets and GPUs of a node."""
    m = re.match(r"\s*(\d+)\s*x\s*(.*)", platform or "")
    known = {"number_of_nodes": m.group(1)} if m else {}
    name = (m.group(2) if m else platform or "").upper()
    for pattern, cpus, gpus in _SYSTEMS:
        if re.search(r"(^|[\s_-])" + pattern, name):
            known.update(host_processors_per_node=cpus, accelerators_per_node=gpus)
            break
    return known


def _repo_root() -> Optional[Path]:
    root = Path(__file__).resolve().parents[1]
    return root if (root / "run_and_time.sh").exists() else None


def uncommitted(repo: Optional[Path] = None) -> List[str]:
    """The checkout's tracked files with changes not committed (the implementation folder copies them as they are
    now, which may not be what the runs ran)."""
    repo = repo or _repo_root()
    if repo is None:
        return []
    try:
        out = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                             capture_output=True, check=True, timeout=60, text=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line[3:] for line in out.splitlines() if line.strip()]


def copy_implementation(dest: Path, repo: Optional[Path] = None) -> Path:
    """The code that produced the runs: the checkout's git-tracked files (else its package folders)."""
    repo = repo or _repo_root()
    if repo is None:
        raise SubmissionError("cannot find the checkout to copy as the implementation (use --no-implementation)")
    dest.mkdir(parents=True, exist_ok=True)
    try:
        files = subprocess.run(["git", "-C", str(repo), "ls-files", "-z"], capture_output=True, check=True,
                               timeout=60).stdout.decode().split("\0")
    except (OSError, subprocess.SubprocessError):
        files = [str(p.relative_to(repo)) for d in ("maskrcnn_benchmark", "mlperf_review", "tools", "slurm",
                                                    "singularity", "configs") for p in (repo / d).rglob("*")
                 if p.is_file() and "__pycache__" not in p.parts]
        files += [p.name for p in repo.iterdir() if p.is_file() and p.suffix in (".py", ".sh", ".md", ".txt",
                                                                                  ".toml")]
    for rel in filter(None, files):
        src = repo / rel
        if src.is_file() and not rel.endswith(".sif"):
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


def _stage_results(files, bench):
    """The result files copied to ``bench/result_<i>.txt`` (gzipped ones unpacked), all or none: they are written
    into a temporary folder beside it, renamed into place at the end. A file that cannot be read (a truncated
    ``.gz``) is one SubmissionError naming it, and leaves nothing that the next attempt would refuse."""
    import gzip
    import tempfile

    bench.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{bench.name}.tmp-", dir=bench.parent))
    umask = os.umask(0)
    os.umask(umask)
    tmp.chmod(0o777 & ~umask)  # mkdtemp's 0700 would be the results folder's: as a folder made with mkdir
    try:
        for i, src in enumerate(files):
            dest = tmp / f"result_{i}.txt"
            try:
                if src.name.endswith(".gz"):
                    with gzip.open(src, "rb") as fin, open(dest, "wb") as fout:
                        shutil.copyfileobj(fin, fout)
                else:
                    shutil.copyfile(src, dest)  # the contents; the mode is the umask's (a private LOGDIR's 0600 is not)
            except (OSError, EOFError, zlib.error) as e:  # gzip.BadGzipFile is an OSError; a truncated .gz an
                # EOFError; a corrupted deflate stream a zlib.error
                raise SubmissionError(f"cannot copy the result file {src}: {e}") from None
        if bench.exists():
            bench.rmdir()  # empty (checked by the caller): the staged folder takes its place
        os.replace(tmp, bench)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return [bench / f"result_{i}.txt" for i in range(len(files))]


def assemble(results_dir, out, org: Optional[str] = None, system: Optional[str] = None,
             system_json: Optional[str] = None, ruleset: Optional[str] = None, implementation: str = IMPLEMENTATION,
             copy_code: bool = True, write_review: bool = True) -> Assembly:
    results_dir, out = Path(results_dir), Path(out)
    given_ruleset = ruleset
    if not results_dir.is_dir():
        raise SubmissionError(f"results folder not found: {results_dir}")
    if not official.available():  # before anything is written: the folder is judged by its checkers
        raise SubmissionError("mlperf-logging is not installed or incomplete (pip install mlperf-logging): the "
                              "submission is checked with its package checker and result summarizer")
    if ruleset is not None and ruleset not in rules.SUPPORTED_RULESETS:
        raise SubmissionError(f"ruleset {ruleset} is not a Mask R-CNN ruleset ({', '.join(rules.SUPPORTED_RULESETS)})")
    files, _ = find_result_files(results_dir)
    if not files:
        raise SubmissionError(f"no result_*.txt in {results_dir}")
    logs = [parse_log(p) for p in files]
    unreadable = [str(i) for log in logs for i in log.issues if i.kind == "unreadable"]
    if unreadable:  # a damaged file: its name, not what the runs it hides would have said ("no submitter")
        raise SubmissionError(f"cannot read the result file {unreadable[0]}")
    runs = [summarize(log) for log in logs]
    dated = sorted({r.ruleset for r in runs if r.n_events and r.ruleset})  # the rounds the logs are dated in
    round_warning = None
    if ruleset is None:  # as a plain review: the round most logs are dated in (the newest where none is)
        from .core import majority

        ruleset = majority([r.ruleset for r in runs if r.n_events]) or official.NEWEST_RULESET
        if len(dated) > 1:
            round_warning = ("the runs are dated for different rounds (" + ", ".join(
                f"{r.name}: {r.ruleset}" for r in runs if r.n_events) + f"): all are checked against {ruleset}, "
                "the round most are dated in")
    elif dated and dated != [ruleset]:
        round_warning = (f"the runs are dated for training {', '.join(dated)}: checked under {ruleset} as asked "
                         "(without --ruleset, the logs' round)")
    org = org or os.environ.get("MLPERF_SUBMISSION_ORG", "").strip()
    # the runs that logged anything say who and what: a killed run's empty file says nothing, and is the
    # checker's to judge (it accepts one failed run of five)
    logging_runs = [r for r in runs if r.n_events] or runs
    logged_orgs = {r.org for r in logging_runs}
    if not org:
        if len(logged_orgs) != 1 or None in logged_orgs:
            raise SubmissionError("no submitter: pass --org or set MLPERF_SUBMISSION_ORG")
        org = next(iter(logged_orgs))
    wrong = [f"{r.name} says '{r.org}'" for r in logging_runs if r.org != org]
    if wrong:
        raise SubmissionError(f"the runs were not logged by submitter '{org}' ({'; '.join(wrong)}): set "
                              "MLPERF_SUBMISSION_ORG for the runs, or --org to what they logged")
    platforms = {r.platform for r in logging_runs}
    if len(platforms) != 1 or None in platforms:
        raise SubmissionError("the runs log different (or no) submission_platform: " +
                              ", ".join(f"{r.name}={r.platform}" for r in logging_runs))
    platform = next(iter(platforms))
    for key, what in (("division", "submission_division"), ("submission_status", "submission_status")):
        values = {getattr(r, key) for r in runs if getattr(r, key)}
        if len(values) > 1:  # one submission is one division and one status
            raise SubmissionError(f"the runs log different {what}: " +
                                  ", ".join(f"{r.name}={getattr(r, key)}" for r in runs))
    system = official.safe_name(system or platform, "unknown_system")
    org_name = official.safe_name(org, "unknown_org")
    org_dir = out / org_name

    # the system description, before anything is written: what the runs say, then the site's file, which may add
    # to it but not contradict it (an 'open' division would turn the checker's seed and RCP checks off)
    desc = dict(TEMPLATE)
    division = next(iter({r.division for r in runs if r.division} or {"closed"}))
    status = next(iter({r.submission_status for r in runs if r.submission_status} or {"onprem"}))
    logged = dict(submitter=org, division=division, status=status, system_name=system)
    desc.update(logged)
    desc.update(_known_from_platform(platform))
    if system_json:
        try:
            site = json.loads(Path(system_json).read_text())
        except (OSError, ValueError) as e:
            raise SubmissionError(f"cannot read the system description '{system_json}': {e}") from None
        if not isinstance(site, dict):
            raise SubmissionError(f"the system description '{system_json}' is not a JSON object of fields "
                                  f"(it holds a {type(site).__name__})")
        # the system-description checker joins the text values: numbers are written as text; lists and objects
        # (NVIDIA's other_software_stack) stay JSON, which it leaves alone; nothing else is a value
        odd = [f"{k} ({type(v).__name__})" for k, v in site.items()
               if not isinstance(v, (str, int, float, list, dict)) or isinstance(v, bool)]
        if odd:
            raise SubmissionError(f"the system description '{system_json}' has fields that are neither text, a "
                                  f"number, a list nor an object: {', '.join(odd)}")
        site = {k: v if isinstance(v, (str, list, dict)) else str(v) for k, v in site.items()}
        if site.get("system_name") == platform:  # as the runs log it (the folder's name is its safe form)
            site["system_name"] = system
        clash = [f"{k} '{site[k]}' (the runs: '{v}')" for k, v in logged.items() if k in site and site[k] != v]
        if clash:
            raise SubmissionError(f"the system description '{system_json}' contradicts the runs: "
                                  f"{'; '.join(clash)}; leave these fields out (the runs' logs set them)")
        desc.update(site)

    bench = org_dir / "results" / system / rules.BENCHMARK
    if bench.exists() and any(bench.iterdir()):
        if not _holds_these_runs(bench, files):
            raise SubmissionError(f"{bench} already holds other files: a submission folder is never overwritten "
                                  "(another --out, or remove it)")
        staged = [bench / f"result_{i}.txt" for i in range(len(files))]  # the same runs: checked again
    else:
        staged = _stage_results(files, bench)
    (org_dir / "systems").mkdir(parents=True, exist_ok=True)
    desc_path = org_dir / "systems" / f"{system}.json"
    write_text(desc_path, json.dumps(desc, indent=4) + "\n", what="system description")
    impl = org_dir / "benchmarks" / rules.BENCHMARK / "implementations" / implementation
    changed = []
    if copy_code:
        copy_implementation(impl)
        changed = uncommitted()

    # this system's verdict and score: on the whole folder they were the folder's (another system's failure) and
    # the summarizer's first row (another system's score)
    with official.one_system(org_dir, system) as pkg:
        package = official.run_package_checker(pkg, ruleset)
        summarizer = official.run_result_summarizer(pkg, ruleset)
    to_fill = [k for k, v in desc.items() if v == TO_FILL]
    others = sorted(p.name for p in (org_dir / "results").iterdir() if p.is_dir() and p.name != system)
    assembly = Assembly(org_dir=org_dir, system=system, results=staged, system_json=desc_path, implementation=impl,
                        to_fill=to_fill, package=package, summarizer=summarizer, other_systems=others)
    if round_warning:
        assembly.warnings.append(round_warning)
    if changed:
        assembly.warnings.append(f"the implementation folder is the checkout as it is now, with uncommitted changes "
                                 f"in {len(changed)} tracked file(s) ({', '.join(changed[:5])}"
                                 f"{', ...' if len(changed) > 5 else ''}): commit the code the runs ran")
    if len(files) != 5:
        assembly.warnings.append(f"{len(files)} result files: a Mask R-CNN submission has exactly 5")
    if write_review:
        from .core import review_folder
        from .report import write_review_outputs

        assembly.review_dir = out / "review" / system
        review = review_folder(bench, ruleset=given_ruleset)  # the round as the review finds it, unless given
        write_review_outputs(review, assembly.review_dir)
    return assembly


def _holds_these_runs(bench: Path, files) -> bool:
    """``bench`` holds exactly ``result_0..n-1.txt`` with the contents of ``files`` (``.gz`` ones unpacked), and
    nothing else but the package checker's ``scaling.json``."""
    import gzip

    names = {p.name for p in bench.iterdir()} - {"scaling.json"}
    if names != {f"result_{i}.txt" for i in range(len(files))}:
        return False
    for i, src in enumerate(files):
        try:
            data = gzip.open(src, "rb").read() if src.name.endswith(".gz") else src.read_bytes()
        except (OSError, EOFError):
            return False
        if (bench / f"result_{i}.txt").read_bytes() != data:
            return False
    return True


# the system description's counts the result summarizer reads as numbers
COUNTS = ("number_of_nodes", "host_processors_per_node", "accelerators_per_node")


def render(a: Assembly) -> str:
    lines = [f"submission folder: {a.org_dir}",
             f"  results:        {a.results[0].parent} ({len(a.results)} runs)",
             f"  system:         {a.system_json}",
             f"  implementation: {a.implementation}"]
    verdict = "PASS" if a.package.passed is True else "FAIL"
    where = f"on {a.system} alone; the folder also holds {', '.join(a.other_systems)}" if a.other_systems \
        else "on this folder"
    lines.append(f"package checker ({a.package.ruleset}, {where}): {verdict}")
    for e in a.package.errors[:10]:
        lines.append(f"  - {e.strip()}")
    if a.summarizer.crash:
        counts = [k for k in COUNTS if k in a.to_fill]  # a crash with the counts filled in is not theirs
        lines.append(f"result summarizer: no score ({a.summarizer.crash})" + (
            f": it reads {', '.join(counts)} as numbers (--system-json)" if counts else ""))
    if a.summarizer.score_min is not None:
        lines.append(f"result summarizer score: {a.summarizer.score_min:.2f} min"
                     + (f" (RCP scaling {a.summarizer.scaling_factor:g})" if a.summarizer.scaling_factor else ""))
    for w in a.warnings:
        lines.append(f"warning: {w}")
    if a.to_fill:
        lines.append(f"system description: {len(a.to_fill)} field(s) still '{TO_FILL}' (the checker accepts them, "
                     f"a reviewer does not): {', '.join(a.to_fill)}; pass --system-json with your values")
    if a.review_dir:
        lines.append(f"review: {a.review_dir}")
    return "\n".join(lines)
