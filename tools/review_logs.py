#!/usr/bin/env python
"""Review MLPerf Mask R-CNN result files: ``tools/review_logs.py RESULTS_DIR [--ruleset R] [--compare OTHER_DIR]``.

Thin entry point for ``python -m maskrcnn_benchmark.review``: mlperf-logging's package checker verdict and result
summarizer score for the folder, explained (see docs/review.md).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from maskrcnn_benchmark.review.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
