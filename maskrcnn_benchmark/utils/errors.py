"""The base of every error that is the user's to fix.

A config key or value (:class:`~maskrcnn_benchmark.config.ConfigError`), a dataset file or entry
(:class:`~maskrcnn_benchmark.data.datasets.DatasetError`), weights (``WeightsError``), COCO scoring input
(``ScoringError``), the output folder (``RunFolderError``) or a write that failed (``WriteError``, a full disk):
each is a :class:`UserError` whose message names the key, file or value. The programs print it as one ``error:``
line and exit 1 (:mod:`maskrcnn_benchmark.cli.exit_codes`); anything else that ends a program is a bug, whose
traceback goes to the run's log.
"""


class UserError(Exception):
    """Bad input or environment that the user can fix; the message says what and where."""


class ConfigError(UserError, ValueError):
    """A config file, key or value that cannot be used (``maskrcnn_benchmark.config.ConfigError``). The message
    names it, and the value to set when one is known."""
