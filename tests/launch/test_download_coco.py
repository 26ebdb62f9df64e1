"""tools/download_coco.py (maskrcnn_benchmark/cli/download_coco.py) offline, against a local fake mirror (file:// URL) of the three COCO 2017 zips."""

import contextlib
import hashlib
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "download_coco.py"


def make_mirror(root: Path):
    (root / "zips").mkdir(parents=True)
    (root / "annotations").mkdir()
    files = {
        "zips/train2017.zip": {"train2017/000000000009.jpg": b"jpg1", "train2017/000000000025.jpg": b"jpg2"},
        "zips/val2017.zip": {"val2017/000000000139.jpg": b"jpg3"},
        "annotations/annotations_trainval2017.zip": {
            "annotations/instances_train2017.json": json.dumps({"images": [], "annotations": []}).encode(),
            "annotations/instances_val2017.json": json.dumps({"images": [], "annotations": []}).encode(),
        },
    }
    sums = []
    for rel, members in files.items():
        with zipfile.ZipFile(root / rel, "w") as z:
            for name, data in members.items():
                z.writestr(name, data)
        sums.append(f"{hashlib.md5((root / rel).read_bytes()).hexdigest()}  {Path(rel).name}")
    (root / "md5sums.txt").write_text("\n".join(sums) + "\n")
    return root / "md5sums.txt"


def run(*args):
    return subprocess.run([sys.executable, str(TOOL), *map(str, args), "--quiet"], capture_output=True, text=True,
                          timeout=60)


@pytest.fixture
def mirror(tmp_path):
    return tmp_path / "mirror", make_mirror(tmp_path / "mirror")


@pytest.mark.slow
def test_download_verify_and_layout(tmp_path, mirror):
    root, sums = mirror
    out = tmp_path / "data"
    r = run("--out", out, "--base-url", root.as_uri(), "--checksums", sums)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (out / "train2017" / "000000000009.jpg").read_bytes() == b"jpg1"
    assert (out / "val2017" / "000000000139.jpg").exists()
    assert json.loads((out / "annotations" / "instances_val2017.json").read_text()) == {"images": [],
                                                                                        "annotations": []}
    assert r.stdout.count("md5 ok") == 3
    # second run: nothing downloaded or unpacked again
    r2 = run("--out", out, "--base-url", root.as_uri(), "--checksums", sums)
    assert r2.returncode == 0 and r2.stdout.count("already unpacked") == 3 and "downloading" not in r2.stdout


@pytest.mark.slow
def test_md5_mismatch_fails_and_removes_zip(tmp_path, mirror):
    root, sums = mirror
    out = tmp_path / "data"
    bad = sums.read_text().replace(hashlib.md5((root / "zips/val2017.zip").read_bytes()).hexdigest(), "0" * 32)
    (tmp_path / "bad.txt").write_text(bad)
    r = run("--out", out, "--base-url", root.as_uri(), "--checksums", tmp_path / "bad.txt", "--parts", "val")
    assert r.returncode == 1
    assert "md5 mismatch" in r.stderr
    assert not (out / "zips" / "val2017.zip").exists() and not (out / "val2017").exists()


def test_builtin_md5s_are_the_official_ones():
    from maskrcnn_benchmark.cli import download_coco

    # each zip with its own md5 (a swap would fail every real download's check)
    assert {name: (path, md5) for name, (path, md5) in download_coco.PARTS.items()} == {
        "train": ("zips/train2017.zip", "cced6f7f71b7629ddf16f17bbcfab6b2"),
        "val": ("zips/val2017.zip", "442b8da7639aecaf257c1dceb8ba8c80"),
        "annotations": ("annotations/annotations_trainval2017.zip", "f4bbac642086de4f52a3fdda2de5fa2c")}


