"""A pilot trial's measured times, turned into the Slurm time budget of the timed runs.

    python -m mlperf_review.pilot RESULT_FILE

prints ``pilot: time to train T min, init I min: set DGXRUNMINUTES=... DGXINITMINUTES=...`` from the log's
``init_start``, ``run_start`` and ``run_stop`` (10 % margin on the training time, 20 % + 1 min on the init; the
Slurm scripts add their own 25 % to a trial's limit). Only the standard library: it runs on a batch host's
system Python (``slurm/run_experiments.sh`` calls it after ``PILOT=1``).
"""
import math
import sys

from .parse import parse_log


def advice(path):
    log = parse_log(path)
    first = {}
    for ev in log.events:
        first.setdefault(ev.key, ev.time_ms)
    if "run_start" not in first or "run_stop" not in first:
        return "pilot: the log has no run_start/run_stop: no time to train measured"
    run = (first["run_stop"] - first["run_start"]) / 60000.0
    init = (first["run_start"] - first.get("init_start", first["run_start"])) / 60000.0
    return (f"pilot: time to train {run:.1f} min, init {init:.1f} min: set DGXRUNMINUTES={math.ceil(run * 1.1)} "
            f"DGXINITMINUTES={math.ceil(init * 1.2) + 1} (site file or environment) for the timed runs")


if __name__ == "__main__":
    print(advice(sys.argv[1]))
