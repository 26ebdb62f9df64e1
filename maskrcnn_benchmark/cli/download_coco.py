"""Download, verify (md5) and unpack COCO 2017 into the layout the configs expect.

    python tools/download_coco.py --out /data                  # train2017/ val2017/ annotations/
    python tools/download_coco.py --out /data --weights-dir /coco/models   # + R-50.pkl (ImageNet R-50)

Result (``--out DIR``)::

    DIR/train2017/*.jpg
    DIR/val2017/*.jpg
    DIR/annotations/instances_train2017.json, instances_val2017.json, ...

Zips are kept in ``--zips-dir`` (default ``DIR/zips``) unless ``--remove-zips``; a zip already there with the
right md5 is not downloaded again, and a part already unpacked and complete (marker ``DIR/.unpacked-<zip>``, or its
files all there, of their sizes in the zip where it is there: a COCO copied from elsewhere, without its zips) is
skipped; an unpacked part found incomplete is unpacked again. A download is checked against its Content-Length (a
connection dropped midway is an error, not a file); what arrived before a failure or Ctrl-C is kept in
``<zip>.partial`` and the next run asks for the rest (HTTP Range). A run holds ``DIR/.download_coco.lock`` (and the
same in a ``--zips-dir`` outside DIR): a second one into the same folder is refused.

    python tools/download_coco.py --out /data --verify-only [--weights-dir /coco/models]

checks an existing dataset without downloading anything: both annotation files parse (a file that says it is COCO
2017 must list its 118287 and 5000 images; this package's synthetic set is named in a warning), every image
they list is in its folder and not empty (and of its size in the zip, where the zip is there), and R-50.pkl reads
as Detectron weights; exit 1 with what is wrong.
``--base-url`` may be ``file:///some/dir`` (offline mirrors, tests); ``--checksums FILE`` (md5sum format)
replaces the built-in md5s.  Exit code 0 on success, 1 on a checksum mismatch or a download error.
"""

import argparse
import hashlib
import http.client
import json
import os
import shutil
import sys
import urllib.error
import urllib.request
import zipfile
import zlib

from .common import Parser
from ..utils.fileio import WriteError, remove_stale_temp_files

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
    """``{zip name: md5}`` of an md5sum-format file; a line whose first field is not an md5 (a sha256sum file)
    is an error: it would match no zip, and a good zip would be fetched again and deleted."""
    sums = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            parts = line.split()
            if len(parts) >= 2 and not line.startswith("#"):
                md5 = parts[0].lower()
                if len(md5) != 32 or any(c not in "0123456789abcdef" for c in md5):
                    raise ValueError(f"{path} line {n}: '{parts[0]}' is not an md5 (32 hex digits; the md5sum "
                                     "format is: <md5>  <file name>)")
                sums[os.path.basename(parts[1].lstrip("*"))] = md5
    return sums


class ReadFailed(Exception):
    """The network failed mid-download (a timeout, a reset, the connection ended early). Not an OSError: the
    file being written would report it as its own write's failure."""


# what a download can end with besides a complete file: OSError (urllib's URLError and HTTPError too, and a write
# that failed), a chunked transfer cut off (http.client.IncompleteRead, an HTTPException), a read that failed
DOWNLOAD_ERRORS = (OSError, http.client.HTTPException, ReadFailed)


def _why(e):
    return str(e) if isinstance(e, (OSError, ValueError, ReadFailed)) and str(e) else f"{type(e).__name__}: {e}"


PARTIAL = ".partial"  # what a download has received so far, beside its destination: the next run asks for the rest


def _open(url, offset):
    """The response to GET ``url`` from byte ``offset`` on, and the offset it starts at: ``offset`` where the
    server answers the Range with 206 and that start, else 0 (a whole answer: a server that ignores Range, a
    file:// mirror)."""
    request = urllib.request.Request(url, headers={"Range": f"bytes={offset}-"} if offset else {})
    try:
        r = urllib.request.urlopen(request, timeout=60)
    except urllib.error.HTTPError as e:
        if e.code != 416 or not offset:  # 416: nothing after offset (a partial file longer than the file now)
            raise
        e.close()
        return _open(url, 0)
    content_range = r.headers.get("Content-Range") or ""
    if offset and getattr(r, "status", None) == 206 and content_range.startswith(f"bytes {offset}-"):
        return r, offset
    return r, 0


