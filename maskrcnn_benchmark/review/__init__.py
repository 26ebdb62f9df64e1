"""``python -m maskrcnn_benchmark.review``: the log reviewer under its former name. It lives in the top-level,
torch-free package :mod:`mlperf_review`."""
from mlperf_review import *  # noqa: F401,F403
from mlperf_review import __all__, main  # noqa: F401
