"""The one store that the training loop and its hooks share (detectron2's ``EventStorage``, for one run).

The loop writes where it is (the iteration, the images seen) and its losses; hooks write what they measured, as
named scalars. A float scalar keeps its history (``(iteration, value)`` pairs, :meth:`history`); a tensor keeps
its latest value only. Nothing else lives here: each hook keeps its own state, and no hook reads another hook's
attributes (engine/mlperf_hooks.py: the evaluation hook writes ``eval/*`` scalars, the MLPerf stop hook reads them).

Loss values are kept as the tensors the step produced (on its device): storing them costs no host-device sync,
and a hook that prints them pays for the sync only when it prints.
"""
from dataclasses import dataclass


@dataclass
class EpochScores:
    epoch: int
    bbox: float
    segm: float
    backend: str = "?"
    seconds: float = 0.0


class EventStorage:
    def __init__(self, start_iter=0, iters_per_epoch=1, max_iter=0):
        self.iter = start_iter
        self.start_iter = start_iter
        self.iters_per_epoch = max(1, int(iters_per_epoch))
        self.max_iter = max_iter
        self.images_seen = 0                 # images trained on, all ranks together
        self._latest = {}                    # name -> latest value (tensor or float)
        self._history = {}                   # name -> [(iteration, float), ...]

    # -- position ------------------------------------------------------------------------------------------------
    @property
    def epoch(self):
        """1-based epoch of the current iteration (iterations are 1-based, as the reference counts)."""
        return (max(self.iter, 1) - 1) // self.iters_per_epoch + 1

    def epoch_of(self, iteration):
        return (max(iteration, 1) - 1) // self.iters_per_epoch + 1

    def is_epoch_end(self, iteration=None):
        """Whether ``iteration`` (default: the current one) completes an epoch. MAX_ITER inside an epoch does not."""
        it = self.iter if iteration is None else iteration
        return it % self.iters_per_epoch == 0

    @property
    def resumed_at_epoch_end(self):
        """Whether the run started from an epoch end's checkpoint (its epoch evaluated again, engine/mlperf_hooks)."""
        return self.start_iter > 0 and self.is_epoch_end(self.start_iter)

    # -- scalars -------------------------------------------------------------------------------------------------
    def put_scalars(self, **values):
        """Tensors (the step's losses): the latest value. Numbers: the latest value and its history."""
        for name, value in values.items():
            self._latest[name] = value
            if isinstance(value, (int, float)):
                self._history.setdefault(name, []).append((self.iter, float(value)))

    def latest(self, prefix=""):
        """The latest value of every scalar whose name starts with ``prefix`` (tensors as the step left them)."""
        return {k: v for k, v in self._latest.items() if k.startswith(prefix)}

    def history(self, name):
        """``[(iteration, value), ...]`` of a number scalar, oldest first."""
        return list(self._history.get(name, ()))
