"""A pilot trial's measured times, turned into the Slurm time budget of the timed runs.

    python -m mlperf_review.pilot RESULT_FILE

prints ``pilot: time to train T min, init I min: set DGXRUNMINUTES=... DGXINITMINUTES=...`` from the log's
``init_start``, ``run_start`` and ``run_stop`` (10 % margin on the training time, 20 % + 1 min on the init; the
Slurm scripts add their own 25 % to a trial's limit). The run is timed as result_summarizer times it (the last
``run_start`` before the first ``run_stop``: every rank may write one); a pilot that did not converge says so (its
time is the time it ran, not a time to train). A log it cannot time is one line naming it on stderr, exit 1. Only
the standard library: it runs on a batch host's system Python (``slurm/run_experiments.sh`` calls it after
``PILOT=1``).
"""
import argparse
import math
import sys

from .official import summarizer_start_stop
from .parse import parse_log


class PilotError(Exception):
    pass


def advice(path):
    log = parse_log(path)
    start, stop = summarizer_start_stop(log.events)
    if start is None or stop is None:
        unreadable = [i.message for i in log.issues if i.kind == "unreadable"]
        why = unreadable[0] if unreadable else "it has no run_start and run_stop records"
        raise PilotError(f"pilot: cannot time '{path}': {why}")
    init_starts = [e.time_ms for e in log.events if e.key == "init_start" and e.time_ms <= start.time_ms]
    run = (stop.time_ms - start.time_ms) / 60000.0
    init = (start.time_ms - min(init_starts, default=start.time_ms)) / 60000.0
    status = stop.metadata.get("status")
    caveat = "" if status == "success" else (
        f" (the pilot did not converge (run_stop status '{status}'): its time is the time it ran, not a time to "
        "train)")
    return (f"pilot: time to train {run:.1f} min, init {init:.1f} min: set DGXRUNMINUTES={math.ceil(run * 1.1)} "
            f"DGXINITMINUTES={math.ceil(init * 1.2) + 1} (site file or environment) for the timed runs{caveat}")


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m mlperf_review.pilot",
                                description="the Slurm time budget of the timed runs, from a pilot trial's log")
    p.add_argument("log", help="the pilot's result file (result_0.txt)")
    args = p.parse_args(argv)
    try:
        print(advice(args.log))
    except PilotError as e:
        print(e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
