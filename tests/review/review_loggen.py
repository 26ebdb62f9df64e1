"""Writes small synthetic MLPerf Mask R-CNN result logs (``:::MLLOG {json}`` lines) for the review tests."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import List, Optional, Sequence

WEIGHT_TENSORS = [
    "FPN_inner_block1", "FPN_layer_block1", "FPN_inner_block2", "FPN_layer_block2", "FPN_inner_block3",
    "FPN_layer_block3", "FPN_inner_block4", "FPN_layer_block4", "RPNHead_conv", "RPNHead_cls", "RPNHead_bbox",
    "ROI_BOX_FEATURE_EXTRACTOR_fc6", "ROI_BOX_FEATURE_EXTRACTOR_fc7", "ROI_BOX_PREDICTOR_cls",
    "ROI_BOX_PREDICTOR_bbox", "ROI_MASK_FEATURE_EXTRACTOR_fcn1", "ROI_MASK_FEATURE_EXTRACTOR_fcn2",
    "ROI_MASK_FEATURE_EXTRACTOR_fcn3", "ROI_MASK_FEATURE_EXTRACTOR_fcn4", "ROI_MASK_PREDICTOR_fcn5",
    "ROI_MASK_PREDICTOR_fcn_logits",
]

T0_MS = {  # a date inside each round, so that ruleset detection has something to go by
    "0.7.0": 1592786607462,   # 2020-06-22
    "1.0.0": 1620000000000,   # 2021-05-03
    "1.1.0": 1633000000000,   # 2021-09-30
    "2.1.0": 1664000000000,   # 2022-09-24
    "3.1.0": 1696000000000,   # 2023-09-29
}


def ap_curve(epochs: int, final_bbox: float, final_segm: float) -> List[tuple]:
    """(bbox, segm) per epoch: a ramp from 0.2/0.19 to the final values."""
    out = []
    for e in range(1, epochs + 1):
        f = e / epochs
        out.append((0.2 + (final_bbox - 0.2) * f, 0.19 + (final_segm - 0.19) * f))
    return out


def make_lines(*, epochs: int = 14, final_bbox: float = 0.3790, final_segm: float = 0.3440,
               status: Optional[str] = "success", ttt_min: float = 100.0, init_min: float = 0.5,
               ruleset: str = "0.7.0", benchmark: str = "maskrcnn", division: str = "closed",
               gbs: int = 48, lr: float = 0.06, warmup_steps: int = 625, warmup_factor: float = 9.6e-05,
               decay_factor: float = 0.1, decay_steps: Sequence[int] = (24000, 32000),
               num_image_candidates: int = 6000, seed: int = 1234, t0_ms: Optional[int] = None,
               run_stop: bool = True, prefix: str = "", train_lines: bool = True,
               platform: str = "1xTEST-8GPU") -> List[str]:
    t0 = T0_MS.get(ruleset, T0_MS["0.7.0"]) if t0_ms is None else t0_ms
    t = [t0]
    lines: List[str] = []

    def ev(key, value=None, event_type="POINT_IN_TIME", dt_ms=1, **meta):
        t[0] += dt_ms
        md = {"file": "tools/train_mlperf.py", "lineno": 100}
        md.update(meta)
        rec = {"namespace": "", "time_ms": t[0], "event_type": event_type, "key": key, "value": value,
               "metadata": md}
        lines.append(prefix + ":::MLLOG " + json.dumps(rec))

    ev("submission_benchmark", benchmark)
    ev("submission_org", "TESTORG")
    ev("submission_division", division)
    ev("submission_status", "onprem")
    ev("submission_platform", platform)
    ev("cache_clear", True)
    ev("init_start", None, "INTERVAL_START")
    ev("seed", seed, lineno=318)
    ev("global_batch_size", gbs)
    ev("num_image_candidates", num_image_candidates)
    ev("opt_name", "sgd_with_momentum")
    ev("opt_base_learning_rate", lr)
    ev("opt_learning_rate_warmup_steps", warmup_steps)
    ev("opt_learning_rate_warmup_factor", warmup_factor)
    ev("opt_learning_rate_decay_factor", decay_factor)
    ev("opt_learning_rate_decay_steps", list(decay_steps))
    ev("min_image_size", 800)
    ev("max_image_size", 1333)
    if ruleset != "0.7.0":
        ev("gradient_accumulation_steps", 1)
    if ruleset in ("1.1.0", "2.0.0", "2.1.0"):
        for name in WEIGHT_TENSORS:
            ev("weights_initialization", None, tensor=name)
    ev("init_stop", None, "INTERVAL_END", dt_ms=int(init_min * 60000))
    ev("run_start", None, "INTERVAL_START")
    run_start = t[0]
    ev("train_samples", 117266)
    ev("eval_samples", 5000)
    epoch_ms = int(ttt_min * 60000 / epochs)
    it_per_epoch = 117266 // gbs + 1
    for e, (bbox, segm) in enumerate(ap_curve(epochs, final_bbox, final_segm), 1):
        ev("block_start", None, "INTERVAL_START", first_epoch_num=e, epoch_count=1)
        ev("epoch_start", None, "INTERVAL_START", epoch_num=e)
        if train_lines:
            for k in range(1, 3):
                it = (e - 1) * it_per_epoch + k * (it_per_epoch // 2)
                loss = 2.0 / (1 + 0.2 * e) + 0.01 * k
                lines.append(prefix + f"2020-06-21 17:44:14,497 maskrcnn_benchmark.trainer INFO: eta: 1:00:00  "
                             f"iter: {it}  loss: {loss:.4f} ({loss + 0.1:.4f})  loss_mask: 0.5000 (0.6000)  "
                             f"time: 0.2400 (0.2500)  data: 0.0020 (0.0030)  lr: {lr:.6f}  max mem: 6133")
        ev("epoch_stop", None, "INTERVAL_END", dt_ms=epoch_ms - 200, epoch_num=e)
        ev("block_stop", None, "INTERVAL_END", first_epoch_num=e)
        ev("eval_start", None, "INTERVAL_START", epoch_num=e)
        ev("eval_accuracy", {"BBOX": bbox, "SEGM": segm}, dt_ms=100, epoch_num=e)
        ev("eval_stop", None, "INTERVAL_END", epoch_num=e)
    if run_stop:
        t[0] = run_start + int(ttt_min * 60000) - 1
        if status is None:
            ev("run_stop", None, "INTERVAL_END")
        else:
            ev("run_stop", None, "INTERVAL_END", status=status)
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
    """One good run per time to train, seeds 1000+i."""
    return [write_log(Path(folder) / f"result_{i}.txt", ttt_min=ttt, seed=1000 + i, **kwargs)
            for i, ttt in enumerate(ttts)]
