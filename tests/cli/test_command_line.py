"""The programs' command lines: options may stand anywhere among the KEY VALUE overrides; an option a program does
not know is refused by name; the exit-code table in docs/cluster.md is the one the programs use."""
import os
import re
import signal
import time

import pytest

from helpers import REPO
from maskrcnn_benchmark.cli import exit_codes, test_net, train_mlperf
from maskrcnn_benchmark.cli.common import parse_with_overrides


def test_options_anywhere_among_the_overrides():
    args, opts = parse_with_overrides(train_mlperf.build_parser(), [
        "--config-file", "c.yaml", "SOLVER.MAX_ITER", "4", "--resume", "out/model_0000004.pth",
        "MODEL.RPN.STRADDLE_THRESH", "-1", "SOLVER.BASE_LR", "-0.5e-3", "--seed", "3", "OUTPUT_DIR", "o",
        "--sync-eval"])
    assert args.config_file == "c.yaml" and args.resume == "out/model_0000004.pth" and args.seed == 3
    assert args.sync_eval
    assert opts == ["SOLVER.MAX_ITER", "4", "MODEL.RPN.STRADDLE_THRESH", "-1", "SOLVER.BASE_LR", "-0.5e-3",
                    "OUTPUT_DIR", "o"]


def test_nvidia_order_still_works():
    args, opts = parse_with_overrides(train_mlperf.build_parser(), [
        "--local_rank=3", "--config-file", "c.yaml", "DTYPE", "float16"])
    assert args.local_rank == 3 and opts == ["DTYPE", "float16"]


@pytest.mark.parametrize("program", [train_mlperf, test_net], ids=["train_mlperf", "test_net"])
@pytest.mark.parametrize("argv,unknown", [
    (["--config-file", "c.yaml", "SOLVER.MAX_ITER", "4", "--resum", "x"], "--resum"),
    (["--config-file", "c.yaml", "--bogus=1", "SOLVER.MAX_ITER", "4"], "--bogus"),
])
def test_an_unknown_option_is_refused_by_name(program, argv, unknown, capsys):
    with pytest.raises(SystemExit) as e:
        parse_with_overrides(program.build_parser(), argv)
    assert e.value.code == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        f"{program.build_parser().prog}: error: unknown option {unknown} (see --help)"]


@pytest.mark.parametrize("program,argv", [
    ("train_mlperf", ["--seed", "abc"]), ("train_mlperf", ["--timeout", "0"]), ("train_mlperf", ["--timeout", "-5"]),
    ("check_recipe", ["--world-size", "eight"]),
    ("preflight", ["--nproc-per-node", "x"]), ("test_net", ["--coco-backend", "nope"]),
    ("predict", ["--score-threshold", "nan"]), ("download_coco", ["--parts", "trian"])])
def test_a_bad_option_value_is_one_line(program, argv, capsys):
    """argparse printed its whole usage block (6 to 12 lines) above the error and exited 2, the code of a diverged
    run; the docstring of the shared parser promised one line. download_coco took a misspelled part and verified
    nothing. predict drew with a threshold of nan. The trainer's --timeout 0 was DISTRIBUTED_TIMEOUT, and a negative
    one reached the process group after init_start (an internal error)."""
    import importlib

    module = importlib.import_module(f"maskrcnn_benchmark.cli.{program}")
    with pytest.raises(SystemExit) as e:
        p = module.build_parser()
        p.parse_args(argv)
    assert e.value.code == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "error:" in lines[0] and lines[0].endswith("(see --help)"), lines
    assert argv[1] in lines[0], lines


def test_docs_show_the_exit_code_table_of_the_code():
    text = open(f"{REPO}/docs/cluster.md").read()
    block = re.search(r"<!-- exit-codes -->\n(.*?)\n<!-- /exit-codes -->", text, re.S)
    assert block, "docs/cluster.md lost its exit-code table markers"
    assert block.group(1).strip() == exit_codes.markdown_table()


