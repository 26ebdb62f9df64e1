#!/usr/bin/env python
"""Entry point; see maskrcnn_benchmark/engine/test_net.py."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from maskrcnn_benchmark.engine.test_net import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
