#!/usr/bin/env python
"""``make gpu-check``: the entry point of maskrcnn_benchmark/cli/gpu_check.py."""
import sys

from maskrcnn_benchmark.cli.gpu_check import main

if __name__ == "__main__":
    sys.exit(main())
