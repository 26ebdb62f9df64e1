"""Command line: ``python -m mlperf_review RESULTS_DIR [--compare OTHER_DIR]`` (review a results folder) and
``python -m mlperf_review submission RESULTS_DIR --out DIR`` (build the submission folder and check it)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import List, Optional

from . import rules

EXIT_OK = 0        # mlperf-logging's package checker accepts the folder
EXIT_PROBLEMS = 1  # the package checker rejects it (the reasons are printed); submission: or no score
EXIT_BAD_INPUT = 2 # bad command line, missing folder, no result files, outputs not writable


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m mlperf_review",
        description="Review a folder of MLPerf Training Mask R-CNN result files (result_*.txt, also .gz) with "
                    "mlperf-logging's package checker, RCP checker and result summarizer, and explain what they "
                    "say: per-run facts, failure reasons, score, curves.")
    p.add_argument("results_dir", help="folder with the result files of one system (5 runs for maskrcnn)")
    p.add_argument("--ruleset", choices=rules.SUPPORTED_RULESETS, default=None,
                   help="MLPerf training ruleset to check against (default: the round the logs are dated in; "
                        "the newest ruleset is checked too and reported)")
    p.add_argument("--compare", metavar="OTHER_DIR", default=None,
                   help="also review OTHER_DIR and print a side-by-side table (e.g. a published submission)")
    p.add_argument("--out", metavar="DIR", default=None,
                   help="where to write mlperf_review.{md,json,png} (default: RESULTS_DIR_review beside the folder, "
                        "so that the results folder holds result files only)")
    p.add_argument("--no-plot", action="store_true", help="do not draw the PNG")
    p.add_argument("--no-write", action="store_true", help="print only; write no files")
    p.add_argument("--json", action="store_true", help="print the JSON review instead of the table")
    p.add_argument("--max-errors", type=int, default=3, metavar="N",
                   help="compliance errors / log problems shown per log (default 3)")
    return p


def _fail(msg: str) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return EXIT_BAD_INPUT


def build_submission_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m mlperf_review submission",
        description="Build the MLPerf submission folder (<org>/results/<system>/maskrcnn/result_*.txt, "
                    "<org>/systems/<system>.json, <org>/benchmarks/maskrcnn/implementations/...) from a results "
                    "folder and run mlperf-logging's package checker and result summarizer on it.")
    p.add_argument("results_dir", help="folder with the 5 result files (result_*.txt) of one system")
    p.add_argument("--out", required=True, metavar="DIR", help="the submission folder to create (never overwritten)")
    p.add_argument("--org", default=None, help="submitter (default: MLPERF_SUBMISSION_ORG, else the logs')")
    p.add_argument("--system", default=None, help="system name (default: the logs' submission_platform)")
    p.add_argument("--system-json", default=None, metavar="FILE",
                   help="your values for the system description fields (JSON), over the template")
    p.add_argument("--ruleset", choices=rules.SUPPORTED_RULESETS, default=None,
                   help="MLPerf training ruleset to check against (default: the round the logs are dated in)")
    p.add_argument("--no-implementation", action="store_true", help="do not copy the code")
    return p


def submission_main(argv: List[str]) -> int:
    from .submission import SubmissionError, assemble, render

    args = build_submission_parser().parse_args(argv)
    try:
        a = assemble(args.results_dir, args.out, org=args.org, system=args.system, system_json=args.system_json,
                     ruleset=args.ruleset, copy_code=not args.no_implementation)
    except SubmissionError as exc:
        return _fail(str(exc))
    except OSError as exc:  # --out under a file, a full disk: one line naming the path
        return _fail(f"cannot write the submission under {args.out}: "
                     f"{exc.filename + ': ' if exc.filename else ''}{exc.strerror or exc}")
    print(render(a))
    return EXIT_OK if a.passed else EXIT_PROBLEMS


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["submission"]:
        return submission_main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return _run(args)
    except KeyboardInterrupt:
        return _fail("interrupted")
    except Exception as exc:  # noqa: BLE001 - one line, not a traceback (MLPERF_REVIEW_DEBUG=1 re-raises)
        if os.environ.get("MLPERF_REVIEW_DEBUG"):
            raise
        return _fail(f"unexpected {type(exc).__name__} while reviewing: {exc} (MLPERF_REVIEW_DEBUG=1 shows the "
                     "traceback)")


def _run(args) -> int:
    from .core import ReviewError, review_folder
    from . import report

    try:
        review = review_folder(args.results_dir, ruleset=args.ruleset, max_errors=max(args.max_errors, 10))
        other = review_folder(args.compare, ruleset=args.ruleset, max_errors=max(args.max_errors, 10)) \
            if args.compare else None
    except ReviewError as exc:
        return _fail(str(exc))

    write_error = None
    if not args.no_write:
        folder = Path(args.results_dir).resolve()
        out = Path(args.out) if args.out else folder.parent / f"{folder.name}_review"
        try:
            report.write_review_outputs(review, out, plot=not args.no_plot, max_errors=args.max_errors)
            if other is not None:
                review.outputs.update(report.write_compare_outputs(review, other, out))
        except OSError as exc:
            review.outputs = {}
            write_error = (f"cannot write the review files to {out}: {exc.strerror or exc} "
                           "(use --out DIR or --no-write)")

    if args.json:
        data = review.to_dict()
        if other is not None:
            data = {"review": data, "compare": {"a": report.compare_metrics(review),
                                                 "b": report.compare_metrics(other)}}
        sys.stdout.write(report.to_json(data))
    else:
        print(report.render_text(review, max_errors=args.max_errors))
        if other is not None:
            print()
            print(report.render_compare(review, other))
    if write_error:
        return _fail(write_error)
    return EXIT_OK if review.verdict == "PASS" else EXIT_PROBLEMS
