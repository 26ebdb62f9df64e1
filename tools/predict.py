#!/usr/bin/env python
"""Draw a model's detections on one image: the entry point of maskrcnn_benchmark/cli/predict.py."""
import sys

from maskrcnn_benchmark.cli.predict import main

if __name__ == "__main__":
    sys.exit(main())
