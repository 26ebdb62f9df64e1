#!/usr/bin/env python
"""Judge a training recipe with the MLPerf rules: the entry point of maskrcnn_benchmark/cli/check_recipe.py."""
import sys

from maskrcnn_benchmark.cli.check_recipe import main

if __name__ == "__main__":
    sys.exit(main())
