import logging
import os
import sys


def setup_logger(output_dir=None, rank=0, name="maskrcnn_benchmark"):
    """Rank 0 logs INFO to stdout (and ``log.txt`` in output_dir); other ranks only warnings, to stderr."""
    logger = logging.getLogger(name)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    for h in list(logger.handlers):
        logger.removeHandler(h)
    fmt = logging.Formatter("%(asctime)s %(name)s %(levelname)s: %(message)s", "%Y-%m-%d %H:%M:%S")
    if rank == 0:
        h = logging.StreamHandler(sys.stdout)
        h.setFormatter(fmt)
        logger.addHandler(h)
        if output_dir:
            os.makedirs(output_dir, exist_ok=True)
            fh = logging.FileHandler(os.path.join(output_dir, "log.txt"))
            fh.setFormatter(fmt)
            logger.addHandler(fh)
    else:
        h = logging.StreamHandler(sys.stderr)
        h.setLevel(logging.WARNING)
        h.setFormatter(logging.Formatter(f"[rank {rank}] %(levelname)s: %(message)s"))
        logger.addHandler(h)
    return logger
