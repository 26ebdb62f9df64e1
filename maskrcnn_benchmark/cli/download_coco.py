"""Download, verify (md5) and unpack COCO 2017 into the layout the configs expect.

    python tools/download_coco.py --out /data                  # train2017/ val2017/ annotations/
    python tools/download_coco.py --out /data --weights-dir /coco/models   # + R-50.pkl (ImageNet R-50)

Result (``--out DIR``)::

    DIR/train2017/*.jpg
    DIR/val2017/*.jpg
    DIR/annotations/instances_train2017.json, instances_val2017.json, ...

Zips are kept in ``--zips-dir`` (default ``DIR/zips``) unless ``--remove-zips``; a zip already there with the
right md5 is not downloaded again, and a part already unpacked (marker ``DIR/.unpacked-<zip>``, or its files all
there: a COCO copied from elsewhere, without its zips) is skipped.

    python tools/download_coco.py --out /data --verify-only [--weights-dir /coco/models]

checks an existing dataset without downloading anything: both annotation files parse, every image they list is
in its folder, and R-50.pkl is there; exit 1 with what is missing.
``--base-url`` may be ``file:///some/dir`` (offline mirrors, tests); ``--checksums FILE`` (md5sum format)
replaces the built-in md5s.  Exit code 0 on success, 1 on a checksum mismatch or a download error.
"""

import argparse
import hashlib
import json
import os
import shutil
import sys
import urllib.request
import zipfile

from .common import Parser
from ..utils.fileio import atomic_write

BASE_URL = "http://images.cocodataset.org"
PARTS = {
    # name: (path under the base URL, md5)
    "train": ("zips/train2017.zip", "cced6f7f71b7629ddf16f17bbcfab6b2"),
    "val": ("zips/val2017.zip", "442b8da7639aecaf257c1dceb8ba8c80"),
    "annotations": ("annotations/annotations_trainval2017.zip", "f4bbac642086de4f52a3fdda2de5fa2c"),
}
WEIGHTS_URL = "https://dl.fbaipublicfiles.com/detectron/ImageNetPretrained/MSRA/R-50.pkl"
EXPECTED = ["train2017", "val2017", "annotations/instances_train2017.json", "annotations/instances_val2017.json"]


def md5sum(path, chunk=1 << 20):
    h = hashlib.md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def read_checksums(path):
    sums = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2 and not line.startswith("#"):
                sums[os.path.basename(parts[1].lstrip("*"))] = parts[0].lower()
    return sums


def download(url, dest, quiet=False):
    with urllib.request.urlopen(url, timeout=60) as r, atomic_write(dest, "wb", what="download") as f:
        total = int(r.headers.get("Content-Length") or 0)
        done, last = 0, -1
        while True:
            block = r.read(1 << 20)
            if not block:
                break
            f.write(block)
            done += len(block)
            pct = int(100 * done / total) if total else -1
            if not quiet and total and pct // 10 != last:
                last = pct // 10
                print(f"  {os.path.basename(dest)}: {pct}% of {total / 1e6:.0f} MB", flush=True)


def safe_extract(zpath, out):
    root = os.path.realpath(out)
    with zipfile.ZipFile(zpath) as z:
        for m in z.infolist():
            target = os.path.realpath(os.path.join(out, m.filename))
            if target != root and not target.startswith(root + os.sep):
                raise ValueError(f"{zpath}: unsafe member path {m.filename!r}")
        z.extractall(out)


SPLITS = {"train": ("train2017", "annotations/instances_train2017.json"),
          "val": ("val2017", "annotations/instances_val2017.json")}


def _image_files(ann_path):
    with open(ann_path) as f:
        return [im["file_name"] for im in json.load(f).get("images", [])]


def verify_part(name, out):
    """Problems of an unpacked part (an empty list when it is complete). Nothing is downloaded."""
    if name == "annotations":
        problems = []
        for _, ann in SPLITS.values():
            path = os.path.join(out, ann)
            try:
                _image_files(path)
            except FileNotFoundError:
                problems.append(f"{path} is missing")
            except (OSError, ValueError) as e:
                problems.append(f"{path} does not parse: {e}")
        return problems
    folder, ann = SPLITS[name]
    images, ann_path = os.path.join(out, folder), os.path.join(out, ann)
    if not os.path.isdir(images):
        return [f"{images}/ is missing"]
    try:
        listed = _image_files(ann_path)
    except (OSError, ValueError):
        return [f"{ann_path} is missing or does not parse: cannot tell which images {folder}/ must hold"]
    present = set(os.listdir(images))
    missing = [f for f in listed if f not in present]
    return [f"{images}/: {len(missing)} of {len(listed)} images listed in {ann} are missing (e.g. {missing[0]})"] \
        if missing else []


