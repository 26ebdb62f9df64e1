"""``tools/test_net.py``: evaluate weights on DATASETS.TEST, or only write the COCO results json.

    python tools/test_net.py --config-file CFG [--ckpt WEIGHTS] [--skip-eval] [--coco-backend B] KEY VALUE ...
"""
from ..config import load_config
from ..utils.env import setup_environment
from ..utils.logger import setup_logger
from ..utils.signals import stop_on_signals
from .common import parse_with_overrides, parser
from .exit_codes import SUCCESS, run_program


def build_parser():
    p = parser("Evaluate Mask R-CNN weights on DATASETS.TEST")
    p.add_argument("--ckpt", default="", help="a trained detector's weights (default: OUTPUT_DIR's last checkpoint, "
                   "as the reference, else MODEL.WEIGHT): a file that leaves a tensor of the model unset (the "
                   "ImageNet R-50.pkl, a backbone only) is refused")
    p.add_argument("--skip-eval", action="store_true", help="only write the COCO results json")
    p.add_argument("--coco-backend", default="", choices=["", "auto", "faster_coco_eval", "pycocotools"],
                   help="COCO scoring backend (default: TEST.COCO_BACKEND)")
    return p


def test(args, opts):
    cfg = load_config(args.config_file, opts)  # a config error is one line before torch is loaded
    from ..engine import test_net
    from ..utils import comm

    logger = setup_logger(cfg.OUTPUT_DIR, comm.launch_rank())  # before init_distributed: the launcher's rank
    try:
        results = test_net.evaluate_checkpoint(cfg, args.ckpt, args.skip_eval, args.coco_backend or None, logger,
                                               local_rank=args.local_rank)
    finally:
        comm.destroy()
    for name, scores in results.items():
        print(test_net.report(cfg, name, scores, args.skip_eval))
    return SUCCESS.code


def main(argv=None):
    stop_on_signals()
    args, opts = parse_with_overrides(build_parser(), argv)

    def body():
        setup_environment()  # the reference's site hook (TORCH_DETECTRON_ENV_MODULE): a failure is one line
        return test(args, opts)

    return run_program(body)