def test_a_config_error_is_found_before_the_engine_and_torch_are_loaded(monkeypatch):
    """A mistyped key ends the trainer in a tenth of a second: ``train`` reads the config before it imports the
    engine (which loads torch, about 3.5 s), and the modules the program needs up to that point (its entry point,
    the exit codes, the config) import no torch (read from the source: tests/import_walk.py)."""
    import sys
    import types

    from import_walk import closure
    from maskrcnn_benchmark.config import ConfigError

    class Untouchable(types.ModuleType):
        def __getattr__(self, name):
            raise AssertionError(f"engine.run.{name} imported before the config was read")

    monkeypatch.setitem(sys.modules, "maskrcnn_benchmark.engine.run", Untouchable("maskrcnn_benchmark.engine.run"))
    args, opts = parse_with_overrides(train_mlperf.build_parser(), [
        "--config-file", f"{REPO}/configs/e2e_mask_rcnn_synthetic_cpu.yaml", "SOLVER.BASE_LRR", "0.1"])
    with pytest.raises(ConfigError, match="SOLVER.BASE_LRR"):
        train_mlperf.train(args, opts)
    _, external = closure(["tools/train_mlperf.py", "maskrcnn_benchmark.cli.exit_codes", "maskrcnn_benchmark.config",
                           "maskrcnn_benchmark.cli.common", "maskrcnn_benchmark.utils.env",
                           "maskrcnn_benchmark.utils.signals"])
    assert "yaml" in external and sorted(n for n in external if n.split(".")[0] in ("torch", "torchvision")) == []


@pytest.mark.parametrize("program", ["tools/test_net.py", "tools/predict.py"])
def test_the_other_model_programs_load_torch_inside_their_error_handling(program):
    """tools/test_net.py and tools/predict.py imported the engine (torch, torchvision: seconds) at module level,
    before run_program: Ctrl-C in those seconds, or a torch/torchvision mismatch ('operator torchvision::nms does
    not exist'), was a traceback with exit 1, and a config typo was found only after torch had loaded. Like the
    trainer, they read the config first and import the engine inside run_program."""
    from import_walk import closure

    _, external = closure([program, "maskrcnn_benchmark.cli.exit_codes", "maskrcnn_benchmark.config",
                           "maskrcnn_benchmark.cli.common"])
    assert sorted(n for n in external if n.split(".")[0] in ("torch", "torchvision")) == []


def test_a_stop_whose_stopped_exception_was_lost_is_still_a_stop(monkeypatch, tmp_path):
    """A rank that Slurm stops while a collective fails (its peers stopped first): if SIGTERM lands while torch's
    C++ code emits a buffered warning on the way out of the failing op, torch prints the Stopped exception and
    clears it, and the collective's RuntimeError ends the program (seen on the 4-node time-limit run: a traceback
    and "rank 0, 1, 2 stopped answering" on the 4th rank). The program says it was stopped, by which signal, with
    the stop's exit code, in the words of any other stop (a consequence of the stop overtook it; seen in make test:
    "stopped by SIGINT (FileNotFoundError while stopping: ...)" from a loader worker's batch); its log keeps the
    error's traceback. An error raised while the run unwinds from the stop (its cleanup failed) is named."""
    import logging

    from maskrcnn_benchmark.utils import signals
    from maskrcnn_benchmark.utils.logger import TRACEBACK_LOGGER, setup_logger

    saved = {s: signal.getsignal(s) for s in (*signals.STOP_SIGNALS, signal.SIGCHLD)}
    monkeypatch.setattr(signals, "_RECEIVED", [])
    monkeypatch.setattr(signals, "_HELD", {"pid": None, "installed": None})  # the handler's state stays this test's

    setup_logger(str(tmp_path), 0, name="maskrcnn_benchmark.test_stop")
    gloo = "[gloo/transport/tcp/pair.cc:547] Connection closed by peer"
    try:
        signals.stop_on_signals()
        with pytest.raises(signals.Stopped):  # what torch then prints and clears
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        lost = exit_codes.describe(RuntimeError(gloo), "run_stop logged as aborted")
        try:
            try:
                raise signals.Stopped(signal.SIGTERM)
            except signals.Stopped:
                raise OSError(28, "No space left on device")  # the cleanup's own write fails
        except OSError as e:
            cleanup = exit_codes.describe(e, "run_stop logged as aborted")
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
        for name in (TRACEBACK_LOGGER, "maskrcnn_benchmark.test_stop"):
            for h in list(logging.getLogger(name).handlers):
                logging.getLogger(name).removeHandler(h)
                h.close()
    assert lost == (exit_codes.STOPPED.code + signal.SIGTERM, "stopped by SIGTERM; run_stop logged as aborted")
    log = (tmp_path / "log.txt").read_text()
    assert "this error came before the stop was raised" in log and f"RuntimeError: {gloo}" in log
    assert cleanup == (exit_codes.STOPPED.code + signal.SIGTERM, "stopped by SIGTERM (OSError while stopping: "
                       "[Errno 28] No space left on device); run_stop logged as aborted")