def download(url, dest, quiet=False):
    """``url`` to ``dest``, through ``dest.partial``: what arrived before a dropped connection, a timeout or
    Ctrl-C is kept there, and the next call asks the server for the rest (HTTP Range; a server that ignores it
    sends the whole file again). ``dest`` appears only complete (its bytes counted against Content-Length)."""
    partial = dest + PARTIAL
    have = os.path.getsize(partial) if os.path.isfile(partial) else 0
    r, start = _open(url, have)
    done = start
    with r:
        length = int(r.headers.get("Content-Length") or 0)
        total = start + length if length else 0
        whole = (r.headers.get("Content-Range") or "").rpartition("/")[2] if start else ""
        if not total and whole.isdigit():  # a 206 without Content-Length: "bytes start-end/total"
            total = int(whole)
        try:
            with open(partial, "ab" if start else "wb") as f:
                if start and not quiet:
                    print(f"  {os.path.basename(dest)}: resuming at {start / 1e6:.0f} MB", flush=True)
                last = -1
                while True:
                    try:
                        block = r.read(1 << 20)
                    except (OSError, http.client.HTTPException) as e:
                        raise ReadFailed(f"reading {url} failed: {_why(e)}{_kept(partial, done)}") from None
                    if not block:
                        break
                    f.write(block)
                    done += len(block)
                    pct = int(100 * done / total) if total else -1
                    if not quiet and total and pct // 10 != last:
                        last = pct // 10
                        print(f"  {os.path.basename(dest)}: {pct}% of {total / 1e6:.0f} MB", flush=True)
                if total and done != total:  # a dropped connection ends the read quietly: not a complete file
                    raise ReadFailed(f"{url}: received {done} of {total} bytes (the connection ended early)"
                                     f"{_kept(partial, done)}")
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:  # the reads raise ReadFailed: an OSError here is the partial file's
            _remove_if_empty(partial, done)
            raise WriteError("download", partial, e) from None
        except BaseException:
            _remove_if_empty(partial, done)
            raise
    os.replace(partial, dest)


def _remove_if_empty(partial, received):
    """A download that fails before its first byte leaves no empty partial file."""
    if not received:
        try:
            os.remove(partial)
        except OSError:
            pass


def _drop_partial(dest):
    """A download of ``dest`` cut short earlier, no longer needed (the file is there, or its part is unpacked)."""
    partial = dest + PARTIAL
    if os.path.isfile(partial):
        try:
            os.remove(partial)
            print(f"removed {partial}: what an earlier download had received, no longer needed")
        except OSError:
            pass


def _kept(partial, done):
    return f"; the {done} bytes received are kept in {partial}: the next run resumes there" if done else ""


def safe_extract(zpath, out):
    """Unpack ``zpath`` under ``out``; a member whose name is absolute or climbs out (``..``) is refused. Names are
    judged as written, not through the folders already there: ``out/train2017`` may be a link to another disk."""
    with zipfile.ZipFile(zpath) as z:
        for m in z.infolist():
            name = os.path.normpath(m.filename)
            if os.path.isabs(m.filename) or name == os.pardir or name.startswith(os.pardir + os.sep):
                raise ValueError(f"{zpath}: unsafe member path {m.filename!r}")
        z.extractall(out)


def check_weights(path):
    """Why ``path`` is not usable Detectron R-50 weights (a truncated download, another file), or None."""
    if not os.path.isfile(path) or os.path.getsize(path) == 0:
        return f"{path} is missing or empty"
    from ..utils.c2_model_loading import load_c2_pickle
    from ..utils.errors import WeightsError

    try:
        blobs = load_c2_pickle(path)
    except WeightsError as e:
        return str(e)
    if "conv1_w" not in blobs:
        return f"{path} holds no ResNet stem (conv1_w): not the ImageNet R-50 weights"
    return None


SPLITS = {"train": ("train2017", "annotations/instances_train2017.json"),
          "val": ("val2017", "annotations/instances_val2017.json")}
# what COCO 2017's instances files list (their info.description is COCO_2017)
COCO_2017, OFFICIAL_IMAGES = "COCO 2017 Dataset", {"train": 118287, "val": 5000}


def _read_annotations(ann_path):
    """``(info.description, image file names)`` of a COCO annotation file."""
    with open(ann_path) as f:
        data = json.load(f)
    try:
        info = data.get("info")
        return (str(info.get("description", "")) if isinstance(info, dict) else "",
                [im["file_name"] for im in data.get("images", [])])
    except (AttributeError, TypeError, KeyError) as e:
        raise ValueError(f"not a COCO annotation file ({type(e).__name__}: {e})") from None


def _image_files(ann_path):
    return _read_annotations(ann_path)[1]