@pytest.mark.slow
def test_present_zip_is_reused_and_unsafe_zip_rejected(tmp_path, mirror):
    root, sums = mirror
    out = tmp_path / "data"
    (out / "zips").mkdir(parents=True)
    (out / "zips" / "val2017.zip").write_bytes((root / "zips/val2017.zip").read_bytes())
    r = run("--out", out, "--base-url", "file:///nonexistent", "--checksums", sums, "--parts", "val",
            "--remove-zips")
    assert r.returncode == 0, r.stderr
    assert "present, md5 ok" in r.stdout and (out / "val2017").is_dir()
    assert not (out / "zips" / "val2017.zip").exists()
    # zip-slip
    evil = tmp_path / "evil" / "zips"
    evil.mkdir(parents=True)
    with zipfile.ZipFile(evil / "val2017.zip", "w") as z:
        z.writestr("../escaped.txt", b"x")
    r = run("--out", tmp_path / "d2", "--base-url", (tmp_path / "evil").as_uri(), "--no-verify", "--parts", "val")
    assert r.returncode != 0 and "unsafe member path" in r.stderr
    assert not (tmp_path / "escaped.txt").exists()


@pytest.mark.slow
def test_download_error_is_reported(tmp_path):
    r = run("--out", tmp_path / "d", "--base-url", (tmp_path / "missing").as_uri(), "--parts", "annotations")
    assert r.returncode == 1 and "download failed" in r.stderr


def _copied_coco(root: Path, images=("a.jpg", "b.jpg")):
    """A COCO layout copied from elsewhere: images and annotations, no zips, no markers."""
    (root / "annotations").mkdir(parents=True)
    for split, folder in (("train", "train2017"), ("val", "val2017")):
        (root / folder).mkdir()
        for name in images:
            (root / folder / name).write_bytes(b"jpg")
        (root / "annotations" / f"instances_{split}2017.json").write_text(
            json.dumps({"images": [{"id": i, "file_name": n} for i, n in enumerate(images)], "annotations": []}))
    return root


def test_verify_only_on_a_complete_copy(tmp_path, capsys):
    from maskrcnn_benchmark.cli import download_coco

    data = _copied_coco(tmp_path / "coco")
    _r50(tmp_path / "models" / "R-50.pkl")
    assert download_coco.main(["--out", str(data), "--verify-only", "--weights-dir", str(tmp_path / "models")]) == 0
    out = capsys.readouterr().out
    assert "train: 2 images, all present" in out and f"verified: {data}" in out
    assert not (data / "zips").exists()  # verifying creates nothing


def test_verify_only_names_what_is_missing(tmp_path, capsys):
    from maskrcnn_benchmark.cli import download_coco

    data = _copied_coco(tmp_path / "coco")
    (data / "val2017" / "b.jpg").unlink()
    assert download_coco.main(["--out", str(data), "--verify-only", "--weights-dir", str(tmp_path / "w")]) == 1
    err = capsys.readouterr().err
    assert f"error: {data / 'val2017'}/: 1 of 2 images listed in annotations/instances_val2017.json are missing " \
           "(e.g. b.jpg)" in err
    assert f"error: {tmp_path / 'w' / 'R-50.pkl'} is missing or empty" in err


