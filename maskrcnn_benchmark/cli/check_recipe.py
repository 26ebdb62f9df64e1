"""``tools/check_recipe.py``: judge a training recipe with the MLPerf rules before spending GPU hours on it.

    python tools/check_recipe.py --world-size 32 [--ruleset 3.1.0] [--division closed] [--allow-non-rcp] \
        --config-file configs/e2e_mask_rcnn_R_50_FPN_1x.yaml SOLVER.BASE_LR 0.16 ...

Takes the training command line (options and ``KEY VALUE`` overrides, as tools/train_mlperf.py does), builds the
effective config, writes the hyperparameter lines the run would log (the trainer's own logger), and judges them
with mlperf-logging's compliance rules and RCPs and the closed division's fixed parts (mlperf_review/recipe.py).
``tools/preflight.py`` runs the same judgement with the other checks before a run.

Exit 0: acceptable (warnings, if any, on stderr); 10 (recipe refused): one ``error: recipe refused: KEY VALUE:
RULE`` line per violation. ``--allow-non-rcp`` (or ALLOW_NON_RCP=1) turns refusals into warnings: allowed for a
research run, not a closed submission.
"""
import io
import os
import sys

from .common import parse_with_overrides


def add_recipe_options(p):
    ruleset = next(a for a in p._actions if a.dest == "ruleset")  # the trainer's option: here it picks the rules
    ruleset.help = ("the MLPerf training ruleset whose compliance rules and RCPs judge the recipe (default "
                    "MLPERF_RULESET, else 3.1.0)")
    # a string default goes through type= as a given value would: WORLD_SIZE=8x is argparse's one line
    p.add_argument("--world-size", type=int, default=os.environ.get("WORLD_SIZE", "").strip() or "0",
                   help="number of training processes (GPUs) of the run; default WORLD_SIZE")
    p.add_argument("--division", default=os.environ.get("MLPERF_SUBMISSION_DIVISION", "").strip() or "closed",
                   choices=["closed", "open"])
    p.add_argument("--allow-non-rcp", action="store_true", default=os.environ.get("ALLOW_NON_RCP", "0") == "1",
                   help="warn instead of refusing (research runs)")


def build_parser():
    from .train_mlperf import build_parser as train_parser

    p = train_parser()
    p.description = "Check an MLPerf Mask R-CNN training recipe (compliance rules and RCPs) before training"
    add_recipe_options(p)
    return p


def judge_recipe(cfg, world_size, ruleset, division="closed", allow_non_rcp=False, out=None):
    """Print the verdict on ``cfg``'s recipe at ``world_size`` processes (warnings and refusals to stderr) and
    raise :class:`~maskrcnn_benchmark.utils.errors.RecipeRefused` when it is refused. The config is resolved
    first (:func:`~maskrcnn_benchmark.engine.resolve.resolve`, for ``MODEL.DEVICE``), as the run resolves it."""
    from mlperf_review.recipe import check_recipe
    from mlperf_review.rules import CLOSED_FIXED_CONFIG, SUPPORTED_RULESETS

    from ..config.config_utils import _get
    from ..engine.resolve import resolve
    from ..utils.errors import ConfigError, RecipeRefused
    from ..utils.mlperf_logger import MLPerfLogger

    out = sys.stdout if out is None else out  # the stream of the call, not of the import
    if world_size < 0:
        raise ConfigError(f"--world-size {world_size}: the number of GPUs of the run cannot be negative")
    if world_size == 0:
        raise ConfigError("--world-size (or WORLD_SIZE) is needed: the number of GPUs of the run")
    if ruleset not in SUPPORTED_RULESETS:  # (mlperf-logging's rules for it would be missing: an internal error)
        raise ConfigError(f"--ruleset (or MLPERF_RULESET) '{ruleset}' is not a Mask R-CNN training ruleset: "
                          f"{', '.join(SUPPORTED_RULESETS)}")
    if division not in ("closed", "open"):  # argparse checks the choices of a given option, not of its default
        raise ConfigError(f"--division (or MLPERF_SUBMISSION_DIVISION) '{division}' is neither closed nor open")
    cfg = resolve(cfg, cfg.MODEL.DEVICE, world_size)
    stream = io.StringIO()
    logger = MLPerfLogger(stream=stream, ruleset=ruleset)
    logger.hyperparameters(cfg, world_size)
    logger.close()
    per_chip, rest = divmod(cfg.SOLVER.IMS_PER_BATCH, world_size)  # not a whole number: the batch check's to say
    verdict = check_recipe(stream.getvalue(), ruleset, division, allow_non_rcp,
                           images_per_chip=None if rest else per_chip,
                           config={key: _get(cfg, key) for key in (*CLOSED_FIXED_CONFIG, "SOLVER.WARMUP_METHOD")})
    for w in verdict.warnings:
        print(f"check_recipe: WARNING: {w}", file=sys.stderr)
    for r in verdict.refusals[:-1]:
        print(f"error: recipe refused: {r}", file=sys.stderr)
    if verdict.refusals:
        raise RecipeRefused(f"recipe refused: {verdict.refusals[-1]} (fix the recipe, or ALLOW_NON_RCP=1 / "
                            "--allow-non-rcp for a research run)")
    h = verdict.hparams
    what = ("not an RCP recipe: allowed for a research run, not a closed submission" if verdict.allowed else
            f"recipe accepted for training {ruleset} {division}"
            f"{f' (RCP {verdict.rcp})' if verdict.rcp else ''}")
    print(f"check_recipe: {what}: global batch {h.get('global_batch_size')}, LR {h.get('opt_base_learning_rate')}, "
          f"warmup {h.get('opt_learning_rate_warmup_steps')} x {h.get('opt_learning_rate_warmup_factor')}, decay "
          f"steps {h.get('opt_learning_rate_decay_steps')}", file=out)
    return verdict


def main(argv=None):
    from .exit_codes import run_program

    args, opts = parse_with_overrides(build_parser(), argv)

    def body():
        from ..config import load_config

        cfg = load_config(args.config_file, opts, freeze=True)
        judge_recipe(cfg, args.world_size, args.ruleset, args.division, args.allow_non_rcp)
        return 0

    return run_program(body)