def _not_coco_2017(split, path):
    """Why the annotation file at ``path`` is not COCO 2017's, a file that says it is but lists another number
    of images, or None (COCO 2017's, or a set of another name: judged by its own list). This package's synthetic
    set (a rehearsal's data, docs/cluster.md's sandbox) is said once, as a warning: complete, but no MLPerf data."""
    from ..synthetic.writer import MARKER

    description, images = _read_annotations(path)
    if MARKER in description:
        if split == "train":
            print(f"warning: {path} is the synthetic dataset of this package, not COCO 2017: a rehearsal's data "
                  "(MLPerf results need COCO 2017)", file=sys.stderr)
        return None
    if description == COCO_2017 and len(images) != OFFICIAL_IMAGES[split]:
        return (f"{path} lists {len(images)} images: COCO 2017's {SPLITS[split][0]} has "
                f"{OFFICIAL_IMAGES[split]} (a cut or edited file)")
    return None


def _size_problems(name, out, zpath):
    """Files of part ``name`` whose size differs from their zip's (an unpack killed while it wrote one leaves it
    short); [] without a zip."""
    if not os.path.isfile(zpath):
        return []
    try:
        with zipfile.ZipFile(zpath) as z:
            members = [m for m in z.infolist() if not m.is_dir()]
    except (OSError, zipfile.BadZipFile):
        return []  # judged when it is unpacked (its md5 first)
    bad = []
    for m in members:
        path = os.path.join(out, os.path.normpath(m.filename))
        size = os.path.getsize(path) if os.path.isfile(path) else None
        if size != m.file_size:
            bad.append(f"{path} is {'missing' if size is None else f'{size} bytes'}, {m.file_size} in "
                       f"{os.path.basename(zpath)}")
    return [f"{bad[0]}" + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else "")] if bad else []


def verify_part(name, out):
    """Problems of an unpacked part (an empty list when it is complete). Nothing is downloaded."""
    if name == "annotations":
        problems = []
        for split, (_, ann) in SPLITS.items():
            path = os.path.join(out, ann)
            try:
                problem = _not_coco_2017(split, path)
                if problem:
                    problems.append(problem)
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
    if missing:
        return [f"{images}/: {len(missing)} of {len(listed)} images listed in {ann} are missing (e.g. {missing[0]})"]
    empty = [f for f in listed if os.path.getsize(os.path.join(images, f)) == 0]
    return [f"{images}/: {len(empty)} of {len(listed)} images listed in {ann} are empty files (e.g. {empty[0]})"] \
        if empty else []


def _zip_path(args, name):
    return os.path.join(args.zips_dir or os.path.join(args.out, "zips"), os.path.basename(PARTS[name][0]))