def test_a_copied_coco_is_not_downloaded_again(tmp_path, capsys):
    """No zips and no markers, but every file there: nothing is fetched (the mirror does not even exist)."""
    from maskrcnn_benchmark.cli import download_coco

    data = _copied_coco(tmp_path / "coco")
    assert download_coco.main(["--out", str(data), "--base-url", f"file://{tmp_path}/no-mirror", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert out.count("already there, complete (no zip needed)") == 3 and "downloading" not in out


def test_copied_images_without_annotations_fetch_only_the_annotations(tmp_path, capsys):
    """train2017/ and val2017/ copied from elsewhere, the annotations not yet: the image folders were judged
    before the annotations were fetched (the default order is train, val, annotations), found unknowable, and
    about 19 GB of image zips downloaded again (on a mirror holding only the annotations: a failure)."""
    from maskrcnn_benchmark.cli import download_coco

    listed = {"images": [{"id": 1, "file_name": "a.jpg"}], "annotations": []}
    mirror = tmp_path / "mirror"
    (mirror / "annotations").mkdir(parents=True)
    zpath = mirror / "annotations" / "annotations_trainval2017.zip"
    with zipfile.ZipFile(zpath, "w") as z:
        for split in ("train", "val"):
            z.writestr(f"annotations/instances_{split}2017.json", json.dumps(listed))
    sums = tmp_path / "md5sums.txt"
    sums.write_text(f"{hashlib.md5(zpath.read_bytes()).hexdigest()}  annotations_trainval2017.zip\n")
    data = tmp_path / "coco"
    for folder in ("train2017", "val2017"):
        (data / folder).mkdir(parents=True)
        (data / folder / "a.jpg").write_bytes(b"jpg")
    assert download_coco.main(["--out", str(data), "--base-url", mirror.as_uri(), "--checksums", str(sums),
                               "--quiet"]) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert out.count("downloading") == 1 and "annotations_trainval2017.zip" in out
    assert out.count("already there, complete (no zip needed)") == 2



def _listed_mirror(root: Path):
    """A mirror whose annotations list the images of its image zips (md5sums.txt beside them)."""
    images = {"train": {"000000000009.jpg": b"jpg1", "000000000025.jpg": b"jpg2"}, "val": {"000000000139.jpg": b"j3"}}
    (root / "zips").mkdir(parents=True)
    (root / "annotations").mkdir()
    sums = []
    for rel, members in (
            ("zips/train2017.zip", {f"train2017/{n}": d for n, d in images["train"].items()}),
            ("zips/val2017.zip", {f"val2017/{n}": d for n, d in images["val"].items()}),
            ("annotations/annotations_trainval2017.zip", {
                f"annotations/instances_{split}2017.json": json.dumps(
                    {"images": [{"id": i, "file_name": n} for i, n in enumerate(images[split])],
                     "annotations": []}).encode() for split in ("train", "val")})):
        with zipfile.ZipFile(root / rel, "w") as z:
            for name, data in members.items():
                z.writestr(name, data)
        sums.append(f"{hashlib.md5((root / rel).read_bytes()).hexdigest()}  {Path(rel).name}")
    (root / "md5sums.txt").write_text("\n".join(sums) + "\n")
    return root.as_uri(), root / "md5sums.txt"


def _r50(path: Path):
    import pickle

    import numpy as np

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps({"blobs": {"conv1_w": np.zeros((2, 3, 1, 1), np.float32)}}, protocol=2))


def test_a_rerun_repairs_what_verify_only_finds_missing(tmp_path, capsys):
    """--verify-only says "rerun without --verify-only to fetch what is missing" (docs/cluster.md: `--verify-only ||
    download`), but a part once unpacked was skipped by its marker: the rerun printed "already unpacked" and "done",
    exit 0, the image still missing. A rerun checks the part and unpacks it again from its zip."""
    from maskrcnn_benchmark.cli import download_coco

    url, sums = _listed_mirror(tmp_path / "mirror")
    data = tmp_path / "coco"
    common = ["--out", str(data), "--base-url", url, "--checksums", str(sums), "--quiet"]
    assert download_coco.main(common) == 0
    (data / "train2017" / "000000000025.jpg").unlink()
    assert download_coco.main(["--out", str(data), "--verify-only"]) == 1
    assert download_coco.main(common) == 0
    assert (data / "train2017" / "000000000025.jpg").read_bytes() == b"jpg2"
    assert download_coco.main(["--out", str(data), "--verify-only"]) == 0
    capsys.readouterr()


def test_an_empty_image_is_not_a_complete_dataset(tmp_path, capsys):
    from maskrcnn_benchmark.cli import download_coco

    data = _copied_coco(tmp_path / "coco")
    (data / "train2017" / "b.jpg").write_bytes(b"")
    assert download_coco.main(["--out", str(data), "--verify-only"]) == 1
    assert "b.jpg" in capsys.readouterr().err


def test_a_download_cut_short_is_not_kept(tmp_path, capsys, monkeypatch):
    """A connection dropped mid-download ends the read quietly (b""): the file was renamed into place as if
    complete, R-50.pkl (no md5) kept by every rerun and "verified" by --verify-only, found only when a GPU job loads
    it. The bytes are counted against Content-Length, and the weights are read as a Detectron pickle."""
    import io
    import urllib.request

    from maskrcnn_benchmark.cli import download_coco

    class Cut(io.BytesIO):
        headers = {"Content-Length": "1000000"}

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(urllib.request, "urlopen", lambda url, timeout=None: Cut(b"x" * 300000))
    weights = tmp_path / "models"
    data = _copied_coco(tmp_path / "coco")
    assert download_coco.main(["--out", str(data), "--weights-dir", str(weights), "--quiet"]) == 1
    assert "300000 of 1000000 bytes" in capsys.readouterr().err
    # what arrived waits for the next run to resume it, not under the weights' name
    assert [p.name for p in weights.iterdir()] == ["R-50.pkl.partial"]
    (weights / "R-50.pkl").write_bytes(b"x" * 300000)  # a file cut short by another tool
    assert download_coco.main(["--out", str(data), "--verify-only", "--weights-dir", str(weights)]) == 1
    assert "R-50.pkl" in capsys.readouterr().err


def test_a_network_failure_mid_download_is_not_called_a_write_error(tmp_path, capsys, monkeypatch):
    """A read that times out or a connection reset mid-download was reported as "cannot write the download
    '.../R-50.pkl': timed out", pointing at the disk; it is the network's, and says so with the URL."""
    import urllib.request

    from maskrcnn_benchmark.cli import download_coco

    class Reset:
        headers = {"Content-Length": "1000000"}

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def read(self, n):
            raise TimeoutError("timed out")

    monkeypatch.setattr(urllib.request, "urlopen", lambda url, timeout=None: Reset())
    weights = tmp_path / "models"
    data = _copied_coco(tmp_path / "coco")
    assert download_coco.main(["--out", str(data), "--weights-dir", str(weights), "--quiet",
                               "--weights-url", "https://example.invalid/R-50.pkl"]) == 1
    err = capsys.readouterr().err
    assert "weights: download failed: reading https://example.invalid/R-50.pkl failed: timed out" in err, err
    assert "cannot write" not in err and not list(weights.iterdir())


def test_temporary_files_of_a_killed_download_are_removed(tmp_path, capsys):
    from maskrcnn_benchmark.cli import download_coco

    url, sums = _listed_mirror(tmp_path / "mirror")
    data = tmp_path / "coco"
    (data / "zips").mkdir(parents=True)
    (data / "zips" / ".tmp-train2017.zip.abcdefgh").write_bytes(b"x" * 1000)
    assert download_coco.main(["--out", str(data), "--base-url", url, "--checksums", str(sums), "--quiet"]) == 0
    assert not [p for p in (data / "zips").iterdir() if p.name.startswith(".tmp-")]
    capsys.readouterr()


def test_an_image_folder_that_is_a_symlink_is_unpacked_into(tmp_path, capsys):
    """DATADIR/train2017 -> /bigdisk/train2017 (a cluster's usual layout) was refused as an unsafe member path
    after the whole download: the members were checked on the folder's resolved path."""
    from maskrcnn_benchmark.cli import download_coco

    url, sums = _listed_mirror(tmp_path / "mirror")
    data = tmp_path / "coco"
    data.mkdir()
    (tmp_path / "bigdisk").mkdir()
    (data / "train2017").symlink_to(tmp_path / "bigdisk")
    assert download_coco.main(["--out", str(data), "--base-url", url, "--checksums", str(sums), "--quiet"]) == 0
    assert (tmp_path / "bigdisk" / "000000000009.jpg").read_bytes() == b"jpg1"
    capsys.readouterr()


@pytest.mark.parametrize("case", ["checksums file missing", "annotations not an object"])
def test_bad_input_is_one_line(tmp_path, capsys, case):
    from maskrcnn_benchmark.cli import download_coco

    data = _copied_coco(tmp_path / "coco")
    if case == "checksums file missing":
        argv = ["--out", str(data), "--checksums", str(tmp_path / "nope.txt"), "--quiet"]
    else:
        (data / "annotations" / "instances_val2017.json").write_text("[1, 2]")
        argv = ["--out", str(data), "--verify-only"]
    assert download_coco.main(argv) == 1
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert err and all(ln.startswith(("error:", "download_coco.py: error:", "verify:")) for ln in err), err
    assert "Traceback" not in "\n".join(err)


def test_the_synthetic_dataset_or_a_cut_coco_is_not_verified_as_coco_2017(tmp_path, capsys):
    """--verify-only judged a folder by its own annotation files: the synthetic set was "verified" without a word
    (docs/cluster.md's `--verify-only || download` then never fetched COCO into a DATADIR that held it by
    mistake), and a cut COCO file too. The synthetic set passes as the rehearsal's data (the sandbox's steps),
    named in a warning; a file that says it is COCO 2017 must list its image count."""
    from maskrcnn_benchmark.cli import download_coco
    from maskrcnn_benchmark.synthetic import make_synthetic_coco

    make_synthetic_coco(tmp_path / "syn", 3, 2, progress=False)
    assert download_coco.main(["--out", str(tmp_path / "syn"), "--verify-only"]) == 0
    err = capsys.readouterr().err
    assert err.count("is the synthetic dataset of this package, not COCO 2017: a rehearsal's data") == 1
    data = _copied_coco(tmp_path / "coco")
    for split in ("train", "val"):
        path = data / "annotations" / f"instances_{split}2017.json"
        doc = json.loads(path.read_text())
        path.write_text(json.dumps(dict(doc, info={"description": "COCO 2017 Dataset"})))
    assert download_coco.main(["--out", str(data), "--verify-only"]) == 1
    assert "instances_train2017.json lists 2 images: COCO 2017's train2017 has 118287" in capsys.readouterr().err


def test_an_image_cut_short_by_a_killed_unpack_is_unpacked_again(tmp_path, capsys):
    """An unpack killed while it wrote a member leaves that file short but not empty, and no marker; the rerun
    found every listed file there and not empty, called the part complete, and kept the cut image. With its zip
    at hand, the files are compared with the zip's sizes (--verify-only too)."""
    from maskrcnn_benchmark.cli import download_coco

    url, sums = _listed_mirror(tmp_path / "mirror")
    data = tmp_path / "coco"
    common = ["--out", str(data), "--base-url", url, "--checksums", str(sums), "--quiet"]
    assert download_coco.main(common) == 0
    (data / "train2017" / "000000000025.jpg").write_bytes(b"jp")
    (data / ".unpacked-train2017.zip").unlink()  # killed before the marker
    assert download_coco.main(["--out", str(data), "--verify-only"]) == 1
    assert "000000000025.jpg is 2 bytes, 4 in train2017.zip" in capsys.readouterr().err
    assert download_coco.main(common) == 0
    assert (data / "train2017" / "000000000025.jpg").read_bytes() == b"jpg2"


def test_a_checksums_file_of_another_format_is_refused_before_any_zip_is_touched(tmp_path, capsys):
    """A sha256sum file given as --checksums matched no zip: the good zip there was downloaded again (19 GB),
    failed the same comparison and was deleted."""
    from maskrcnn_benchmark.cli import download_coco

    url, sums = _listed_mirror(tmp_path / "mirror")
    data = tmp_path / "coco"
    assert download_coco.main(["--out", str(data), "--base-url", url, "--checksums", str(sums), "--quiet"]) == 0
    zips = sorted((data / "zips").iterdir())
    before = [(z.stat().st_size, z.stat().st_mtime_ns) for z in zips]
    sha = tmp_path / "sha256.txt"
    sha.write_text(f"{'ab' * 32}  train2017.zip\n")
    capsys.readouterr()
    assert download_coco.main(["--out", str(data), "--base-url", url, "--checksums", str(sha), "--quiet"]) == 1
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert err == [f"download_coco.py: error: {sha} line 1: '{'ab' * 32}' is not an md5 (32 hex digits; the "
                   "md5sum format is: <md5>  <file name>)"]
    assert [(z.stat().st_size, z.stat().st_mtime_ns) for z in zips] == before


def test_a_connection_dropped_mid_chunk_is_one_line(tmp_path, capsys, monkeypatch):
    """http.client.IncompleteRead (a chunked transfer cut off by a proxy) is no OSError: it was a traceback."""
    import http.client

    from maskrcnn_benchmark.cli import download_coco

    class Dropped:
        headers = {}

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def read(self, n):
            raise http.client.IncompleteRead(b"")

    monkeypatch.setattr(download_coco.urllib.request, "urlopen", lambda *a, **k: Dropped())
    assert download_coco.main(["--out", str(tmp_path / "d"), "--parts", "annotations", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert re.search(r"annotations: download failed: reading \S+ failed: IncompleteRead", err), err
    assert "Traceback" not in err
    assert not list((tmp_path / "d" / "zips").iterdir())


def test_a_second_download_into_the_same_folder_waits_for_none_and_touches_nothing(tmp_path, capsys):
    """Two runs on one $DATADIR (a job resubmitted, two login nodes): the second removed the first's temporary
    download as "left by an interrupted download", and the first failed at its rename after 19 GB. The second is
    refused in one line while the first holds the folder's lock."""
    import fcntl

    from maskrcnn_benchmark.cli import download_coco

    data = tmp_path / "coco"
    (data / "zips").mkdir(parents=True)
    in_flight = data / "zips" / ".tmp-train2017.zip.abc123"
    in_flight.write_bytes(b"half of a zip")
    with open(data / ".download_coco.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert download_coco.main(["--out", str(data), "--base-url", (tmp_path / "none").as_uri(), "--quiet"]) == 1
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert err == [f"download_coco.py: error: another download_coco.py is writing into {data} (it holds "
                   f"{data / '.download_coco.lock'}); wait for it, or stop it"]
    assert in_flight.read_bytes() == b"half of a zip"


def test_runs_into_two_folders_sharing_a_zips_folder_do_not_meet_in_it(tmp_path, capsys):
    """Each node unpacking into its own --out from one shared --zips-dir: the lock was the --out folder's alone, so
    one run removed (as no longer needed) or appended to the .partial download the other was writing. A zips
    folder outside --out is locked too."""
    import fcntl

    from maskrcnn_benchmark.cli import download_coco

    shared = tmp_path / "shared-zips"
    shared.mkdir()
    (shared / "val2017.zip.partial").write_bytes(b"the other run's download")
    with open(shared / ".download_coco.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert download_coco.main(["--out", str(tmp_path / "node2"), "--zips-dir", str(shared), "--parts", "val",
                                   "--base-url", (tmp_path / "none").as_uri(), "--quiet"]) == 1
    assert f"another download_coco.py is writing into {shared}" in capsys.readouterr().err
    assert (shared / "val2017.zip.partial").read_bytes() == b"the other run's download"


class _RangeMirror:
    """A mirror over HTTP on loopback, as S3 and images.cocodataset.org serve: ``Range: bytes=N-`` answered with
    206 (``ranges``: False, a server that ignores it: 200 and the whole file). ``cut_after``: the next answer
    ends after that many bytes of its body (a connection dropped), its Content-Length the whole body's."""

    def __init__(self, root: Path, ranges=True, range_lengths=True):
        import http.server
        import threading

        self.root, self.ranges, self.cut_after, self.requests = root, ranges, None, []
        self.range_lengths = range_lengths  # False: a 206 says its size in Content-Range alone
        mirror = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                data = (mirror.root / self.path.lstrip("/")).read_bytes()
                start = 0
                asked = self.headers.get("Range")
                mirror.requests.append(asked)
                if asked and mirror.ranges:
                    start = int(asked.split("=")[1].split("-")[0])
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                else:
                    self.send_response(200)
                body = data[start:]
                if not (asked and mirror.ranges) or mirror.range_lengths:
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                cut, mirror.cut_after = mirror.cut_after, None
                self.wfile.write(body[:cut] if cut is not None else body)
                self.wfile.flush()
                self.close_connection = True

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@contextlib.contextmanager
def _annotations_over_http(tmp_path, **mirror):
    """The annotations zip of a listed mirror served over HTTP (:class:`_RangeMirror`): yields the server, the
    dataset folder, download_coco's arguments for it, the zip's size and the checksums file."""
    _, sums = _listed_mirror(tmp_path / "mirror")
    served = _RangeMirror(tmp_path / "mirror", **mirror)
    try:
        data = tmp_path / "coco"
        args = ["--out", str(data), "--base-url", served.url, "--checksums", str(sums), "--parts", "annotations",
                "--quiet"]
        size = (tmp_path / "mirror" / "annotations" / "annotations_trainval2017.zip").stat().st_size
        yield served, data, args, size, sums
    finally:
        served.close()


@pytest.mark.parametrize("ranges", [True, False], ids=["range", "no-range"])
def test_a_download_cut_short_is_resumed_where_it_stopped(tmp_path, capsys, ranges):
    """train2017.zip is 18 GB: a connection dropped at 17 GB deleted what had arrived and the next run fetched it
    all again (on a flaky link, never to the end). What arrived is kept beside the zip and the next run asks for
    the rest (HTTP Range); a server that ignores Range sends the whole file, which replaces the partial one. The
    md5 is checked on the whole zip either way."""
    from maskrcnn_benchmark.cli import download_coco

    with _annotations_over_http(tmp_path, ranges=ranges) as (served, data, args, zip_size, sums):
        served.cut_after = zip_size // 2
        assert download_coco.main(args) == 1
        err = capsys.readouterr().err
        partial = data / "zips" / "annotations_trainval2017.zip.partial"
        assert f"received {zip_size // 2} of {zip_size} bytes" in err and partial.stat().st_size == zip_size // 2
        assert "the next run resumes" in err, err
        assert download_coco.main(args) == 0, capsys.readouterr().err
        assert served.requests == [None, f"bytes={zip_size // 2}-"]
        assert not partial.exists() and (data / "annotations" / "instances_val2017.json").exists()
        assert hashlib.md5((data / "zips" / "annotations_trainval2017.zip").read_bytes()).hexdigest() in \
            sums.read_text()


def test_a_zip_that_is_not_one_is_fetched_again_by_the_next_run(tmp_path, capsys):
    """With --no-verify a zip already there is unpacked without its md5: an error page or a file cut short by
    another tool failed to unpack ("File is not a zip file") and was kept, so every rerun failed the same way. It
    is removed, and the next run downloads it."""
    from maskrcnn_benchmark.cli import download_coco

    url, sums = _listed_mirror(tmp_path / "mirror")
    data = tmp_path / "coco"
    (data / "zips").mkdir(parents=True)
    (data / "zips" / "val2017.zip").write_bytes(b"<html>503 Service Unavailable</html>")
    args = ["--out", str(data), "--base-url", url, "--parts", "val", "--no-verify", "--quiet"]
    assert download_coco.main(args) == 1
    err = capsys.readouterr().err
    assert "cannot unpack" in err and "removed it: the next run downloads it again" in err, err
    assert download_coco.main(args) == 0
    assert (data / "val2017" / "000000000139.jpg").read_bytes() == b"j3"


def test_the_first_failed_part_stops_the_run_in_one_line(tmp_path, capsys):
    """No network (a login node without one, a mirror down): each part and the weights were tried in turn, one
    failure line each after its own connection timeout; and a failed annotations fetch made the image folders
    already unpacked look incomplete (their listed images unknown), their markers removed. The first failure
    ends the run, naming what was not tried."""
    from maskrcnn_benchmark.cli import download_coco

    url, sums = _listed_mirror(tmp_path / "mirror")
    data = tmp_path / "coco"
    assert download_coco.main(["--out", str(data), "--base-url", url, "--checksums", str(sums), "--quiet",
                               "--remove-zips"]) == 0
    capsys.readouterr()
    (data / "annotations" / "instances_train2017.json").unlink()
    gone = (tmp_path / "nowhere").as_uri()
    assert download_coco.main(["--out", str(data), "--base-url", gone, "--checksums", str(sums), "--quiet",
                               "--weights-dir", str(tmp_path / "models"), "--weights-url", f"{gone}/R-50.pkl",
                               "--remove-zips"]) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 2 and err[0].startswith("annotations: download failed:"), err
    assert err[1] == "not tried after that failure: train, val, weights (run it again to go on)", err
    assert (data / ".unpacked-train2017.zip").exists() and (data / ".unpacked-val2017.zip").exists()


def test_a_partial_download_left_beside_a_complete_part_is_removed(tmp_path, capsys):
    """A download cut short, then the zip put there by hand (or the part copied from elsewhere): the partial file
    (up to 18 GB for train2017) stayed for ever, and kept --remove-zips from removing the zips folder."""
    from maskrcnn_benchmark.cli import download_coco

    url, sums = _listed_mirror(tmp_path / "mirror")
    data = tmp_path / "coco"
    (data / "zips").mkdir(parents=True)
    for name in ("val2017.zip", "annotations_trainval2017.zip"):
        (data / "zips" / f"{name}.partial").write_bytes(b"x" * 10)
    (data / "zips" / "val2017.zip").write_bytes((tmp_path / "mirror" / "zips" / "val2017.zip").read_bytes())
    assert download_coco.main(["--out", str(data), "--base-url", url, "--checksums", str(sums), "--quiet",
                               "--remove-zips"]) == 0, capsys.readouterr().err
    assert not (data / "zips").exists()


def test_a_verified_zip_that_does_not_unpack_is_kept(tmp_path, capsys):
    """A zip whose md5 is the expected one and that still does not unpack (a read error, a wrong checksums file)
    is not deleted: an 18 GB download is not thrown away on a failure the download did not cause."""
    from maskrcnn_benchmark.cli import download_coco

    data = tmp_path / "coco"
    (data / "zips").mkdir(parents=True)
    bad = b"<html>not a zip</html>"
    (data / "zips" / "val2017.zip").write_bytes(bad)
    sums = tmp_path / "md5sums.txt"
    sums.write_text(f"{hashlib.md5(bad).hexdigest()}  val2017.zip\n")
    assert download_coco.main(["--out", str(data), "--base-url", (tmp_path / "none").as_uri(), "--parts", "val",
                               "--checksums", str(sums), "--quiet"]) == 1
    assert "cannot unpack" in capsys.readouterr().err
    assert (data / "zips" / "val2017.zip").read_bytes() == bad


def test_a_resumed_answer_without_content_length_is_checked_against_content_range(tmp_path, capsys):
    """A 206 may give its size in Content-Range alone ("bytes 1000-4999/5000"): a resumed download cut short again
    was then taken for complete (no Content-Length to count against) and renamed into place."""
    from maskrcnn_benchmark.cli import download_coco

    with _annotations_over_http(tmp_path, range_lengths=False) as (served, data, args, size, _):
        served.cut_after = size // 2
        assert download_coco.main(args) == 1
        served.cut_after = size // 4  # the resumed answer is cut too
        assert download_coco.main(args) == 1
        err = capsys.readouterr().err
        assert f"received {size // 2 + size // 4} of {size} bytes" in err, err
        assert not (data / "zips" / "annotations_trainval2017.zip").exists()
        assert download_coco.main(args) == 0
        assert served.requests[1:] == [f"bytes={size // 2}-", f"bytes={size // 2 + size // 4}-"]


def test_zips_kept_in_the_dataset_folder_itself(tmp_path, capsys):
    """``--zips-dir`` the same folder as ``--out``: the run took its own second lock on that folder for another
    run's and refused itself."""
    from maskrcnn_benchmark.cli import download_coco

    url, sums = _listed_mirror(tmp_path / "mirror")
    data = tmp_path / "coco"
    assert download_coco.main(["--out", str(data), "--zips-dir", str(data), "--base-url", url, "--checksums",
                               str(sums), "--parts", "val", "--quiet"]) == 0, capsys.readouterr().err
    assert (data / "val2017.zip").exists() and (data / "val2017" / "000000000139.jpg").exists()
