"""Time to train on paper, with every term shown: what ``make gpu-check`` projects from its measurements.

    time to train = epochs x (train images / throughput + blocking evaluation gap) + init

* **epochs**: the RCP mean for the run's global batch (mlperf-logging's RCP table, :func:`official.rcp_table`):
  what a run converging like the reference takes on average;
* **throughput**: training images per second of the whole system; at ``n`` nodes the per-node rate of one node
  times ``n`` times a scaling efficiency (an assumption, stated: by default the efficiency NVIDIA's own logs show,
  100 % on 1 node and 72 % on 8, interpolated geometrically in the number of nodes);
* **blocking evaluation gap**: the seconds per epoch that training waits for evaluation (``eval_start`` to the
  next ``epoch_start``); by default it shrinks with the nodes as NVIDIA's logs show (3.1 s on 1 node, 0.47 s on
  8: inference is spread over all GPUs, scoring overlaps training);
* **init** is not part of the time to train (MLPerf's clock starts at ``run_start``); it is shown apart.

:data:`NVIDIA_ANCHORS` are NVIDIA's DGX H100 result logs, read from their ``:::MLLOG`` lines; the same arithmetic
applied to their inputs reproduces their times within 5 % (tests/review/test_projection.py), which is what lets
a reviewer trust the projection of this package's own figures.
"""
import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

COCO_TRAIN_IMAGES = 117266  # COCO 2017 train images after the reference's filter: train_samples of an epoch


@dataclass(frozen=True)
class Anchor:
    """A published run: its inputs to the arithmetic and its time to train, as its log shows them."""
    name: str
    source: str
    nodes: int
    gpus_per_node: int
    global_batch: int
    throughput: float      # images/s of the whole system (run_stop throughput)
    eval_gap_s: float      # blocking evaluation, seconds per epoch
    time_to_train_s: float


NVIDIA_ANCHORS = (
    Anchor("NVIDIA DGX H100, 1 node", "mlcommons training_results_v3.1, "
           "NVIDIA/results/eos_ngc23.04_pytorch/maskrcnn/result_0.txt", 1, 8, 96, 1436.0, 3.1, 1150.0),
    Anchor("NVIDIA DGX H100, 8 nodes", "mlcommons training_results_v3.1, "
           "NVIDIA/results/eos_n8_ngc23.04_pytorch/maskrcnn/result_1.txt", 8, 8, 256, 8250.0, 0.47, 4.1 * 60),
)
NVIDIA_EFFICIENCY_8_NODES = 8250.0 / (8 * 1436.0)  # 0.72: NVIDIA's own per-node rate at 8 nodes vs 1


def rcp_epochs(global_batch: int, ruleset: str = "3.1.0") -> float:
    """The RCP mean (epochs to converge) for ``global_batch`` from mlperf-logging's RCP table."""
    from .official import rcp_table

    found = rcp_table(ruleset).at(global_batch)
    if found is None:
        raise ValueError(f"no RCP at global batch {global_batch} for training {ruleset}")
    return float(found[1]["RCP Mean"])


@dataclass(frozen=True)
class Projection:
    nodes: int
    global_batch: int
    epochs: float
    throughput: float
    eval_gap_s: float
    train_images: int = COCO_TRAIN_IMAGES

    @property
    def epoch_s(self) -> float:
        return self.train_images / self.throughput

    @property
    def time_to_train_s(self) -> float:
        return self.epochs * (self.epoch_s + self.eval_gap_s)

    def line(self) -> str:
        return (f"{self.nodes} node(s), global batch {self.global_batch}: {self.epochs:.2f} epochs x "
                f"({self.train_images} images / {self.throughput:,.0f} img/s = {self.epoch_s:.1f} s + "
                f"{self.eval_gap_s:.2f} s evaluation gap) = {self.time_to_train_s:,.0f} s "
                f"({self.time_to_train_s / 60:.1f} min)")


def reproduce(anchor: Anchor, ruleset: str = "3.1.0") -> Projection:
    """The arithmetic on a published run's own inputs (its throughput and gap; epochs: the RCP mean)."""
    return Projection(anchor.nodes, anchor.global_batch, rcp_epochs(anchor.global_batch, ruleset),
                      anchor.throughput, anchor.eval_gap_s)


def _between(at_1: float, at_8: float, nodes: int) -> float:
    """Geometric interpolation through the values at 1 and 8 nodes (extrapolated beyond)."""
    return at_1 * (at_8 / at_1) ** (math.log(nodes) / math.log(8))


def scaling_efficiency(nodes: int) -> float:
    """The assumed data-parallel efficiency at ``nodes`` (NVIDIA's: 1.0 on 1 node, 0.72 on 8)."""
    return _between(1.0, NVIDIA_EFFICIENCY_8_NODES, nodes)


def project(node_rate: float, eval_gap_1_node: float, nodes_list: Sequence[int] = (1, 4, 8, 32),
            ruleset: str = "3.1.0", batch_of=None) -> List[Projection]:
    """Projections from one node's measured training rate (``node_rate`` img/s) and blocking evaluation gap per
    epoch. The gap at ``n`` nodes shrinks as NVIDIA's (3.1 s -> 0.47 s from 1 to 8 nodes); ``batch_of(nodes)``: the
    global batch (default NVIDIA's: 96 on 1 node, 256 beyond)."""
    batch_of = batch_of or (lambda n: 96 if n == 1 else 256)
    gap_ratio = NVIDIA_ANCHORS[1].eval_gap_s / NVIDIA_ANCHORS[0].eval_gap_s
    out = []
    for n in nodes_list:
        out.append(Projection(n, batch_of(n), rcp_epochs(batch_of(n), ruleset),
                              node_rate * n * scaling_efficiency(n), _between(eval_gap_1_node,
                                                                              eval_gap_1_node * gap_ratio, n)))
    return out


def assumptions(eval_gap_measured: Optional[bool] = None, batches: Optional[Dict[int, int]] = None) -> List[str]:
    """``batches``: the global batch at some node counts (the configs'), NVIDIA's (96 on 1 node, 256 beyond)
    elsewhere."""
    own = ", ".join(f"{b} on {n} node(s)" for n, b in sorted((batches or {}).items()))
    lines = [f"scaling efficiency: 1.0 on 1 node, {NVIDIA_EFFICIENCY_8_NODES:.2f} on 8 (NVIDIA's DGX H100 logs), "
             "geometric in between and beyond",
             "evaluation gap: shrinks with the nodes as NVIDIA's (3.1 s on 1 node, 0.47 s on 8)",
             "epochs: the RCP mean of the global batch " + (f"({own}, as this checkout's configs; NVIDIA's 96 on 1 "
                                                             "node, 256 beyond elsewhere)" if own else
                                                             "(96 on 1 node, 256 beyond, as NVIDIA's runs)"),
             "the per-GPU rate measured at 12 images per GPU is taken at every node count (the per-GPU batch "
             "shrinks with the nodes at a fixed global batch: not measured)"]
    if eval_gap_measured is False:
        lines.append("the 1-node evaluation gap is NVIDIA's 3.1 s, not measured here")
    return lines
