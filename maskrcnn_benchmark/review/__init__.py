"""Review of MLPerf Training Mask R-CNN result logs (``python -m maskrcnn_benchmark.review RESULTS_DIR``).

Reads logs only: no torch, no model. The checks themselves are mlperf_logging's (compliance checker, RCP checker,
seed checker, result_summarizer scoring); matplotlib draws the curves.
"""

from .core import Review, ReviewError, review_folder
from .parse import parse_log
from .score import olympic_score
from .summary import summarize

__all__ = ["Review", "ReviewError", "review_folder", "parse_log", "olympic_score", "summarize", "main"]


def main(argv=None) -> int:
    from .cli import main as _main
    return _main(argv)
