#!/usr/bin/env python
"""MLPerf Mask R-CNN training (NVIDIA v0.7 command line). See maskrcnn_benchmark/engine/train_mlperf.py."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from maskrcnn_benchmark.engine.train_mlperf import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
