"""``tools/preflight.py``: everything that can end a run, checked before it starts, each with its own exit code.

    python tools/preflight.py --world-size 32 [--nproc-per-node 8] [--allow-non-rcp] [--gpus-elsewhere] \
        --config-file configs/e2e_mask_rcnn_R_50_FPN_1x.yaml KEY VALUE ...

The training command line, and: the recipe against the MLPerf rules (as ``tools/check_recipe.py``), the global
batches against the number of processes, the GPUs of this node against the processes per node (a CUDA config),
the annotation files and image folders of the datasets, the weights file (or the ``--resume`` checkpoint instead
of MODEL.WEIGHT) (:func:`~maskrcnn_benchmark.engine.preflight.check_before_init`). ``run_and_time.sh`` runs it before
it starts bind_launch, and the Slurm job runs that once before its trials (on the batch host in the container; under
pyxis in a 1-node srun step), for all the job's nodes; the trainer repeats the cheap checks before ``init_start``.

Exit codes (maskrcnn_benchmark/cli/exit_codes.py): 0 ready; 10 recipe refused; 11 dataset missing; 12 weights
missing; 13 batch not divisible; 14 too few GPUs; 15 no GPU; 1 a config that does not load.
"""
import os

from .check_recipe import add_recipe_options, judge_recipe
from .common import parse_with_overrides


def build_parser():
    from .train_mlperf import build_parser as train_parser

    p = train_parser()
    p.description = "Check what would end an MLPerf Mask R-CNN run before it starts"
    add_recipe_options(p)
    p.add_argument("--nproc-per-node", type=int, default=os.environ.get("LOCAL_WORLD_SIZE", "").strip() or "1",
                   help="processes (GPUs) per node: this node must have as many GPUs (CUDA configs)")
    p.add_argument("--gpus-elsewhere", action="store_true",
                   help="this host only submits (a login node): the GPUs are not checked here but on the job's "
                        "nodes, by the trainer before init_start")
    return p


def main(argv=None):
    from .exit_codes import run_program

    args, opts = parse_with_overrides(build_parser(), argv)

    def body():
        from ..config import load_config
        from ..engine.preflight import check_before_init

        if args.compile is not None:
            opts.extend(["COMPILE", str(args.compile)])
        from ..utils.errors import DatasetError

        cfg = load_config(args.config_file, opts, freeze=True)

        def check_files():
            check_before_init(cfg, args.world_size, args.nproc_per_node, resume=args.resume,
                              gpus_here=not args.gpus_elsewhere, coco_backend=args.coco_backend)

        try:
            judge_recipe(cfg, args.world_size, args.ruleset, args.division, args.allow_non_rcp)
        except DatasetError:
            # NUM_CLASSES left to the data: judging the recipe read the training annotations; a missing file is
            # the file check's to name, with its own code (as the trainer, which checks the files first)
            check_files()
            raise
        check_files()
        where = "; the GPUs are checked on the job's nodes" if args.gpus_elsewhere else ""
        print(f"preflight: ready: {args.world_size} processes ({args.nproc_per_node} per node), device "
              f"{cfg.MODEL.DEVICE}, data and weights found{where}")
        return 0

    return run_program(body)