def test_a_stop_that_lands_in_the_warning_machinery_is_raised_just_after_it(monkeypatch):
    """Python code that C calls and whose exceptions C discards or prints and clears: the warning machinery (torch's
    C++ warnings on the way out of a failing op), the at-fork hooks (logging's, when the loader forks its workers;
    seen on the 4-node time-limit run: "Exception ignored in: _releaseLock ... Stopped: SIGTERM", after which the
    rank no longer reacted to signals). A stop that lands there is raised a moment later, outside it."""
    import warnings

    from maskrcnn_benchmark.utils import signals

    saved = {s: signal.getsignal(s) for s in (*signals.STOP_SIGNALS, signal.SIGCHLD, signal.SIGALRM)}
    monkeypatch.setattr(signals, "_RECEIVED", [])
    monkeypatch.setattr(signals, "_HELD", {"pid": None, "installed": None})  # the handler's state stays this test's
    reached = []

    def show(*args, **kwargs):  # the signal lands while the warning is being shown
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.monotonic() + 0.2
        while time.monotonic() < deadline:
            pass

    try:
        signals.stop_on_signals()
        with pytest.raises(signals.Stopped) as stopped:
            with warnings.catch_warnings():
                warnings.simplefilter("always")
                monkeypatch.setattr(warnings, "showwarning", show)
                warnings.warn("a warning from C++")
            reached.append("after the warning")
            time.sleep(5)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        for s, handler in saved.items():
            signal.signal(s, handler)
    assert reached == ["after the warning"]
    frames = [(entry.name, str(entry.path)) for entry in stopped.traceback]
    assert not [f for f in frames if f[0] == "show" or f[1].endswith("warnings.py")], frames  # raised outside
    assert signals.received() == signal.SIGTERM


class _Tensors:
    def __len__(self):
        return 64

    def __getitem__(self, i):
        import torch

        return torch.full((1000,), float(i))


@pytest.mark.slow
def test_a_loader_worker_outlives_a_stop_so_its_batches_in_flight_stay_readable(monkeypatch):
    """Ctrl-C and Slurm signal the whole process group: the loader workers get the stop with the trainer. A worker's
    batches travel as shared-memory file descriptors that the main process fetches from the worker when it unpickles
    them; a worker that exited on the stop takes them along, and the main process, reading a batch the worker had
    already sent (in the moment before its own Stopped is raised), fails with ``FileNotFoundError: [Errno 2] No such
    file or directory`` (seen in make test: ``stopped by SIGINT (FileNotFoundError while stopping: ...)``). A worker
    ignores SIGINT and SIGHUP and is stopped by its loader as the run unwinds. (SIGTERM is torch's: its handler in
    the worker ends it, so that the loader can terminate a stuck worker; the stop's line covers what that breaks.)"""
    import torch.utils.data

    from maskrcnn_benchmark.utils import signals

    saved = {s: signal.getsignal(s) for s in (*signals.STOP_SIGNALS, signal.SIGCHLD, signal.SIGALRM)}
    monkeypatch.setattr(signals, "_RECEIVED", [])
    monkeypatch.setattr(signals, "_HELD", {"pid": None, "installed": None})  # the handler's state stays this test's
    try:
        signals.stop_on_signals()
        loader = torch.utils.data.DataLoader(_Tensors(), batch_size=4, num_workers=1, prefetch_factor=2)
        batches = iter(loader)
        assert float(next(batches)[0, 0]) == 0.0
        (worker,) = batches._workers
        deadline = time.monotonic() + 10
        while batches._data_queue.qsize() < 2 and time.monotonic() < deadline:  # its next batches are in flight
            time.sleep(0.01)
        for sig in (signal.SIGINT, signal.SIGHUP):
            os.kill(worker.pid, sig)
        time.sleep(0.5)
        assert worker.is_alive()
        assert [float(next(batches)[0, 0]) for _ in range(2)] == [4.0, 8.0]
        del batches
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


