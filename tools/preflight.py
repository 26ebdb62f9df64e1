#!/usr/bin/env python
"""Check what would end a run before it starts: the entry point of maskrcnn_benchmark/cli/preflight.py."""
import sys

from maskrcnn_benchmark.cli.preflight import main

if __name__ == "__main__":
    sys.exit(main())
