"""The base of every error that is the user's to fix.

A config key or value (:class:`~maskrcnn_benchmark.config.ConfigError`), a dataset file or entry
(``DatasetError``, also importable from :mod:`maskrcnn_benchmark.data.datasets`), weights (``WeightsError``), COCO
scoring input (``ScoringError``), the output folder (``RunFolderError``) or a write that failed (``WriteError``, a
full disk): each is a :class:`UserError` whose message names the key, file or value. The programs print it as one
``error:`` line and exit 1 (:mod:`maskrcnn_benchmark.cli.exit_codes`); anything else that ends a program is a bug, whose
traceback goes to the run's log, except the few ends of a run at the bottom of this module: a diverged loss and a
lost rank, each with its own exit code, and a failed evaluation (every rank stops; exit 1, rank 0's line says why). Nothing here imports torch: a program that fails on its
command line or config says so without loading it.
"""


class UserError(Exception):
    """Bad input or environment that the user can fix; the message says what and where."""


class ConfigError(UserError, ValueError):
    """A config file, key or value that cannot be used (``maskrcnn_benchmark.config.ConfigError``). The message
    names it, and the value to set when one is known."""


class DatasetError(UserError, RuntimeError):
    """A dataset file or entry that cannot be used; the message names it."""


class WeightsError(UserError, RuntimeError):
    """Unreadable or unsafe weights file; the message names the file."""


# -- what can be known before a run starts (checked before init_start: engine/preflight.py) ---------------------
class PreflightError(UserError):
    """A cause that would end the run, found before it starts. Each kind has its own exit code
    (:mod:`maskrcnn_benchmark.cli.exit_codes`), so that a batch script can name it without reading the line."""


class RecipeRefused(PreflightError):
    """The hyperparameters break an MLPerf rule that review would enforce."""


class DatasetMissing(PreflightError):
    """An annotation file or an image folder that the config names does not exist."""


class WeightsMissing(PreflightError):
    """``MODEL.WEIGHT`` names a file that does not exist."""


class BatchNotDivisible(PreflightError, ConfigError):
    """The global batch (train or test) does not split evenly over the processes."""


class TooFewGPUs(PreflightError):
    """This node has fewer usable GPUs than processes to start on it."""


class NoGPU(PreflightError):
    """The config runs on CUDA but torch sees no GPU."""


# -- what ends a run that is not bad input (each its own exit code) ----------------------------------------------
class NonFiniteLossError(FloatingPointError):
    """A non-finite loss (float32/bfloat16) or a float16 loss scale that fell below 1 (engine/trainer.py)."""


class RankLost(RuntimeError):
    """A collective failed because another rank stopped answering; the message names it when known
    (utils/comm.py)."""


class EvaluationFailed(RuntimeError):
    """Work that only rank 0 does (turning detections into COCO results, scoring) failed; every rank stops
    (engine/mlperf_hooks.py)."""


def exception_chain(exc):
    """``exc`` and every exception it wraps (a compiler's ``inner_exception``) or was raised from or while
    handling, each once, ``exc`` first."""
    pending, seen = [exc], set()
    while pending:
        link = pending.pop()
        if link is None or id(link) in seen:
            continue
        seen.add(id(link))
        yield link
        pending += [getattr(link, "inner_exception", None), link.__cause__, link.__context__]
