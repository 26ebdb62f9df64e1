#!/usr/bin/env python
"""Review MLPerf Mask R-CNN result files (``tools/review_logs.py RESULTS_DIR [--ruleset R] [--compare OTHER]``):
the entry point of mlperf_review/cli.py (see docs/review.md)."""
import sys

from mlperf_review.cli import main

if __name__ == "__main__":
    sys.exit(main())