def verify_only(args):
    problems = []
    for name in ("annotations", "train", "val"):
        found = verify_part(name, args.out)
        problems += found
        if not found and name != "annotations":
            print(f"{name}: {len(_image_files(os.path.join(args.out, SPLITS[name][1])))} images, all present")
    if args.weights_dir:
        dest = os.path.join(args.weights_dir, "R-50.pkl")
        if not os.path.isfile(dest) or os.path.getsize(dest) == 0:
            problems.append(f"{dest} is missing or empty")
        else:
            print(f"weights: {dest} ({os.path.getsize(dest) / 1e6:.0f} MB)")
    for p in problems:
        print(f"error: {p}", file=sys.stderr)
    if problems:
        print(f"verify: {args.out} is incomplete (rerun without --verify-only to fetch what is missing)",
              file=sys.stderr)
        return 1
    print(f"verified: {args.out}")
    return 0


def fetch_part(name, args, sums):
    rel, md5 = PARTS[name]
    fname = os.path.basename(rel)
    md5 = sums.get(fname, md5)
    marker = os.path.join(args.out, f".unpacked-{fname}")
    if os.path.exists(marker):
        print(f"{name}: already unpacked ({marker})")
        return True
    if not verify_part(name, args.out):  # unpacked without a marker (copied from elsewhere): not fetched again
        print(f"{name}: already there, complete (no zip needed)")
        open(marker, "w").close()
        return True
    zpath = os.path.join(args.zips_dir, fname)
    if os.path.exists(zpath) and (args.no_verify or md5sum(zpath) == md5):
        print(f"{name}: {zpath} present{'' if args.no_verify else ', md5 ok'}")
    else:
        url = f"{args.base_url.rstrip('/')}/{rel}"
        print(f"{name}: downloading {url}", flush=True)
        try:
            download(url, zpath, args.quiet)
        except OSError as e:
            print(f"{name}: download failed: {e}", file=sys.stderr)
            return False
        if not args.no_verify:
            got = md5sum(zpath)
            if got != md5:
                print(f"{name}: md5 mismatch for {zpath}: got {got}, expected {md5}; removing it", file=sys.stderr)
                os.remove(zpath)
                return False
            print(f"{name}: md5 ok ({md5})")
    print(f"{name}: unpacking into {args.out}", flush=True)
    try:
        safe_extract(zpath, args.out)
    except (ValueError, zipfile.BadZipFile, OSError) as e:
        print(f"{name}: cannot unpack: {e}", file=sys.stderr)
        return False
    open(marker, "w").close()
    if args.remove_zips:
        os.remove(zpath)
    return True


def _parts(text):
    parts = [x.strip() for x in text.split(",") if x.strip()]
    unknown = [x for x in parts if x not in PARTS]
    if unknown or not parts:
        raise argparse.ArgumentTypeError(f"unknown parts {unknown or text!r} in '{text}'; choose from "
                                         f"{','.join(sorted(PARTS))}")
    return parts


def build_parser():
    p = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="dataset root (mounted as /data in the container)")
    p.add_argument("--parts", type=_parts, default="train,val,annotations",
                   help="comma list of train,val,annotations")
    return p


def main(argv=None):
    p = build_parser()
    p.add_argument("--base-url", default=BASE_URL, help=f"mirror (default {BASE_URL}; file:// works)")
    p.add_argument("--zips-dir", default=None, help="where the zips go (default OUT/zips)")
    p.add_argument("--checksums", default=None, help="md5sum-format file overriding the built-in md5s")
    p.add_argument("--no-verify", action="store_true", help="skip the md5 check")
    p.add_argument("--remove-zips", action="store_true", help="delete each zip after unpacking")
    p.add_argument("--weights-dir", default=None, help="also fetch R-50.pkl (ImageNet ResNet-50) here")
    p.add_argument("--weights-url", default=WEIGHTS_URL)
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--verify-only", action="store_true",
                   help="check the dataset (and weights) that is there; download nothing")
    args = p.parse_args(argv)
    if args.verify_only:
        return verify_only(args)

    args.zips_dir = args.zips_dir or os.path.join(args.out, "zips")
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.zips_dir, exist_ok=True)
    sums = read_checksums(args.checksums) if args.checksums else {}
    parts = list(args.parts)
    # the annotations first: they say which images a folder copied from elsewhere must hold (else its zip is fetched)
    parts.sort(key=lambda name: name != "annotations")
    ok = all([fetch_part(name, args, sums) for name in parts])
    if args.weights_dir:
        os.makedirs(args.weights_dir, exist_ok=True)
        dest = os.path.join(args.weights_dir, "R-50.pkl")
        if not os.path.exists(dest):
            print(f"weights: downloading {args.weights_url}", flush=True)
            try:
                download(args.weights_url, dest, args.quiet)
            except OSError as e:
                print(f"weights: download failed: {e}", file=sys.stderr)
                ok = False
        if os.path.exists(dest):
            print(f"weights: {dest} md5 {md5sum(dest)}")
    if not ok:
        return 1
    if set(parts) == set(PARTS):
        missing = [e for e in EXPECTED if not os.path.exists(os.path.join(args.out, e))]
        if missing:
            print(f"layout incomplete under {args.out}: missing {missing}", file=sys.stderr)
            return 1
    if args.remove_zips and not os.listdir(args.zips_dir):
        shutil.rmtree(args.zips_dir)
    print(f"done: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
