"""Review of MLPerf Training Mask R-CNN result logs: ``python -m mlperf_review RESULTS_DIR`` (also
``python -m maskrcnn_benchmark.review``, ``tools/review_logs.py``).

A package of its own beside ``maskrcnn_benchmark``: it reads logs only, imports no torch and nothing of the
trainer (the one exception is the standard-library file writer :mod:`maskrcnn_benchmark.utils.fileio`). The verdict and the score are mlperf-logging's own (package checker, RCP
checker, result summarizer, run by :mod:`.official` on a staged copy of the folder); the review explains them,
draws the curves (matplotlib) and compares folders.
"""

from .core import Review, ReviewError, review_folder
from .parse import parse_log
from .score import explain
from .summary import summarize

__all__ = ["Review", "ReviewError", "review_folder", "parse_log", "explain", "summarize", "main"]


def main(argv=None) -> int:
    from .cli import main as _main
    return _main(argv)
