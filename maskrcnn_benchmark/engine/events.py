"""The one store that the training loop and its hooks share (detectron2's ``EventStorage``, for one run).

The loop writes what it did (the iteration, its losses, the images seen); hooks read it and write what they found
(scores, timings, a request to stop, a failure of work that only rank 0 does); the run reads its outcome from it.
No hook reads another hook's attributes.

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
        self._scalars = {}                   # name -> latest value (tensor or float)
        self.timings = {}                    # name -> [seconds, ...]
        self.scores = []                     # EpochScores, in the order they arrived
        self.target_met = False              # every rank: the quality target was reached
        self.converged_epoch = None          # rank 0: the epoch that reached it
        self.stop_requested = False
        self.stop_reason = None
        self.failure = None                  # exception of rank-0-only work, until every rank has agreed to abort

    # -- position ------------------------------------------------------------------------------------------------
    @property
    def epoch(self):
        """1-based epoch of the current iteration (iterations are 1-based, as the reference counts)."""
        return (max(self.iter, 1) - 1) // self.iters_per_epoch + 1

    def epoch_of(self, iteration):
        return (max(iteration, 1) - 1) // self.iters_per_epoch + 1

    def is_epoch_end(self, iteration=None):
        it = self.iter if iteration is None else iteration
        return it % self.iters_per_epoch == 0 or it >= self.max_iter

    # -- what the loop writes ---------------------------------------------------------------------------------------
    def put_scalars(self, **values):
        self._scalars.update(values)

    def latest(self):
        """The latest value of every scalar (tensors as the step left them)."""
        return dict(self._scalars)

    def put_timing(self, name, seconds):
        self.timings.setdefault(name, []).append(float(seconds))

    # -- what hooks write ------------------------------------------------------------------------------------------
    def put_scores(self, epoch, bbox, segm, backend="?", seconds=0.0):
        entry = EpochScores(int(epoch), float(bbox), float(segm), backend, float(seconds))
        self.scores.append(entry)
        return entry

    def request_stop(self, reason):
        self.stop_requested = True
        self.stop_reason = reason
