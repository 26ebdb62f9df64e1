#!/usr/bin/env python
"""What checking that every image of a split exists costs, at COCO train's size.

Creates ``--files`` empty files named like COCO's (``000000xxxxxx.jpg``) in a temporary folder (``--dir``, on the
file system to measure), then times, with the files just written (the file system's caches warm: a cold first
check on a shared file system costs more, and this bench does not measure it), the fastest of ``--repeat`` runs of
the check the dataset does (:func:`maskrcnn_benchmark.data.datasets.coco.missing_files`: one directory listing per
folder), and of one ``os.stat`` per file. Prints a table; the last line is ``file check: <F> files, listing <L> s, stat <S> s``.

    python bench/file_check.py [--files 118287] [--dir /scratch/tmp]
"""
import argparse
import os
import shutil
import sys
import tempfile
import time

from maskrcnn_benchmark.data.datasets.coco import missing_files


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--files", type=int, default=118287, help="number of files (COCO train 2017: 118287)")
    p.add_argument("--dir", default=None, help="where to create the folder (default: the system temp folder)")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    root = tempfile.mkdtemp(prefix="file-check-", dir=args.dir)
    try:
        names = [f"{i:012d}.jpg" for i in range(1, args.files + 1)]
        for n in names:
            open(os.path.join(root, n), "wb").close()
        listing, stat = [], []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            assert missing_files(root, names) == []
            listing.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            for n in names:
                os.stat(os.path.join(root, n))
            stat.append(time.perf_counter() - t0)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"| check ({args.files} files, {os.path.dirname(root) or '.'}) | seconds (min of {args.repeat}) |")
    print("|---|---:|")
    print(f"| one directory listing (what the dataset does) | {min(listing):.3f} |")
    print(f"| one os.stat per file | {min(stat):.3f} |")
    print(f"file check: {args.files} files, listing {min(listing):.3f} s, stat {min(stat):.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
