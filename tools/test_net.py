#!/usr/bin/env python
"""Evaluate weights on DATASETS.TEST: the entry point of maskrcnn_benchmark/cli/test_net.py."""
import sys

from maskrcnn_benchmark.cli.test_net import main

if __name__ == "__main__":
    sys.exit(main())
