import sys

from mlperf_review.cli import main

sys.exit(main())