FD_REQUEST_LEFT_MIDWAY = """
import os, socket, sys, time
from multiprocessing import resource_sharer
if sys.argv[1] == "worker":
    from maskrcnn_benchmark.data.build import _worker_init
    _worker_init(0)
r, w = os.pipe()
resource_sharer.DupFd(r)  # a batch's file descriptor, offered to the main process by the resource sharer's thread
s = socket.socket(socket.AF_UNIX)
s.connect(resource_sharer._resource_sharer._address)
time.sleep(0.3)  # the sharer's handshake is under way ...
s.close()        # ... when the main process is gone (Slurm's SIGTERM at the time limit)
time.sleep(0.5)
print("done")
"""


@pytest.mark.slow  # two Python processes, one imports torch
def test_a_loader_worker_is_silent_when_its_main_process_leaves_a_batch_request_midway():
    """Slurm's SIGTERM at a trial's time limit reaches the trainer and its loader workers; a trainer that stops while
    it fetches a batch's shared memory from a worker leaves multiprocessing's resource sharer (a thread in the
    worker) in the middle of its handshake, and that thread printed a ``ConnectionResetError`` traceback into the
    rank's output (seen once in make test, test_4node_trial_time_limit_expires_mid_run). A loader worker
    (``_worker_init``) says nothing about a request whose peer is gone; without it the same script prints the
    traceback (the scenario's oracle)."""
    import subprocess
    import sys

    plain, worker = (subprocess.run([sys.executable, "-c", FD_REQUEST_LEFT_MIDWAY, kind], capture_output=True,
                                    text=True, timeout=120) for kind in ("plain", "worker"))
    assert plain.stdout.strip() == "done" and "Traceback" in plain.stderr and "resource_sharer" in plain.stderr, \
        plain.stderr
    assert worker.returncode == 0 and worker.stdout.strip() == "done" and worker.stderr == "", worker.stderr


def test_a_loader_workers_other_errors_still_reach_the_previous_hook(monkeypatch):
    """Only a request left midway is silenced: any other exception, a connection error raised elsewhere included,
    reaches the hook that was there before."""
    import sys

    from maskrcnn_benchmark.utils.processes import quiet_when_requests_are_left

    seen = []
    monkeypatch.setattr(sys, "excepthook", lambda kind, value, tb: seen.append(kind))
    quiet_when_requests_are_left()
    for error in (ValueError("a bug"), ConnectionResetError(104, "reset, not in the resource sharer")):
        try:
            raise error
        except Exception:  # noqa: BLE001
            sys.excepthook(*sys.exc_info())
    assert seen == [ValueError, ConnectionResetError]


def test_test_net_logs_as_the_rank_its_launcher_gave_it(tmp_path, monkeypatch):
    """tools/test_net.py set up its log before the process group, so every rank logged as rank 0: every rank
    printed INFO lines and appended to the same log.txt (on a shared filesystem, interleaved)."""
    from helpers import R50_YAML

    monkeypatch.setenv("RANK", "1")
    def evaluate(cfg, ckpt, skip_eval, backend, logger, local_rank=None):
        logger.info("an info line")
        logger.warning("a warning")
        return {}

    from maskrcnn_benchmark.engine import test_net as engine_test_net

    monkeypatch.setattr(engine_test_net, "evaluate_checkpoint", evaluate)
    args, opts = parse_with_overrides(test_net.build_parser(), ["--config-file", R50_YAML,
                                                               "OUTPUT_DIR", str(tmp_path)])
    try:
        assert test_net.test(args, opts) == 0
    finally:
        from maskrcnn_benchmark.utils.logger import setup_logger

        setup_logger(None)  # this test process's logging as it was
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.rank1.txt"]  # rank 0's log.txt untouched
    assert "a warning" in (tmp_path / "log.rank1.txt").read_text()
    assert "an info line" not in (tmp_path / "log.rank1.txt").read_text()


