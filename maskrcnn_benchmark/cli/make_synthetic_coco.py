"""``tools/make_synthetic_coco.py``: write the deterministic synthetic COCO-format dataset (COCO 2017 layout).

    python tools/make_synthetic_coco.py --out datasets/synthetic [--train 600] [--val 100] [--seed 0]
        [--size 128x128 | --sizes 128x128,160x128 | --min-size 96 --max-size 160] [--force] [--quiet]
"""
import argparse
import sys

from .common import Parser
from ..synthetic import DEFAULT_SIZE, DEFAULT_TRAIN, DEFAULT_VAL, MAX_IMAGES, MAX_SIDE, MIN_SIDE, \
    make_synthetic_coco, sizes_between


def _count(text):
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid count '{text}' (need a non-negative integer)") from None
    if not 0 <= v <= MAX_IMAGES:
        raise argparse.ArgumentTypeError(f"count {v} out of range (0..{MAX_IMAGES})")
    return v


def _side(text):
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid image side '{text}' (need an integer)") from None
    if not MIN_SIDE <= v <= MAX_SIDE:
        raise argparse.ArgumentTypeError(f"image side {v} out of range ({MIN_SIDE}..{MAX_SIDE})")
    return v


def _seed(text):
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid seed '{text}' (need a non-negative integer)") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"invalid seed {v} (need a non-negative integer)")
    return v


def _sizes(text):
    out = []
    for part in text.split(","):
        part = part.strip().lower()
        try:
            w, h = (int(v) for v in part.split("x"))
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid size '{part}' (need WxH, e.g. 128x128)") from None
        if not (MIN_SIDE <= w <= MAX_SIDE and MIN_SIDE <= h <= MAX_SIDE):
            raise argparse.ArgumentTypeError(f"size '{part}' out of range (sides {MIN_SIDE}..{MAX_SIDE})")
        out.append((w, h))
    return out


def main(argv=None, prog=None):
    p = Parser(prog=prog, description="Write a deterministic synthetic COCO-format dataset (shapes on textured "
                                       "backgrounds) in the COCO 2017 layout.")
    p.add_argument("--out", required=True, help="output directory (train2017/, val2017/, annotations/)")
    p.add_argument("--train", type=_count, default=DEFAULT_TRAIN, help=f"training images (default {DEFAULT_TRAIN})")
    p.add_argument("--val", type=_count, default=DEFAULT_VAL, help=f"validation images (default {DEFAULT_VAL})")
    p.add_argument("--seed", type=_seed, default=0, help="random seed (default 0)")
    p.add_argument("--size", "--sizes", dest="sizes", type=_sizes, action="append",
                   help="image size WxH; a comma list or repeated for several (default 128x128)")
    p.add_argument("--min-size", type=_side, help="random sizes: smallest side (with --max-size, steps of 16)")
    p.add_argument("--max-size", type=_side, help="random sizes: largest side")
    p.add_argument("--force", action="store_true", help="write into a directory holding a dataset not made here")
    p.add_argument("--quiet", action="store_true", help="no summary line")
    args = p.parse_args(argv)

    if (args.min_size is None) != (args.max_size is None):
        p.error("--min-size and --max-size go together")
    if args.min_size is not None:
        if args.sizes:
            p.error("--size cannot be combined with --min-size/--max-size")
        if args.min_size > args.max_size:
            p.error(f"--min-size {args.min_size} is larger than --max-size {args.max_size}")
        sizes = sizes_between(args.min_size, args.max_size)
    elif args.sizes:
        sizes = [s for group in args.sizes for s in group]
    else:
        sizes = [DEFAULT_SIZE]
    try:
        summary = make_synthetic_coco(args.out, num_train=args.train, num_val=args.val, image_size=sizes,
                                      seed=args.seed, force=args.force)
    except (ValueError, OSError) as e:
        if isinstance(e, OSError) and e.strerror:
            msg = f"{e.strerror}: '{e.filename}'" if e.filename else e.strerror
        else:
            msg = str(e)
        print(f"{p.prog}: error: {msg}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{p.prog}: interrupted", file=sys.stderr)
        return 130
    if not args.quiet:
        tr, va = summary["train"], summary["val"]
        print(f"wrote {tr['images']} train / {va['images']} val images ({tr['annotations']} / {va['annotations']} "
              f"objects) to {summary['out_dir']} in {summary['seconds']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(prog="python -m maskrcnn_benchmark.cli.make_synthetic_coco"))
