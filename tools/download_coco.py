#!/usr/bin/env python3
"""Download, verify (md5) and unpack COCO 2017: the entry point of maskrcnn_benchmark/cli/download_coco.py."""
import sys

from maskrcnn_benchmark.cli.download_coco import main

if __name__ == "__main__":
    sys.exit(main())
