"""Running the trainer as the user does (a subprocess), and reading what it wrote."""
import os
import subprocess
import sys

from helpers import REPO
from live_runs import mllog_events  # noqa: F401 (the tests import it from here too)

CPU_YAML = os.path.join(REPO, "configs", "e2e_mask_rcnn_synthetic_cpu.yaml")


def train_cmd(data_dir, out_dir, *opts, launcher=None, extra_args=()):
    base = [sys.executable] if launcher is None else launcher
    return base + [os.path.join(REPO, "tools", "train_mlperf.py"), "--config-file", CPU_YAML, "--seed", "5",
                   *extra_args, "DATASETS.DATA_DIR", data_dir, "OUTPUT_DIR", out_dir, "DATALOADER.NUM_WORKERS", "0",
                   "INPUT.MIN_SIZE_TRAIN", "(96,)", "INPUT.MAX_SIZE_TRAIN", "96", "INPUT.MIN_SIZE_TEST", "96",
                   "INPUT.MAX_SIZE_TEST", "96", *[str(o) for o in opts]]


def run_train(data_dir, out_dir, *opts, launcher=None, extra_args=(), timeout=600, env=None):
    e = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    e.update(env or {})
    return subprocess.run(train_cmd(data_dir, out_dir, *opts, launcher=launcher, extra_args=extra_args),
                          capture_output=True, text=True, timeout=timeout, cwd=out_dir if os.path.isdir(out_dir)
                          else REPO, env=e)


def compliance(log_path, ruleset="0.7.0"):
    r = subprocess.run([sys.executable, "-m", "mlperf_logging.compliance_checker", "--usage", "training",
                        "--ruleset", ruleset, log_path], capture_output=True, text=True,
                       cwd=os.path.dirname(log_path), timeout=300)
    return r.returncode, r.stdout + r.stderr


def checker_failures(text):
    """Keys whose compliance checks failed, from the checker's output."""
    import re

    keys = set(re.findall(r"Failed checks for (\w+)", text)) | set(re.findall(r"CHECK for '(\w+)' failed", text))
    keys |= {f"missing:{k}" for k in re.findall(r"Required EXACTLY_ONE occurrence of '(\w+)'", text)}
    keys |= {f"missing:{k}" for k in re.findall(r"Required AT_LEAST_ONE occurrence of '(\w+)'", text)}
    return keys


def run_merged(data_dir, out_dir, *opts, extra_args=(), timeout=600, env=None, config_file=None):
    """Like :func:`run_train`, with stderr merged into stdout in the order the lines were written (what a user
    sees on the terminal)."""
    e = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    e.update(env or {})
    cmd = train_cmd(data_dir, out_dir, *opts, extra_args=extra_args)
    if config_file:
        cmd[cmd.index("--config-file") + 1] = config_file
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
                          cwd=out_dir if os.path.isdir(out_dir) else REPO, env=e)


def run_in_process(data_dir, out_dir, *opts, config_file=None):
    """Like :func:`run_merged`, in this process: the trainer's parser and ``train_program`` (which prints the one
    ``error:`` line and returns the exit code), stdout and stderr merged in the order written. For failures
    found in the first iterations: no Python start and torch import per test (about 3.5 CPU-seconds each).
    ``main``'s first two steps, the site hook and the signal handlers, are left to the subprocess tests (they would
    change this process)."""
    import contextlib
    import io
    import logging

    import torch

    from maskrcnn_benchmark.cli import train_mlperf
    from maskrcnn_benchmark.cli.common import parse_with_overrides
    from maskrcnn_benchmark.utils.logger import TRACEBACK_LOGGER

    argv = train_cmd(data_dir, out_dir, *opts)[2:]  # without the interpreter and the script
    if config_file:
        argv[argv.index("--config-file") + 1] = config_file
    merged, cwd, threads = io.StringIO(), os.getcwd(), torch.get_num_threads()
    loggers = [logging.getLogger(name) for name in ("maskrcnn_benchmark", TRACEBACK_LOGGER)]
    saved = [(lg.propagate, lg.level) for lg in loggers]
    os.chdir(out_dir)
    torch.set_num_threads(1)  # as the subprocess runs it (OMP_NUM_THREADS=1)
    try:
        with contextlib.redirect_stdout(merged), contextlib.redirect_stderr(merged):
            args, rest = parse_with_overrides(train_mlperf.build_parser(), argv)
            code = train_mlperf.train_program(args, rest, site_hook=False)
    finally:
        os.chdir(cwd)
        torch.set_num_threads(threads)
        # the run's handlers write to the closed buffer now; the loggers propagate again (caplog) as before the run
        for lg, (propagate, level) in zip(loggers, saved):
            for h in list(lg.handlers):
                lg.removeHandler(h)
                h.close()
            lg.propagate, lg.level = propagate, level
    return subprocess.CompletedProcess(argv, code, merged.getvalue(), None)


def lines_after_last_log_line(text):
    """The terminal lines after the run's last log line (a ``2026-11-24 10:00:00 maskrcnn_benchmark...`` line of
    the text log, or a ``:::MLLOG`` line of the MLPerf log): what a failure adds. Blank lines are not counted."""
    import re

    lines = [line for line in text.splitlines() if line.strip()]
    last = max((i for i, line in enumerate(lines)
                if re.match(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d maskrcnn_benchmark", line) or ":::MLLOG" in line),
               default=-1)
    return lines[last + 1:]
