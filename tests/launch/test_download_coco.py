"""tools/download_coco.py (maskrcnn_benchmark/cli/download_coco.py) offline, against a local fake mirror (file:// URL) of the three COCO 2017 zips."""

import hashlib
import json
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

    text = " ".join(md5 for _, md5 in download_coco.PARTS.values())
    for md5 in ("cced6f7f71b7629ddf16f17bbcfab6b2", "442b8da7639aecaf257c1dceb8ba8c80",
                "f4bbac642086de4f52a3fdda2de5fa2c"):
        assert md5 in text


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
