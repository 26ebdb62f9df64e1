"""The text log of a run: rank 0 logs INFO to stdout and ``OUTPUT_DIR/log.txt``; the other ranks log warnings to
stderr and, only if they have something to say, to ``OUTPUT_DIR/log.rank<R>.txt`` (opened once the process group
exists, when rank 0 has claimed the folder: engine/run.py).

Tracebacks never reach the terminal: the programs print one ``error:`` line and write the traceback to the log
file through the ``maskrcnn_benchmark.traceback`` logger, whose only handler is that file; before there is one (a
rank other than 0 that fails to join the process group), to a temporary file the line names.
"""
import logging
import os
import sys

from .fileio import LineAppender

TRACEBACK_LOGGER = "maskrcnn_benchmark.traceback"
_FORMAT = logging.Formatter("%(asctime)s %(name)s %(levelname)s: %(message)s", "%Y-%m-%d %H:%M:%S")


class _FileHandler(logging.Handler):
    """``log.txt``, each record appended whole: a write that fails (a full disk) ends the program with one line
    naming the file, instead of logging's own traceback on stderr and half a line in the log. The file is opened
    at the first record."""

    def __init__(self, path):
        super().__init__()
        self.baseFilename = os.path.abspath(path)
        self.file = None

    def emit(self, record):
        if self.file is None:
            self.file = LineAppender(self.baseFilename, "run log")
        self.file.write(self.format(record) + "\n")

    def close(self):
        if self.file is not None:
            self.file.close()
        super().close()


def log_file_name(rank):
    return "log.txt" if rank == 0 else f"log.rank{rank}.txt"


class _TerminalHandler(logging.StreamHandler):
    """The terminal's copy of the log: a stream that cannot be written (a pipe whose reader is gone, a full disk
    under Slurm's output file) is written no more, quietly (logging printed a traceback per record); the log file
    keeps every line."""

    def emit(self, record):
        if self.stream is None:
            return
        try:
            self.stream.write(self.format(record) + self.terminator)
            self.flush()
        except OSError:
            self.stream = None
        except Exception:  # noqa: BLE001 - a record that cannot be formatted: logging's own report
            self.handleError(record)


def setup_logger(output_dir=None, rank=0, name="maskrcnn_benchmark"):
    logger = logging.getLogger(name)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    tracebacks = logging.getLogger(TRACEBACK_LOGGER)
    tracebacks.setLevel(logging.INFO)
    tracebacks.propagate = False
    for lg in (logger, tracebacks):
        for h in list(lg.handlers):
            lg.removeHandler(h)
            h.close()
    if rank == 0:
        h = _TerminalHandler(sys.stdout)
        h.setFormatter(_FORMAT)
        logger.addHandler(h)
    else:
        h = logging.StreamHandler(sys.stderr)
        h.setLevel(logging.WARNING)
        h.setFormatter(logging.Formatter(f"[rank {rank}] %(levelname)s: %(message)s"))
        logger.addHandler(h)
    if output_dir:
        os.makedirs(output_dir, exist_ok=True)
        fh = _FileHandler(os.path.join(output_dir, log_file_name(rank)))
        fh.setFormatter(_FORMAT)
        if rank != 0:
            fh.setLevel(logging.WARNING)
        logger.addHandler(fh)
        tracebacks.addHandler(fh)
    return logger
