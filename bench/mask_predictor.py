#!/usr/bin/env python
"""The mask predictor (2x2 deconvolution, ReLU, 1x1 logits) as matrix products against torch's convolutions.

    python bench/mask_predictor.py [--threads 2] [--repeats 15] [--scale 1.0]

``MaskRCNNC4Predictor.forward`` computes deconvolution -> ReLU -> 1x1 convolution as two matrix products per
input pixel (the deconvolution's 2x2 output blocks do not overlap), in chunks of rows when no gradient is needed.
The other form is the same module's ``conv5_mask`` and ``mask_fcn_logits`` called as the ConvTranspose2d and
Conv2d they are (what the reference runs). Both on the same channels-last input (the CPU mask head's layout),
interleaved; prints the fastest of ``--repeats`` runs of each case in ms (the least disturbed: on a shared
machine the convolutions' large intermediate makes their medians swing by 2x) and the largest difference of the
logits (float rounding: the same sums in another order). ``--scale`` multiplies the rows (a quick run: 0.1).
"""
import argparse
import sys
import time

import torch
import torch.nn.functional as F

from maskrcnn_benchmark.config import cfg as default_cfg
from maskrcnn_benchmark.modeling.roi_heads.mask_head import MaskRCNNC4Predictor

# (what, rows, channels, classes, forward + backward)
CASES = [
    ("demo training (4 images, positives)", 64, 64, 4, True),
    ("demo inference (8 images)", 150, 64, 4, False),
    ("demo inference (100 images at once)", 1920, 64, 4, False),
    ("COCO training (2 images x 128)", 256, 256, 81, True),
    ("COCO inference (1 image, 100 detections)", 100, 256, 81, False),
]


def predictor(channels, classes):
    cfg = default_cfg.clone()
    cfg.merge_from_list(["MODEL.ROI_BOX_HEAD.NUM_CLASSES", classes, "MODEL.ROI_MASK_HEAD.CONV_LAYERS",
                         (channels,) * 4])
    return MaskRCNNC4Predictor(cfg, channels)


def convolutions(m):
    return lambda x: m.mask_fcn_logits(F.relu(m.conv5_mask(x)))


def run(fn, x, backward):
    if backward:
        fn(x).sum().backward()
    else:
        with torch.no_grad():
            fn(x)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--scale", type=float, default=1.0)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(f"mask_predictor: torch {torch.__version__}, {torch.get_num_threads()} threads, fastest of "
          f"{args.repeats}, input channels-last 14x14\n")
    print("| case | rows | channels | matrix products ms | ConvTranspose2d + Conv2d ms | largest difference |")
    print("|---|---:|---:|---:|---:|---:|")
    for what, rows, channels, classes, backward in CASES:
        rows = max(1, round(rows * args.scale))
        m = predictor(channels, classes)
        x = torch.randn(rows, channels, 14, 14).contiguous(memory_format=torch.channels_last)
        x.requires_grad_(backward)
        times = {m: [], convolutions(m): []}
        for fn in times:
            run(fn, x, backward)  # warm-up
        for _ in range(args.repeats):
            for fn, t in times.items():
                start = time.perf_counter()
                run(fn, x, backward)
                t.append(1000 * (time.perf_counter() - start))
        with torch.no_grad():
            diff = (m(x) - convolutions(m)(x)).abs().max().item()
        ours, theirs = (min(t) for t in times.values())
        print(f"| {what}{' fwd + bwd' if backward else ''} | {rows} | {channels} | {ours:.1f} | {theirs:.1f} "
              f"| {diff:.1e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
