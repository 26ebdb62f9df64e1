#!/usr/bin/env python3
"""Write the deterministic synthetic COCO-format dataset (COCO 2017 layout) — see maskrcnn_benchmark/data/synthetic.py.

    python tools/make_synthetic_coco.py --out datasets/synthetic [--train 600] [--val 100] [--seed 0]
        [--size 128x128 | --sizes 128x128,160x128 | --min-size 96 --max-size 160] [--force] [--quiet]
"""

import os
import sys

try:
    from maskrcnn_benchmark.data.synthetic import main
except ImportError:  # run from a checkout without the package installed
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from maskrcnn_benchmark.data.synthetic import main

if __name__ == "__main__":
    sys.exit(main(prog="make_synthetic_coco.py"))
