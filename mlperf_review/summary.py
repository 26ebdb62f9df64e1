"""Per-run facts derived from a parsed log: status, time to train, epochs, AP, hyperparameters, throughput."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from . import rules
from .official import ComplianceResult, summarizer_start_stop
from .parse import Issue, ParsedLog, TrainPoint

# Run statuses
CONVERGED = "converged"
NOT_CONVERGED = "not converged"
INCOMPLETE = "incomplete"
WRONG_BENCHMARK = "wrong benchmark"
INVALID = "invalid"


@dataclass
class EvalPoint:
    epoch: Optional[float]
    bbox: Optional[float]
    segm: Optional[float]
    minutes: Optional[float]  # since run_start
    lineno: int

    @property
    def meets_target(self) -> bool:
        return rules.meets_target(self.bbox, self.segm)


@dataclass
class RunSummary:
    name: str
    path: str
    benchmark: Optional[str] = None
    division: Optional[str] = None
    org: Optional[str] = None
    platform: Optional[str] = None
    submission_status: Optional[str] = None
    ruleset: Optional[str] = None
    ruleset_reason: str = ""
    status: str = INVALID
    status_detail: str = ""
    run_stop_status: Optional[str] = None
    target_reached: bool = False
    ttt_min: Optional[float] = None
    init_min: Optional[float] = None
    first_epoch: Optional[float] = None         # of the first block_start (epoch_start): > 1 in a resumed run
    resumed_from: Optional[float] = None        # run_start's resumed_from_iteration (the trainer's --resume)
    epochs: Optional[float] = None              # epoch of the last eval_accuracy before run_stop
    first_target_epoch: Optional[float] = None  # first eval meeting both targets
    final_bbox: Optional[float] = None
    final_segm: Optional[float] = None
    gbs: Optional[Any] = None
    seeds: List[Any] = field(default_factory=list)
    cache_clear: List[Any] = field(default_factory=list)  # the values of the cache_clear records
    hparams: Dict[str, Any] = field(default_factory=dict)
    throughput_ips: Optional[float] = None
    throughput_source: str = ""
    evals: List[EvalPoint] = field(default_factory=list)
    epoch_seconds: List[List[float]] = field(default_factory=list)   # [epoch, seconds]
    tracked_throughput: List[List[float]] = field(default_factory=list)  # [minutes since run_start, images/s]
    train_points: List[TrainPoint] = field(default_factory=list)
    compliance: Optional[ComplianceResult] = None
    newest_compliance: Optional[ComplianceResult] = None  # under the newest ruleset, when another is reviewed
    run_start_count: int = 0
    issues: List[Issue] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    n_events: int = 0
    checker_linenos: List[int] = field(default_factory=list)

    @property
    def scored(self) -> bool:
        """Counted by result_summarizer: the compliance checker passes the log and it has run_start/run_stop.
        (The summarizer does not look at run_stop's status; a failing log is dropped and counts as the
        slowest.)"""
        if self.ttt_min is None:
            return False
        return self.compliance is not None and self.compliance.passed is True

    def to_dict(self) -> Dict[str, Any]:
        return {
            "name": self.name, "file": self.path, "benchmark": self.benchmark, "division": self.division,
            "org": self.org, "platform": self.platform, "submission_status": self.submission_status,
            "ruleset": self.ruleset, "ruleset_reason": self.ruleset_reason,
            "status": self.status, "status_detail": self.status_detail, "run_stop_status": self.run_stop_status,
            "target_reached": self.target_reached, "counts_for_score": self.scored,
            "time_to_train_min": self.ttt_min, "init_min": self.init_min,
            "first_epoch": self.first_epoch, "resumed_from_iteration": self.resumed_from,
            "epochs_to_converge": self.epochs, "first_target_epoch": self.first_target_epoch,
            "final_bbox_ap": self.final_bbox, "final_segm_ap": self.final_segm,
            "global_batch_size": self.gbs, "seeds": self.seeds, "hyperparameters": self.hparams,
            "throughput_images_per_s": self.throughput_ips, "throughput_source": self.throughput_source,
            "evals": [{"epoch": e.epoch, "bbox": e.bbox, "segm": e.segm, "minutes": e.minutes,
                       "line": e.lineno} for e in self.evals],
            "epoch_seconds": self.epoch_seconds,
            "compliance": self.compliance.to_dict() if self.compliance else None,
            "newest_ruleset_compliance": self.newest_compliance.to_dict() if self.newest_compliance else None,
            "run_start_records": self.run_start_count,
            "issues": [i.to_dict() for i in self.issues],
            "notes": self.notes,
            "train_points": len(self.train_points),
        }


def _num(x) -> Optional[float]:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x)


def _metadata_num(ev, *names) -> Optional[float]:
    for n in names:
        v = _num(ev.metadata.get(n))
        if v is not None:
            return v
    return None


def summarize(log: ParsedLog) -> RunSummary:
    run = RunSummary(name=log.name, path=str(log.path), issues=list(log.issues), n_events=len(log.events),
                     checker_linenos=list(log.checker_linenos))
    run.train_points = _dedup_train_points(log.train_points)
    if not log.events:
        run.status = INVALID
        run.status_detail = "no ':::MLLOG' lines in the file"
        return run

    def first_value(key):
        ev = log.first(key)
        if ev is None or ev.value is None:
            return None
        if not isinstance(ev.value, str):
            run.notes.append(f"line {ev.lineno}: '{key}' is not a string: {str(ev.value)[:40]}")
            return str(ev.value)
        return ev.value

    run.benchmark = first_value("submission_benchmark")
    run.division = first_value("submission_division")
    run.org = first_value("submission_org")
    run.platform = first_value("submission_platform")
    run.submission_status = first_value("submission_status")
    # the records result_summarizer times the run with (multi-rank logs repeat run_start)
    start_ev, stop_ev = summarizer_start_stop(log.events)
    run.run_start_count = len(log.all("run_start"))
    run.ruleset, run.ruleset_reason = rules.detect_ruleset(start_ev.time_ms if start_ev else log.events[0].time_ms)

    # hyperparameters (first value; differing repeats are noted)
    for key in rules.HPARAM_KEYS:
        evs = log.all(key)
        if not evs:
            continue
        run.hparams[key] = evs[0].value
        distinct = {repr(e.value) for e in evs}
        if len(distinct) > 1:
            run.notes.append(f"'{key}' logged {len(evs)} times with different values: "
                             + ", ".join(sorted(distinct)[:4]))
    run.gbs = run.hparams.get("global_batch_size")
    run.seeds = [e.value for e in log.all("seed")]
    run.cache_clear = [e.value for e in log.all("cache_clear")]

    # init time: first init_start .. init_stop
    init_starts = log.all("init_start")
    init_stop = log.first("init_stop")
    if init_starts and init_stop:
        run.init_min = (init_stop.time_ms - min(e.time_ms for e in init_starts)) / 60000.0

    start_ms = start_ev.time_ms if start_ev else None
    if start_ev and stop_ev:
        run.ttt_min = (stop_ev.time_ms - start_ev.time_ms) / 60000.0
    if stop_ev is not None:
        status = stop_ev.metadata.get("status")
        run.run_stop_status = status if isinstance(status, str) else (None if status is None else str(status))

    if start_ev is not None:
        run.resumed_from = _metadata_num(start_ev, "resumed_from_iteration")
    block = log.first("block_start")
    epoch_start = log.first("epoch_start")
    run.first_epoch = (_metadata_num(block, "first_epoch_num") if block is not None else None) \
        or (_metadata_num(epoch_start, "epoch_num") if epoch_start is not None else None)

    # evaluations, in file order; the epoch to converge is the last one logged before run_stop
    stop_line = stop_ev.lineno if stop_ev else None
    for ev in log.all("eval_accuracy"):
        val = ev.value if isinstance(ev.value, dict) else {}
        bbox = _num(val.get("BBOX"))
        segm = _num(val.get("SEGM"))
        epoch = _metadata_num(ev, "epoch_num", "epoch")
        minutes = (ev.time_ms - start_ms) / 60000.0 if start_ms is not None else None
        run.evals.append(EvalPoint(epoch, bbox, segm, minutes, ev.lineno))
        if not isinstance(ev.value, dict) or bbox is None or segm is None:
            run.notes.append(f"line {ev.lineno}: eval_accuracy value is not {{'BBOX': x, 'SEGM': y}}: "
                             f"{str(ev.value)[:60]}")
    before_stop = [e for e in run.evals if stop_line is None or e.lineno < stop_line]
    if before_stop:
        last = before_stop[-1]
        run.epochs = last.epoch
        run.final_bbox, run.final_segm = last.bbox, last.segm
    elif run.evals:
        last = run.evals[-1]
        run.final_bbox, run.final_segm = last.bbox, last.segm
    hits = [e for e in before_stop if e.meets_target]
    run.target_reached = bool(hits)
    if hits:
        run.first_target_epoch = hits[0].epoch
        if run.epochs is not None and hits[0].epoch is not None and hits[0].epoch != run.epochs:
            run.notes.append(f"target first reached at epoch {hits[0].epoch:g} but the run went on to epoch "
                             f"{run.epochs:g} (the time to train includes the extra epochs)")

    run.epoch_seconds = _epoch_seconds(log)
    run.tracked_throughput = _tracked_throughput(log, start_ms)
    run.throughput_ips, run.throughput_source = _throughput(run, log)

    # status
    if run.benchmark is not None and run.benchmark != rules.BENCHMARK:
        run.status = WRONG_BENCHMARK
        run.status_detail = f"a '{run.benchmark}' log, not {rules.BENCHMARK}"
    elif start_ev is None:
        run.status = INVALID
        run.status_detail = "no run_start"
    elif stop_ev is None:
        run.status = INCOMPLETE
        last_epoch = run.evals[-1].epoch if run.evals else None
        run.status_detail = ("no run_stop: the run crashed, was killed or is still running"
                             + (f" (last eval at epoch {last_epoch:g})" if last_epoch is not None else ""))
    elif stop_ev.time_ms < start_ev.time_ms:
        run.status = INVALID
        run.status_detail = "run_stop is earlier than run_start"
    elif run.run_stop_status == "success" and run.target_reached:
        run.status = CONVERGED
        run.status_detail = f"target reached at epoch {run.first_target_epoch:g}" \
            if run.first_target_epoch is not None else "target reached"
    else:
        run.status = NOT_CONVERGED
        if run.run_stop_status != "success":
            st = "no status" if run.run_stop_status is None else f"status '{run.run_stop_status}'"
            run.status_detail = f"run_stop has {st}"
            if run.target_reached:
                run.status_detail += " although the target was reached"
        else:
            run.status_detail = "run_stop says success but no eval_accuracy reached the target " \
                                f"(BBOX >= {rules.TARGET_BBOX}, SEGM >= {rules.TARGET_SEGM})"
        if run.final_bbox is not None and run.final_segm is not None:
            run.status_detail += f"; last AP {run.final_bbox:.4f}/{run.final_segm:.4f}"
    if run.benchmark is None:
        run.notes.append("no submission_benchmark logged")
    if run.run_start_count > 1 and start_ev is not None:
        run.notes.append(f"run_start logged {run.run_start_count} times (one per rank?); timed from the one on "
                         f"line {start_ev.lineno}, the last before run_stop, as result_summarizer does")
    return run


def _dedup_train_points(points: List[TrainPoint]) -> List[TrainPoint]:
    """Drop a line repeating the previous iteration (the same line printed by several processes)."""
    out: List[TrainPoint] = []
    for p in points:
        if out and out[-1].iteration == p.iteration:
            continue
        out.append(p)
    return out


def _epoch_seconds(log: ParsedLog) -> List[List[float]]:
    starts: Dict[float, float] = {}
    out = []
    for ev in log.events:
        if ev.key == "epoch_start":
            e = _metadata_num(ev, "epoch_num")
            if e is not None and e not in starts:
                starts[e] = ev.time_ms
        elif ev.key == "epoch_stop":
            e = _metadata_num(ev, "epoch_num")
            if e is not None and e in starts:
                out.append([e, (ev.time_ms - starts.pop(e)) / 1000.0])
    return out


def _tracked_throughput(log: ParsedLog, start_ms: Optional[float]) -> List[List[float]]:
    """[minutes since run_start, images/s] of the mllog throughput records.

    NVIDIA logs the same value twice (``tracked_stats`` with a ``step`` that may restart every epoch, and
    ``throughput`` with none): one key is used, and time is the x axis since it always grows.
    """
    for key in ("tracked_stats", "throughput"):
        out = []
        for ev in log.all(key):
            val = _num(ev.value.get("throughput")) if isinstance(ev.value, dict) else _num(ev.value)
            if val is None:
                continue
            t0 = start_ms if start_ms is not None else log.events[0].time_ms
            out.append([(ev.time_ms - t0) / 60000.0, val])
        if out:
            return out
    return []


def _throughput(run: RunSummary, log: ParsedLog):
    if run.tracked_throughput:
        return statistics.median(v for _, v in run.tracked_throughput), "mllog tracked_stats/throughput"
    if log.metric_throughputs:
        return statistics.median(log.metric_throughputs), "'&&&& MLPERF METRIC THROUGHPUT' line"
    printed = [p.ips for p in run.train_points if p.ips is not None]
    if printed:
        return statistics.median(printed), "median images/s of the progress lines"
    gbs = _num(run.gbs)
    times = [p.step_time for p in run.train_points if p.step_time]
    if gbs and times:
        return gbs / statistics.median(times), "global batch / median iteration time"
    return None, ""


def monotonic_iterations(points: List[TrainPoint]) -> List[int]:
    """Iterations of the progress lines, made non-decreasing: a counter that restarts (per epoch, or a log
    holding a resumed run) continues from where it was instead of drawing back across the plot."""
    out: List[int] = []
    offset = 0
    for p in points:
        if out and p.iteration + offset < out[-1]:
            offset = out[-1]
        out.append(p.iteration + offset)
    return out


def train_throughput_series(run: RunSummary):
    """(iterations, images/s) of the training-progress lines: the printed images/s, else global batch over the
    iteration time."""
    gbs = _num(run.gbs)
    xs, ys = [], []
    for it, p in zip(monotonic_iterations(run.train_points), run.train_points):
        if p.ips is not None:
            xs.append(it)
            ys.append(p.ips)
        elif gbs and p.step_time:
            xs.append(it)
            ys.append(gbs / p.step_time)
    return xs, ys
