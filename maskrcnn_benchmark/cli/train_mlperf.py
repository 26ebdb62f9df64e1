"""``tools/train_mlperf.py``: one MLPerf training run, with NVIDIA v0.7's command line.

    python tools/train_mlperf.py --config-file configs/e2e_mask_rcnn_R_50_FPN_1x.yaml [--local_rank N]
        [--seed S] [--resume CHECKPOINT] [--sync-eval] [--coco-backend B] [--timeout S]
        [--compile | --no-compile] KEY VALUE ...

Exit codes: :mod:`maskrcnn_benchmark.cli.exit_codes` (0 target reached, 3 not reached, ...).
"""
import argparse
import os

from .common import parse_with_overrides, parser

# The run (torch, the model, the engine) is imported when training starts, not with the parser:
# tools/check_recipe.py reads the same command line in a second.


def _seconds(text):
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v <= 0:
        raise argparse.ArgumentTypeError(f"invalid timeout '{text}' (need a whole number of seconds, at least 1)")
    return v


def build_parser():
    p = parser("MLPerf Mask R-CNN training")
    p.add_argument("--seed", type=int, default=None, help="master seed (default: random, logged)")
    p.add_argument("--resume", default="", metavar="CHECKPOINT",
                   help="resume from a checkpoint of this trainer: model, optimizer, LR schedule, gradient scaler, "
                        "data order and random state continue where it was saved, under the same SOLVER recipe "
                        "(another is refused; MAX_ITER may grow); MODEL.WEIGHT is not read. A run's folder "
                        "(OUTPUT_DIR) resumes from the checkpoint its last_checkpoint names")
    p.add_argument("--ruleset", default=os.environ.get("MLPERF_RULESET", "3.1.0"),
                   help="accepted for compatibility: the log always holds the keys of every Mask R-CNN ruleset "
                        "(0.7.0 ... 3.1.0)")
    p.add_argument("--sync-eval", action="store_true", help="score COCO in-process instead of asynchronously")
    p.add_argument("--coco-backend", default="", choices=["", "auto", "faster_coco_eval", "pycocotools"],
                   help="COCO scoring backend (default: TEST.COCO_BACKEND, auto = faster-coco-eval if installed)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--compile", dest="compile", action="store_const", const=True, default=None,
                      help="compile the training step (COMPILE True; default: off, the eager step measured fastest)")
    mode.add_argument("--no-compile", dest="compile", action="store_const", const=False,
                      help="train eagerly (COMPILE False)")
    p.add_argument("--timeout", type=_seconds, default=None,
                   help="seconds a collective may wait for the other ranks (default: DISTRIBUTED_TIMEOUT)")
    return p


def train(args, opts, started=None):
    """Train one MLPerf run; ``started(run)`` receives the :class:`MLPerfRun` before it runs."""
    from ..config import load_config
    from .exit_codes import NOT_CONVERGED, SUCCESS

    if args.compile is not None:
        opts = list(opts) + ["COMPILE", str(args.compile)]
    cfg = load_config(args.config_file, opts, freeze=True)  # a config error is one line before torch is loaded
    from ..engine.run import MLPerfRun, RunOptions

    options = RunOptions(seed=args.seed, resume=args.resume, sync_eval=args.sync_eval,
                         coco_backend=args.coco_backend, timeout=args.timeout, local_rank=args.local_rank,
                         ruleset=args.ruleset)
    run = MLPerfRun(cfg, options)
    if started is not None:
        started(run)
    outcome = run.run()
    if run.rank == 0:
        try:
            for line in outcome.summary():
                print(line, flush=True)
        except OSError:  # a terminal gone (a pipe's reader stopped): the outcome is the exit code and the logs'
            pass
    return SUCCESS.code if outcome.success else NOT_CONVERGED.code


def train_program(args, opts, site_hook=True):
    """:func:`train` through :func:`~.exit_codes.run_program`: its exit code, a failure's one ``error:`` line.
    ``site_hook``: run the reference's site hook (TORCH_DETECTRON_ENV_MODULE) first; a failure is one line."""
    from ..utils.env import setup_environment
    from .exit_codes import run_program

    runs = []

    def body():
        if site_hook:
            setup_environment()
        return train(args, opts, runs.append)

    def stopped_note():
        """A stop after run_start leaves run_stop aborted in the MLPerf log (MLPerfRun logs it on the way out);
        one before it leaves no run_stop, and no run to review; one after a run_stop success leaves that."""
        ml = runs[0].ml if runs else None
        if ml is not None and ml.run_stop_status == "success":
            return "after run_stop success (the MLPerf log's outcome stands)"
        if ml is not None and "run_start" in ml.logged:
            return "run_stop logged as aborted"
        return "before run_start: the MLPerf log has no run_stop"

    return run_program(body, stopped_note)


def main(argv=None):
    from ..utils.signals import stop_on_signals

    stop_on_signals()
    args, opts = parse_with_overrides(build_parser(), argv)
    return train_program(args, opts)
