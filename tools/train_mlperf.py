#!/usr/bin/env python
"""MLPerf Mask R-CNN training (NVIDIA v0.7 command line): the entry point of maskrcnn_benchmark/cli/train_mlperf.py."""
import sys

from maskrcnn_benchmark.cli.train_mlperf import main

if __name__ == "__main__":
    sys.exit(main())
