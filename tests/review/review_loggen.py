"""Synthetic MLPerf Mask R-CNN result logs for the review tests, written by the project's own MLPerfLogger.

Every ``:::MLLOG`` line comes from :class:`maskrcnn_benchmark.utils.mlperf_logger.MLPerfLogger`, called in the
order the trainer calls it: submission info, cache_clear, init_start, seed, hyperparameters (with the
weights_initialization records), init_stop, run_start, train/eval samples, per epoch block/epoch/eval keys and
eval_accuracy, run_stop. Only the clock is the test's: mllog's time source is replaced by a fake clock, so that
times to train, epochs and the log's date are chosen by the test. Progress lines in the trainer's format
(``iter: ... loss: ... images/s: ...``) are written between the epoch keys, as the trainer's MetricsHook would.
"""

from __future__ import annotations

import datetime as _dt
import gzip
import io
from pathlib import Path
from types import SimpleNamespace
from typing import List, Optional, Sequence
from unittest import mock

ROOT = Path(__file__).resolve().parents[2]

from mlperf_logging.mllog import mllog as _mllog_module  # noqa: E402

from maskrcnn_benchmark.utils.mlperf_logger import MLPerfLogger  # noqa: E402

T0_MS = {  # a date inside each round (between the previous round's publication and its own)
    "0.7.0": 1592786607462,   # 2020-06-22
    "1.0.0": 1620000000000,   # 2021-05-03
    "1.1.0": 1633000000000,   # 2021-09-30
    "2.0.0": 1651363200000,   # 2022-05-01
    "2.1.0": 1664000000000,   # 2022-09-24
    "3.0.0": 1681516800000,   # 2023-04-15
    "3.1.0": 1696000000000,   # 2023-09-29
}
TRAIN_IMAGES = 117266
# what a 0.7.0-era logger did not write (MLPerfLogger now always logs the superset of every ruleset)
KEYS_NEWER_THAN_0_7_0 = ("gradient_accumulation_steps", "weights_initialization")


def ap_curve(epochs: int, final_bbox: float, final_segm: float) -> List[tuple]:
    """(bbox, segm) per epoch: a ramp from 0.2/0.19 to the final values."""
    out = []
    for e in range(1, epochs + 1):
        f = e / epochs
        out.append((0.2 + (final_bbox - 0.2) * f, 0.19 + (final_segm - 0.19) * f))
    return out


class _Clock:
    """mllog's ``_current_time_ms`` replacement: the time the generator sets."""

    def __init__(self, t_ms: float):
        self.t = float(t_ms)

    def __call__(self) -> int:
        return int(round(self.t))


class _Sink(io.TextIOBase):
    """One rank's stdout: remembers each written line with the fake time it was written at."""

    def __init__(self, clock: _Clock, rank: int, out: list):
        self.clock, self.rank, self.out = clock, rank, out

    def write(self, text):
        for line in text.splitlines():
            self.out.append((self.clock.t, len(self.out), self.rank, line))
        return len(text)

    def flush(self):
        pass


def _cfg(gbs, lr, warmup_steps, warmup_factor, decay_factor, decay_steps, num_image_candidates):
    """The config fields MLPerfLogger.hyperparameters reads (as the trainer's yacs config has them)."""
    return SimpleNamespace(
        SOLVER=SimpleNamespace(IMS_PER_BATCH=gbs, BASE_LR=lr, WARMUP_ITERS=warmup_steps,
                               WARMUP_FACTOR=warmup_factor, GAMMA=decay_factor, STEPS=tuple(decay_steps),
                               MOMENTUM=0.9),
        MODEL=SimpleNamespace(RPN=SimpleNamespace(FPN_POST_NMS_TOP_N_TRAIN=num_image_candidates,
                                                  FPN_POST_NMS_PER_BATCH=True)),
        INPUT=SimpleNamespace(MIN_SIZE_TRAIN=(800,), MAX_SIZE_TRAIN=1333))


