#!/usr/bin/env python3
"""Write the deterministic synthetic COCO-format dataset: the entry point of
maskrcnn_benchmark/cli/make_synthetic_coco.py (the generator is maskrcnn_benchmark/synthetic/)."""
import sys

from maskrcnn_benchmark.cli.make_synthetic_coco import main

if __name__ == "__main__":
    sys.exit(main(prog="make_synthetic_coco.py"))
