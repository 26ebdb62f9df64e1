"""Training curves of a review: box/mask AP per epoch and against time, plus loss/throughput when logged.

:func:`plot_runs` returns the data actually drawn (read back from the matplotlib Line2D objects), so that tests
and callers can check what is plotted without looking at pixels.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from maskrcnn_benchmark.utils.fileio import atomic_write

from . import rules
from .summary import RunSummary, monotonic_iterations, train_throughput_series

AP_EPOCH_BBOX = "BBOX AP per epoch"
AP_EPOCH_SEGM = "SEGM AP per epoch"
AP_TIME_BBOX = "BBOX AP vs time since run_start"
AP_TIME_SEGM = "SEGM AP vs time since run_start"
LOSS = "training loss"
THROUGHPUT_TIME = "training throughput vs time since run_start"
THROUGHPUT_ITER = "training throughput per iteration"
EPOCH_TIME = "epoch duration"


def _series_for(runs: Sequence[RunSummary]) -> List[tuple]:
    """Panels to draw: (title, xlabel, ylabel, {run: (xs, ys)}, target or None)."""
    panels = []
    for title, attr, target in ((AP_EPOCH_BBOX, "bbox", rules.TARGET_BBOX),
                                (AP_EPOCH_SEGM, "segm", rules.TARGET_SEGM)):
        data = {}
        for r in runs:
            pts = [(e.epoch, getattr(e, attr)) for e in r.evals
                   if e.epoch is not None and getattr(e, attr) is not None]
            if pts:
                data[r.name] = ([p[0] for p in pts], [p[1] for p in pts])
        panels.append((title, "epoch", attr.upper() + " AP", data, target))
    for title, attr, target in ((AP_TIME_BBOX, "bbox", rules.TARGET_BBOX),
                                (AP_TIME_SEGM, "segm", rules.TARGET_SEGM)):
        data = {}
        for r in runs:
            pts = [(e.minutes, getattr(e, attr)) for e in r.evals
                   if e.minutes is not None and getattr(e, attr) is not None]
            if pts:
                data[r.name] = ([p[0] for p in pts], [p[1] for p in pts])
        panels.append((title, "minutes since run_start", attr.upper() + " AP", data, target))
    loss = {}
    for r in runs:
        its = monotonic_iterations(r.train_points)
        pts = [(it, p.loss) for it, p in zip(its, r.train_points) if p.loss is not None]
        if pts:
            loss[r.name] = ([p[0] for p in pts], [p[1] for p in pts])
    # throughput against an axis that only grows: minutes since run_start for mllog records (their logged step
    # may restart every epoch), the iteration (kept monotonic) for progress lines
    thr_time, thr_iter = {}, {}
    for r in runs:
        if r.tracked_throughput:
            thr_time[r.name] = ([p[0] for p in r.tracked_throughput], [p[1] for p in r.tracked_throughput])
            continue
        xs, ys = train_throughput_series(r)
        if xs:
            thr_iter[r.name] = (xs, ys)
    if loss:
        panels.append((LOSS, "iteration", "loss", loss, None))
    if thr_time:
        panels.append((THROUGHPUT_TIME, "minutes since run_start", "images/s", thr_time, None))
    if thr_iter:
        panels.append((THROUGHPUT_ITER, "iteration", "images/s", thr_iter, None))
    if not thr_time and not thr_iter:
        ep = {r.name: ([e for e, _ in r.epoch_seconds], [s for _, s in r.epoch_seconds])
              for r in runs if r.epoch_seconds}
        if ep:
            panels.append((EPOCH_TIME, "epoch", "seconds (epoch_start to epoch_stop)", ep, None))
    return panels


def plot_runs(runs: Sequence[RunSummary], path: Optional[Path], title: str = "") -> Dict[str, Dict[str, tuple]]:
    """Draw the curves and save a PNG at ``path`` (atomically; skipped when path is None).

    Returns {panel title: {line label: (xs, ys)}} read back from the figure, target lines included
    (label ``target 0.377`` / ``target 0.339``).
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. tick overflow on absurd logged values
        return _plot_runs(runs, path, title)


def _plot_runs(runs, path, title) -> Dict[str, Dict[str, tuple]]:
    # the Agg canvas directly: no pyplot, so no global backend switch and no figure manager to leak
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    panels = _series_for(runs)
    ncols = 2
    nrows = (len(panels) + ncols - 1) // ncols
    fig = Figure(figsize=(13, 4.2 * nrows))
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    drawn: Dict[str, Dict[str, tuple]] = {}
    try:
        for ax, (ptitle, xlabel, ylabel, data, target) in zip(axes.flat, panels):
            for name, (xs, ys) in data.items():
                ax.plot(xs, ys, marker="o" if len(xs) <= 60 else None, markersize=3, linewidth=1.2, label=name)
            if target is not None:
                ax.axhline(target, color="red", linestyle="--", linewidth=1.0, label=f"target {target:g}")
            ax.set_title(ptitle)
            ax.set_xlabel(xlabel)
            ax.set_ylabel(ylabel)
            ax.grid(True, alpha=0.3)
            if not data:
                ax.text(0.5, 0.5, "no data in the logs", ha="center", va="center", transform=ax.transAxes)
            elif len(data) <= 12:
                ax.legend(fontsize=7, loc="best")
            drawn[ptitle] = {ln.get_label(): (list(map(float, ln.get_xdata())), list(map(float, ln.get_ydata())))
                             for ln in ax.get_lines()}
        for ax in list(axes.flat)[len(panels):]:
            ax.axis("off")
        if title:
            fig.suptitle(title)
        fig.tight_layout()
        if path is not None:
            with atomic_write(path, "wb", what="review plot") as f:
                fig.savefig(f, format="png", dpi=90)
    finally:
        fig.clear()
    return drawn