def make_lines(*, epochs: int = 14, final_bbox: float = 0.3790, final_segm: float = 0.3440,
               status: Optional[str] = "success", ttt_min: float = 100.0, init_min: float = 0.5,
               ruleset: str = "3.1.0", benchmark: str = "maskrcnn", division: str = "closed",
               gbs: int = 48, lr: float = 0.06, warmup_steps: int = 625, warmup_factor: float = 9.6e-05,
               decay_factor: float = 0.1, decay_steps: Sequence[int] = (24000, 32000),
               num_image_candidates: int = 6000, seed: int = 1234, t0_ms: Optional[int] = None,
               run_stop: bool = True, prefix: str = "", train_lines: bool = True,
               platform: str = "1xTEST-8GPU", org: str = "TESTORG", omit: Sequence[str] = (),
               ranks: int = 1, rank_delay_ms: int = 1500, tracked_stats: bool = False,
               cache_clear: bool = True, first_epoch: int = 1, resumed_from: Optional[int] = None) -> List[str]:
    """The lines of one run. ``ruleset`` only dates the log (a day inside that round); ``omit`` drops keys
    (e.g. :data:`KEYS_NEWER_THAN_0_7_0` for a log as a 0.7.0-era logger wrote it). ``ranks`` > 1 simulates a
    multi-process run whose ranks all log ``init_start`` and ``run_start`` (rank r ``r * rank_delay_ms`` later),
    merged by time with ``r: `` labels as ``srun --label`` does. ``tracked_stats`` adds NVIDIA-style per-step
    ``tracked_stats``/``throughput`` events whose ``step`` restarts every epoch. ``first_epoch`` > 1: a run
    resumed from a checkpoint, as our trainer logs one (its epochs before ``first_epoch`` are not in the log);
    ``resumed_from``: the iteration of that checkpoint, in ``run_start``'s metadata as the trainer logs it."""
    clock = _Clock(T0_MS[ruleset] if t0_ms is None else t0_ms)
    out: list = []
    loggers = [MLPerfLogger(rank=r, ruleset=ruleset, stream=_Sink(clock, r, out)) for r in range(ranks)]
    ml = loggers[0]

    def tick(ms: float = 1.0):
        clock.t += ms

    with mock.patch.object(_mllog_module, "_current_time_ms", clock):
        ml.submission_info(org=org, platform=platform, division=division, status="onprem")
        tick()
        ml.cache_clear(cache_clear)
        tick()
        for r, lg in enumerate(loggers):
            lg.start("init_start", all_ranks=True)
            tick(3)
        ml.event("seed", seed)
        tick()
        ml.hyperparameters(_cfg(gbs, lr, warmup_steps, warmup_factor, decay_factor, decay_steps,
                                num_image_candidates), world_size=8)
        clock.t += init_min * 60000
        ml.end("init_stop")
        tick()
        run_start = clock.t
        for r, lg in enumerate(loggers):
            clock.t = run_start + r * rank_delay_ms
            if resumed_from is None:
                lg.start("run_start", all_ranks=True)
            else:
                lg.run_start(resumed_from=resumed_from)
        clock.t = run_start + 1
        ml.event("train_samples", TRAIN_IMAGES)
        tick()
        ml.event("eval_samples", 5000)
        epoch_ms = ttt_min * 60000 / epochs
        it_per_epoch = TRAIN_IMAGES // gbs + 1
        for e, (bbox, segm) in enumerate(ap_curve(epochs, final_bbox, final_segm), 1):
            if e < first_epoch:
                continue
            e0 = run_start + (e - first_epoch) * epoch_ms * epochs / (epochs - first_epoch + 1) + 2
            clock.t = e0
            ml.start("block_start", metadata={"first_epoch_num": e, "epoch_count": 1})
            ml.start("epoch_start", metadata={"epoch_num": e})
            for k in range(1, 3):
                clock.t = e0 + k * (epoch_ms - 300) / 3
                it = (e - 1) * it_per_epoch + k * (it_per_epoch // 2)
                loss = 2.0 / (1 + 0.2 * e) + 0.01 * k
                if train_lines:
                    when = _dt.datetime.fromtimestamp(clock.t / 1000, tz=_dt.timezone.utc)
                    line = (f"{when:%Y-%m-%d %H:%M:%S} maskrcnn_benchmark.trainer INFO: iter: {it}  epoch: {e}  "
                            f"loss: {loss:.4f}  loss_mask: 0.5000  lr: {lr:.6f}  images/s: {gbs / 0.24:.2f}")
                    out.append((clock.t, len(out), 0, line))
                if tracked_stats:
                    step = k * (it_per_epoch // 2)  # restarts every epoch
                    ml.event("tracked_stats", {"loss": loss, "throughput": 300.0 + e + k},
                             metadata={"step": step})
                    ml.event("throughput", 300.0 + e + k)
            clock.t = e0 + epoch_ms - 250
            ml.end("epoch_stop", metadata={"epoch_num": e})
            ml.end("block_stop", metadata={"first_epoch_num": e})
            ml.start("eval_start", metadata={"epoch_num": e})
            tick(100)
            ml.event("eval_accuracy", {"BBOX": bbox, "SEGM": segm}, metadata={"epoch_num": e})
            ml.end("eval_stop", metadata={"epoch_num": e})
        if run_stop:
            clock.t = run_start + (ranks - 1) * rank_delay_ms + ttt_min * 60000
            ml.end("run_stop", metadata={"status": status} if status is not None else None)
    for lg in loggers:
        lg.close()

    lines = []
    for _t, _seq, rank, text in sorted(out, key=lambda x: (x[0], x[1])):
        if ":::MLLOG" in text and any(f'"key": "{k}"' in text for k in omit):
            continue
        if benchmark != "maskrcnn" and '"key": "submission_benchmark"' in text:
            text = text.replace('"value": "maskrcnn"', f'"value": "{benchmark}"')
        label = f"{rank}: " if ranks > 1 else prefix
        lines.append(label + text)
    return lines


def write_log(path: Path, lines: Optional[List[str]] = None, **kwargs) -> Path:
    """Write a log (``.gz`` when the name ends with it). ``kwargs`` go to :func:`make_lines`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if lines is None:
        lines = make_lines(**kwargs)
    text = "\n".join(["+ echo 'Beginning trial 1 of 1'", *lines, "ENDING TIMING RUN"]) + "\n"
    if path.name.endswith(".gz"):
        with gzip.open(path, "wt", encoding="latin-1") as fh:
            fh.write(text)
    else:
        path.write_text(text, encoding="latin-1")
    return path


def write_runs(folder: Path, ttts: Sequence[float], **kwargs) -> List[Path]:
    """One run per time to train, seeds 1000+i; ``kwargs`` go to every run."""
    return [write_log(Path(folder) / f"result_{i}.txt", ttt_min=ttt, seed=1000 + i, **kwargs)
            for i, ttt in enumerate(ttts)]