def test_only_path_errors_are_bad_input_other_os_errors_are_internal(tmp_path):
    """Every OSError was 'bad input' (exit 1, no traceback kept): too many open files, no memory, a refused
    connection inside torch. A file that is missing, unreadable, a folder, or on a full or read-only disk is the
    user's to fix (exit 1, one line); the rest is an internal error with its traceback in the log (exit 5)."""
    import errno

    from maskrcnn_benchmark.cli.exit_codes import BAD_INPUT, INTERNAL, describe

    def raised(exc):
        try:
            raise exc
        except OSError as e:
            return e

    for exc in (FileNotFoundError(errno.ENOENT, "No such file or directory", "x.json"),
                PermissionError(errno.EACCES, "Permission denied", "x.json"),
                IsADirectoryError(errno.EISDIR, "Is a directory", "x"),
                OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "bbox.json")),
                OSError(errno.EROFS, "Read-only file system", "/results/x")):
        assert describe(raised(exc))[0] == BAD_INPUT.code, exc
    for exc in (OSError(errno.EMFILE, "Too many open files"), OSError(errno.ENOMEM, "Cannot allocate memory"),
                ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"),
                OSError(errno.ENOSPC, "No space left on device")):  # /dev/shm inside torch: no file named
        code, line = describe(raised(exc))
        assert code == INTERNAL.code and "traceback in" in line, (exc, line)


def test_a_full_disk_under_the_memory_profile_names_its_file(tmp_path):
    """PROFILE=memory on a full disk: the CSV's flush raised ENOSPC without a file name, an internal error (exit
    5) since only named files are the user's to fix. It names the CSV: exit 1, one line."""
    import errno as _errno

    from maskrcnn_benchmark.cli.exit_codes import BAD_INPUT, describe
    from maskrcnn_benchmark.utils.profiling import MemoryProfiler

    prof = MemoryProfiler(str(tmp_path), rank=0)

    class Full:
        closed = False

        def write(self, data):
            raise OSError(_errno.ENOSPC, "No space left on device")

        def flush(self):
            raise OSError(_errno.ENOSPC, "No space left on device")

    prof._f = Full()
    prof._w = __import__("csv").writer(prof._f)
    with pytest.raises(OSError) as e:
        prof.step(1)
    code, line = describe(e.value)
    assert code == BAD_INPUT.code and "memory_rank0.csv" in line and "No space left" in line


def test_the_place_of_an_internal_error_is_the_packages_frame_not_a_library_in_the_checkouts_venv(tmp_path):
    """make's venv lives inside the checkout: a torch frame under .venv/ counted as "ours", and the line named
    .venv/lib/.../torch/distributed/rendezvous.py instead of the package's call."""
    import os

    from maskrcnn_benchmark.cli import exit_codes

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(exit_codes.__file__))))
    library = os.path.join(root, ".venv", "lib", "python3.11", "site-packages", "torch", "rendezvous.py")
    namespace = {}
    exec(compile("def rendezvous():\n    raise TimeoutError('1/2 clients joined')\n", library, "exec"), namespace)

    def ours():
        namespace["rendezvous"]()

    try:
        ours()
    except TimeoutError as e:
        where = exit_codes._where(e)
    assert where.startswith("tests/cli/test_command_line.py:") and "(ours)" in where, where


@pytest.mark.slow  # starts the programs
@pytest.mark.parametrize("program", ["train_mlperf.py", "test_net.py"])
def test_a_site_hook_that_fails_is_one_line(tmp_path, program):
    """TORCH_DETECTRON_ENV_MODULE (the reference's site hook) ran outside the error handling: a missing file or a
    module without setup_environment() printed a traceback."""
    import os
    import subprocess
    import sys

    from helpers import REPO

    for hook in (tmp_path / "missing.py", tmp_path / "empty.py"):
        if hook.name == "empty.py":
            hook.write_text("X = 1\n")
        r = subprocess.run([sys.executable, os.path.join(REPO, "tools", program), "--config-file",
                            os.path.join(REPO, "configs", "e2e_mask_rcnn_synthetic_cpu.yaml")],
                           capture_output=True, text=True, timeout=120, cwd=tmp_path,
                           env=dict(os.environ, TORCH_DETECTRON_ENV_MODULE=str(hook)))
        err = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert r.returncode == 1 and len(err) == 1 and err[0].startswith("error: ") and hook.name in err[0], \
            (hook.name, r.returncode, r.stderr[-2000:])
