#!/usr/bin/env python
"""Check a training recipe against the MLPerf rules before spending GPU hours on it.

    python tools/check_recipe.py --world-size 32 [--ruleset 3.1.0] [--division closed] [--allow-non-rcp] \
        --config-file configs/e2e_mask_rcnn_R_50_FPN_1x.yaml SOLVER.BASE_LR 0.16 ...

Takes the training command line (options and ``KEY VALUE`` overrides, as tools/train_mlperf.py does), builds the
effective config, writes the hyperparameter lines the run would log (the trainer's own logger), and judges them
with mlperf-logging's compliance rules and RCPs (mlperf_review/recipe.py). run_and_time.sh, the Slurm scripts and
tools/submit.py call it before training.

Exit 0: acceptable (warnings, if any, on stderr); 1: refused, one ``error: recipe refused: KEY VALUE: RULE`` line
per violation. ``--allow-non-rcp`` (or ALLOW_NON_RCP=1) turns refusals into warnings, for research runs.
"""
import io
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from maskrcnn_benchmark.cli.common import parse_with_overrides  # noqa: E402
from maskrcnn_benchmark.cli.train_mlperf import build_parser  # noqa: E402


def main(argv=None):
    p = build_parser()
    p.description = "Check an MLPerf Mask R-CNN training recipe (compliance rules and RCPs) before training"
    p.add_argument("--world-size", type=int, default=int(os.environ.get("WORLD_SIZE", "0") or 0),
                   help="number of training processes (GPUs) of the run; default WORLD_SIZE")
    p.add_argument("--division", default=os.environ.get("MLPERF_SUBMISSION_DIVISION", "closed"),
                   choices=["closed", "open"])
    p.add_argument("--allow-non-rcp", action="store_true", default=os.environ.get("ALLOW_NON_RCP", "0") == "1",
                   help="warn instead of refusing (research runs)")
    args, opts = parse_with_overrides(p, argv)
    try:
        from maskrcnn_benchmark.config import load_config
        from maskrcnn_benchmark.utils.mlperf_logger import MLPerfLogger
        from mlperf_review.recipe import check_recipe

        cfg = load_config(args.config_file, opts, freeze=True)
        if args.world_size <= 0:
            raise ValueError("--world-size (or WORLD_SIZE) is needed: the number of GPUs of the run")
        stream = io.StringIO()
        logger = MLPerfLogger(stream=stream, ruleset=args.ruleset)
        logger.hyperparameters(cfg, args.world_size)
        logger.close()
        verdict = check_recipe(stream.getvalue(), args.ruleset, args.division, args.allow_non_rcp)
    except Exception as e:  # a config that does not load: the loader's message names the key or file
        print(f"error: recipe not checked: {e}", file=sys.stderr)
        return 1
    for w in verdict.warnings:
        print(f"check_recipe: WARNING: {w}", file=sys.stderr)
    for r in verdict.refusals:
        print(f"error: recipe refused: {r}", file=sys.stderr)
    if not verdict.ok:
        print("check_recipe: fix the recipe, or pass --allow-non-rcp (ALLOW_NON_RCP=1) for a research run",
              file=sys.stderr)
        return 1
    h = verdict.hparams
    print(f"check_recipe: recipe accepted for training {args.ruleset} {args.division}"
          f"{f' (RCP {verdict.rcp})' if verdict.rcp else ''}: global batch {h.get('global_batch_size')}, "
          f"LR {h.get('opt_base_learning_rate')}, warmup {h.get('opt_learning_rate_warmup_steps')} x "
          f"{h.get('opt_learning_rate_warmup_factor')}, decay steps {h.get('opt_learning_rate_decay_steps')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