def verify_only(args):
    problems = []
    for name in ("annotations", "train", "val"):
        found = verify_part(name, args.out) or _size_problems(name, args.out, _zip_path(args, name))
        problems += found
        if not found and name != "annotations":
            print(f"{name}: {len(_image_files(os.path.join(args.out, SPLITS[name][1])))} images, all present")
    if args.weights_dir:
        dest = os.path.join(args.weights_dir, "R-50.pkl")
        problem = check_weights(dest)
        if problem:
            problems.append(problem)
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
    zpath = _zip_path(args, name)
    problems = verify_part(name, args.out)
    if os.path.exists(marker):
        if not problems:
            print(f"{name}: already unpacked ({marker})")
            _drop_partial(zpath)
            return True
        print(f"{name}: unpacked before, now incomplete ({problems[0]}): unpacking it again", flush=True)
        os.remove(marker)
    else:  # no marker: an unpack killed midway leaves a file short (its zip is there to tell)
        problems = problems or _size_problems(name, args.out, zpath)
        if not problems:  # unpacked without a marker (copied from elsewhere): not fetched again
            print(f"{name}: already there, complete (no zip needed)")
            open(marker, "w").close()
            _drop_partial(zpath)
            return True
        if os.path.exists(zpath):
            print(f"{name}: incomplete ({problems[0]}): unpacking it again", flush=True)
    if os.path.exists(zpath) and (args.no_verify or md5sum(zpath) == md5):
        print(f"{name}: {zpath} present{'' if args.no_verify else ', md5 ok'}")
        _drop_partial(zpath)
    else:
        url = f"{args.base_url.rstrip('/')}/{rel}"
        print(f"{name}: downloading {url}", flush=True)
        try:
            download(url, zpath, args.quiet)
        except DOWNLOAD_ERRORS as e:
            print(f"{name}: download failed: {_why(e)}", file=sys.stderr)
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
    except (zipfile.BadZipFile, zlib.error, EOFError) as e:  # not a zip, or its data corrupt
        if not args.no_verify:  # its md5 is the expected one: the zip is not what failed (a read error?)
            print(f"{name}: cannot unpack {zpath}: {_why(e)}; kept (its md5 is the expected one): run it again, "
                  "or delete it (and check --checksums) to download it again", file=sys.stderr)
            return False
        try:  # unverified (--no-verify): an error page, a file cut short by another tool
            os.remove(zpath)
            removed = "; removed it: the next run downloads it again"
        except OSError as gone:
            removed = f"; it could not be removed ({gone.strerror}): delete it, and the next run downloads it again"
        print(f"{name}: cannot unpack {zpath}: {_why(e)}{removed}", file=sys.stderr)
        return False
    except (ValueError, OSError) as e:  # an unsafe member path, a full disk
        print(f"{name}: cannot unpack: {_why(e)}", file=sys.stderr)
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
    args = _add_options(p).parse_args(argv)
    try:
        return _main(args)
    except (OSError, ValueError) as e:  # a folder that cannot be made, a checksums file that is not there
        print(f"download_coco.py: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # what the download received is kept (<zip>.partial): the next run resumes it
        print("download_coco.py: interrupted (what a download received is kept: run it again to resume)",
              file=sys.stderr)
        return 130


def _add_options(p):
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
    return p


def _hold_lock(out):
    """The folder's lock, held by this run until it exits (its open file), or an error when another run holds
    it: both would append to the same ``.partial`` download (a run holds its ``--out`` and its zips folder, which
    runs into different folders may share) and unpack into the same folders. A file system without ``flock``
    (some Lustre mounts) gets no lock."""
    import fcntl

    path = os.path.join(out, ".download_coco.lock")
    f = open(path, "a")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        raise OSError(f"another download_coco.py is writing into {out} (it holds {path}); wait for it, or stop "
                      "it") from None
    except OSError:
        pass  # no flock here
    return f


def _main(args):
    if args.verify_only:
        return verify_only(args)

    args.zips_dir = args.zips_dir or os.path.join(args.out, "zips")
    os.makedirs(args.out, exist_ok=True)
    args.lock = _hold_lock(args.out)
    os.makedirs(args.zips_dir, exist_ok=True)
    zips, out = os.path.realpath(args.zips_dir), os.path.realpath(args.out)
    if zips != out and not zips.startswith(out + os.sep):  # a zips folder of its own, which other runs may share
        args.zips_lock = _hold_lock(args.zips_dir)
    for folder in (args.zips_dir, args.weights_dir):  # an earlier release's temporary files (a .partial stays)
        for name in remove_stale_temp_files(folder):
            print(f"removed {os.path.join(folder, name)}, left by an interrupted download")
    sums = read_checksums(args.checksums) if args.checksums else {}
    parts = list(args.parts)
    # the annotations first: they say which images a folder copied from elsewhere must hold (else its zip is fetched)
    parts.sort(key=lambda name: name != "annotations")
    steps = parts + (["weights"] if args.weights_dir else [])
    for i, name in enumerate(parts):
        if not fetch_part(name, args, sums):
            # the same cause (no network, a mirror down) would fail each of the others after its own timeout; and
            # without the annotations the image folders cannot be checked (theirs would be taken as incomplete)
            if steps[i + 1:]:
                print(f"not tried after that failure: {', '.join(steps[i + 1:])} (run it again to go on)",
                      file=sys.stderr)
            return 1
    ok = True
    if args.weights_dir:
        os.makedirs(args.weights_dir, exist_ok=True)
        dest = os.path.join(args.weights_dir, "R-50.pkl")
        problem = check_weights(dest) if os.path.exists(dest) else None
        if problem:
            print(f"weights: {problem}: downloading it again", flush=True)
            os.remove(dest)
        if not os.path.exists(dest):
            print(f"weights: downloading {args.weights_url}", flush=True)
            try:
                download(args.weights_url, dest, args.quiet)
            except DOWNLOAD_ERRORS as e:
                print(f"weights: download failed: {_why(e)}", file=sys.stderr)
                ok = False
        if os.path.exists(dest):
            problem = check_weights(dest)
            if problem:  # downloaded whole, but not weights (a mirror's error page): not kept
                print(f"weights: {problem}", file=sys.stderr)
                os.remove(dest)
                ok = False
            else:
                print(f"weights: {dest} md5 {md5sum(dest)}")
                _drop_partial(dest)
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
