"""singularity/maskrcnn.def (parsed for its sections) and singularity/build.sh (with a stand-in singularity)."""

import os
import re
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEF = ROOT / "singularity" / "maskrcnn.def"
KNOWN_SECTIONS = {"arguments", "setup", "files", "post", "environment", "runscript", "startscript", "test",
                  "labels", "help", "app"}


def parse_def(text):
    """(header dict, {section: body}) the way Singularity reads a definition file."""
    header, sections, cur = {}, {}, None
    for line in text.splitlines():
        m = re.match(r"^%(\w+)\s*(.*)$", line)
        if m:
            cur = m.group(1).lower()
            assert cur in KNOWN_SECTIONS, f"unknown section %{cur}"
            assert cur not in sections, f"duplicate section %{cur}"
            sections[cur] = []
            continue
        if cur is None:
            if line.strip() and not line.lstrip().startswith("#"):
                key, _, value = line.partition(":")
                header[key.strip().lower()] = value.strip()
        else:
            sections[cur].append(line)
    return header, {k: "\n".join(v) for k, v in sections.items()}


def test_def_header_and_sections():
    header, sec = parse_def(DEF.read_text())
    assert header["bootstrap"] == "docker"
    assert header["from"] == "nvcr.io/nvidia/pytorch:{{ NGC_TAG }}"
    assert re.search(r"^\s*NGC_TAG=\d\d\.\d\d-py3\s*$", sec["arguments"], re.M)
    for s in ("files", "post", "environment", "runscript", "test", "labels", "help"):
        assert sec.get(s, "").strip(), f"%{s} missing or empty"
    assert re.search(r"^\s*object_detection\s+/workspace/object_detection\s*$", sec["files"], re.M)


def test_def_environment_and_post():
    _, sec = parse_def(DEF.read_text())
    env = dict(re.findall(r"export (\w+)=(\S+)", sec["environment"]))
    assert env["OMP_NUM_THREADS"] == "1" and env["OPENCV_FOR_THREADS_NUM"] == "1"
    assert env["DATADIR"] == "/data" and env["LOGDIR"] == "/results" and env["PYTHONNOUSERSITE"] == "1"
    post = sec["post"]
    assert "pip install --no-cache-dir --no-deps --no-build-isolation -e ." in post
    # pinned, without dependencies: the NGC torch (and numpy, pandas, ...) are never replaced
    assert "pip install --no-cache-dir --no-deps -r singularity/requirements.txt" in post
    assert not re.search(r"pip install[^\n]*\btorch\b", post)
    assert "/workspace/object_detection/run_and_time.sh" in sec["runscript"]
    for mount in ("/data", "/results", "/coco/models"):
        assert mount in sec["help"]


@pytest.mark.slow  # starts Python
def test_the_images_test_imports_what_preflight_and_review_import():
    """%test imports every module a job needs before it trains, with the module paths as they are: its python -c
    lines run here (the project's environment has what the image has); the RCP checker (preflight) and the result
    summarizer (review) pull in scipy and pandas, which the image takes from NGC."""
    import subprocess
    import sys

    _, sec = parse_def(DEF.read_text())
    lines = [ln.strip() for ln in sec["test"].splitlines() if ln.strip().startswith("python -c")]
    code = " ".join(lines)
    for module in ("mlperf_logging.rcp_checker.rcp_checker", "mlperf_logging.result_summarizer.result_summarizer",
                   "mlperf_logging.compliance_checker.mlp_compliance", "pycocotools", "yacs", "maskrcnn_benchmark"):
        assert module in code, module
    for line in lines:
        r = subprocess.run([sys.executable, "-c", line[len("python -c "):].strip('"')], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, (line, r.stderr[-2000:])


def test_the_dockerfile_builds_what_the_definition_builds():
    """The pyxis/enroot image (Dockerfile, read by spython's Docker parser) and the Singularity image
    (maskrcnn.def) hold the same stack: the same NGC tag by default, the same pip installs, environment, bind
    points and build-time import checks; the build context leaves out what build.sh leaves out."""
    import spython.main.parse.parsers as spython

    _, sec = parse_def(DEF.read_text())
    (docker,) = spython.DockerParser(str(ROOT / "Dockerfile")).recipe.values()
    tag = re.search(r"NGC_TAG=(\S+)", sec["arguments"]).group(1)
    assert docker.fromHeader == f"nvcr.io/nvidia/pytorch:{tag}"
    assert docker.workdir == "/workspace/object_detection"
    assert set(docker.environ) == set(re.findall(r"export (\w+=\S+)", sec["environment"]))
    run = " ".join(ln.rstrip("\\").strip().removeprefix("&& ") for ln in docker.install if not ln.startswith("#"))
    for line in sec["post"].splitlines():
        line = line.strip()
        if line.startswith(("python -m pip", "mkdir -p", "chmod")):
            assert line in run, line
    for line in sec["test"].splitlines():
        line = line.strip()
        if line.startswith("python "):
            assert line in run, line
    ignored = (ROOT / ".dockerignore").read_text().split()
    for must in (".git", ".venv", "**/*.sif", "results*", "datasets", "site.sh"):
        assert must in ignored, must


def test_image_requirements_are_pinned():
    reqs = [ln.split("#")[0].strip() for ln in (ROOT / "singularity" / "requirements.txt").read_text().splitlines()]
    reqs = [r for r in reqs if r]
    assert reqs and all(re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][A-Za-z0-9.]*", r) for r in reqs), reqs
    names = {r.split("==")[0].lower() for r in reqs}
    assert not names & {"torch", "torchvision", "numpy", "triton"}
    assert {"yacs", "mlperf-logging", "pycocotools"} <= names
    # the same versions in the project's own environment (requirements.txt): the tests run what the image runs
    # (yacs and pycocotools, the reference scorer, were unpinned there, and this comparison passed them over)
    ours = dict(ln.split("==") for ln in (ROOT / "requirements.txt").read_text().split("\n")
                if "==" in ln and not ln.startswith("#"))
    for r in reqs:
        name, version = r.split("==")
        assert ours.get(name, "").split()[:1] == [version], name


def _dockerignored(path, patterns):
    """Docker's reading of .dockerignore: each pattern matches from the context's root (Go's filepath.Match per
    segment, ``**`` any number of folders), a folder's match covers what it holds, ``!`` re-includes."""
    def regex(p):
        out, i = "", 0
        while i < len(p):
            if p.startswith("**", i):
                out, i = out + ".*", i + 2
                if p.startswith("/", i):
                    out, i = out[:-2] + "(.*/)?", i + 1
            elif p[i] == "*":
                out, i = out + "[^/]*", i + 1
            elif p[i] == "?":
                out, i = out + "[^/]", i + 1
            else:
                out, i = out + re.escape(p[i]), i + 1
        return re.compile(out + "(/.*)?")

    ignored = False
    for p in patterns:
        if p.startswith("#") or not p.strip():
            continue
        keep = p.startswith("!")
        if regex(p.lstrip("!").strip("/")).fullmatch(path):
            ignored = not keep
    return ignored


def test_images_are_never_staged_or_tracked():
    """An image at the top of the checkout was left out; singularity/maskrcnn.sif (build.sh's default output), a
    pyxis .sqsh or the .partial file of a killed build went into the Docker context and the image (GBs)."""
    patterns = (ROOT / ".dockerignore").read_text().splitlines()
    for image in ("maskrcnn.sif", "singularity/maskrcnn.sif", "maskrcnn.sqsh", "images/maskrcnn.sqsh",
                  "singularity/maskrcnn.sif.partial-1234", ".venv/bin/python", "results/run_1/log.txt",
                  "slurm-maskrcnn_4node-1234.out", "compliance_checker.log"):
        assert _dockerignored(image, patterns), image
    for kept in ("maskrcnn_benchmark/engine/run.py", "singularity/maskrcnn.def", "run_and_time.sh",
                 "configs/e2e_mask_rcnn_R_50_FPN_1x.yaml"):
        assert not _dockerignored(kept, patterns), kept


@pytest.mark.slow  # git and tar
def test_build_stages_no_image(tmp_path):
    """build.sh stages what git tracks or would track: a pyxis .sqsh or the .partial image of a killed build
    (not in .gitignore) went into the Singularity image, and so did the batch scripts' job output (slurm-*.out,
    written where they are submitted: the checkout)."""
    repo = tmp_path / "repo"
    (repo / "singularity").mkdir(parents=True)
    for name in ("build.sh", "maskrcnn.def"):
        shutil.copy2(ROOT / "singularity" / name, repo / "singularity" / name)
    shutil.copy2(ROOT / ".gitignore", repo / ".gitignore")
    (repo / "train.py").write_text("pass\n")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    for image in ("maskrcnn.sqsh", "singularity/maskrcnn.sif", "singularity/maskrcnn.sif.partial-1234",
                  "slurm-maskrcnn_4node-1234.out"):
        (repo / image).write_text("an image\n")
    stage = tmp_path / "stage"
    r = subprocess.run([str(repo / "singularity" / "build.sh"), "--dry-run"], env=dict(os.environ, STAGE_DIR=str(stage)),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    staged = sorted(str(p.relative_to(stage / "object_detection")) for p in (stage / "object_detection").rglob("*")
                    if p.is_file())
    assert staged == [".gitignore", "singularity/build.sh", "singularity/maskrcnn.def", "train.py"], staged


@pytest.mark.slow
def test_build_script_renders_and_stages(tmp_path):
    fake = tmp_path / "singularity"
    fake.write_text(FAKE_BUILDER + textwrap.dedent("""\
        echo "ARGS $*" > "$FAKE_OUT/args"
        cp maskrcnn.def "$FAKE_OUT/rendered.def"
        (cd object_detection && find . -maxdepth 2 | sort) > "$FAKE_OUT/ctx.txt"
        """))
    fake.chmod(0o755)
    env = dict(os.environ, FAKE_OUT=str(tmp_path), SINGULARITY=str(fake), NGC_TAG="20.06-py3",
               BUILD_ARGS="--fakeroot")
    r = subprocess.run([str(ROOT / "singularity" / "build.sh"), str(tmp_path / "img.sif")], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    args = (tmp_path / "args").read_text().split()
    assert args[:3] == ["ARGS", "build", "--fakeroot"] and args[4:] == ["maskrcnn.def"], args
    assert args[3].startswith(str(tmp_path / "img.sif.partial")), args  # built beside, then renamed
    assert (tmp_path / "img.sif").read_text() == "image\n" and not list(tmp_path.glob("img.sif.partial*"))
    header, sec = parse_def((tmp_path / "rendered.def").read_text())
    assert header["from"] == "nvcr.io/nvidia/pytorch:20.06-py3"
    assert "arguments" not in sec and "labels" in sec and "post" in sec
    ctx = (tmp_path / "ctx.txt").read_text().split()
    for must in ("./run_and_time.sh", "./bind_launch.py", "./config_CPU.sh", "./slurm/maskrcnn_4node.sbatch",
                 "./requirements.txt", "./pyproject.toml"):
        assert must in ctx
    assert not any(p.startswith(("./.venv", "./.git/", "./results")) or p == "./.git" for p in ctx)


# What Singularity and Apptainer do with an existing target without a terminal (a batch job, CI): refuse, "Use
# --force" (at a terminal they ask). The fake writes its image at the target it is given.
FAKE_BUILDER = textwrap.dedent("""\
    #!/bin/bash
    out="${@: -2:1}"
    if [[ -e "$out" ]]; then echo "FATAL:   While checking build target: build target '$out' already exists. Use --force if you want to overwrite it" >&2; exit 255; fi
    if [[ -n "${FAKE_FAIL:-}" ]]; then echo "partial" > "$out"; echo "FATAL:   While performing build: $FAKE_FAIL" >&2; exit 255; fi
    echo image > "$out"
    """)


def _build(tmp_path, *args, **env):
    fake = tmp_path / "singularity"
    fake.write_text(FAKE_BUILDER)
    fake.chmod(0o755)
    return subprocess.run(["/bin/bash", str(ROOT / "singularity" / "build.sh"), *args], capture_output=True,
                          text=True, timeout=120, env=dict(os.environ, SINGULARITY=str(fake), **env))


@pytest.mark.slow
def test_a_rebuild_replaces_the_image_only_once_the_new_one_is_built(tmp_path):
    """Run again from a batch job, the build stopped at once (the runtime refuses an existing target without a
    terminal); and a build that fails midway must not leave the old image destroyed or half-written."""
    image = tmp_path / "img.sif"
    image.write_text("old\n")
    r = _build(tmp_path, str(image), FAKE_FAIL="no space left on device")
    assert r.returncode != 0 and "no space left on device" in r.stderr
    assert image.read_text() == "old\n" and not list(tmp_path.glob("img.sif.partial*"))
    r = _build(tmp_path, str(image))
    assert r.returncode == 0, r.stderr
    assert image.read_text() == "image\n" and not list(tmp_path.glob("img.sif.partial*"))


@pytest.mark.slow
@pytest.mark.parametrize("args", [["--help"], ["-h"]])
def test_build_help_prints_the_usage_and_builds_nothing(tmp_path, args):
    r = _build(tmp_path, *args)
    assert r.returncode == 0 and r.stdout.startswith("Build the Singularity/Apptainer image"), r.stdout + r.stderr
    assert "BUILD_ARGS" in r.stdout and "build.sh: singularity" not in r.stdout and not list(tmp_path.glob("*.sif"))


@pytest.mark.slow
@pytest.mark.parametrize("args", [["--fakeroot"], ["out.sif", "extra.sif"]])
def test_build_refuses_what_it_does_not_know_in_one_line(tmp_path, args):
    """An option build.sh does not know went to realpath (--help: its help text became the image's path, and a
    real build started); a second path was dropped."""
    r = _build(tmp_path, *args)
    assert r.returncode == 1, r.stdout + r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("build.sh: "), r.stderr
    assert "BUILD_ARGS" in r.stderr or "one image path" in r.stderr


@pytest.mark.slow
def test_dry_run_may_follow_the_path(tmp_path):
    r = _build(tmp_path, str(tmp_path / "x.sif"), "--dry-run", STAGE_DIR=str(tmp_path / "stage"))
    assert r.returncode == 0 and "dry run" in r.stdout and not (tmp_path / "x.sif").exists(), r.stdout + r.stderr


@pytest.mark.slow
def test_build_script_needs_singularity(tmp_path):
    if shutil.which("singularity", path="/usr/bin:/bin") or shutil.which("apptainer", path="/usr/bin:/bin"):
        pytest.skip("singularity/apptainer installed here")
    env = dict(os.environ, PATH="/usr/bin:/bin", SINGULARITY="")
    r = subprocess.run(["/bin/bash", str(ROOT / "singularity" / "build.sh")], env=env, capture_output=True,
                       text=True)
    assert r.returncode != 0 and "neither singularity nor apptainer" in r.stderr


@pytest.mark.slow
def test_dry_run_prints_the_build_command_and_the_staged_files(tmp_path):
    """``build.sh --dry-run`` needs no singularity: it stages and renders, prints the exact command and every staged
    file (git-tracked and untracked-not-ignored: no venv, results or datasets), and builds nothing."""
    env = dict(os.environ, PATH="/usr/bin:/bin", SINGULARITY="", STAGE_DIR=str(tmp_path / "stage"),
               NGC_TAG="24.09-py3")
    r = subprocess.run(["/bin/bash", str(ROOT / "singularity" / "build.sh"), "--dry-run", str(tmp_path / "x.sif")],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert f"cd {tmp_path / 'stage'} && singularity build {tmp_path / 'x.sif'} maskrcnn.def" in r.stdout
    assert "nvcr.io/nvidia/pytorch:24.09-py3" in r.stdout and not (tmp_path / "x.sif").exists()
    listed = [ln.strip() for ln in r.stdout.splitlines() if ln.startswith("  object_detection/")]
    git = subprocess.run(["git", "-C", str(ROOT), "ls-files", "--cached", "--others", "--exclude-standard"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert sorted(listed) == sorted("object_detection/" + p for p in git if (ROOT / p).is_file())
    for must in ("run_and_time.sh", "bind_launch.py", "config_DGXH100_4x8x4.sh", "tools/check_recipe.py"):
        assert f"object_detection/{must}" in listed


@pytest.mark.slow
def test_rendered_definition_parses_with_spython(tmp_path, monkeypatch):
    """The rendered definition through the Singularity project's own recipe parser (spython): bootstrap docker (it
    refuses anything else), the NGC base image, files, environment, post, runscript and test."""
    import spython.main.parse.parsers as spython  # requirements.txt pins it: missing is a failure, not a skip
    env = dict(os.environ, PATH="/usr/bin:/bin", SINGULARITY="", STAGE_DIR=str(tmp_path), NGC_TAG="25.05-py3")
    subprocess.run(["/bin/bash", str(ROOT / "singularity" / "build.sh"), "--dry-run"], env=env, check=True,
                   capture_output=True)
    scripts = {}
    # the parser writes multi-line sections to /tests.sh etc. (for a Dockerfile); keep them here instead
    monkeypatch.setattr(spython.SingularityParser, "_write_script",
                        lambda self, path, lines, chmod=True: scripts.__setitem__(path, lines))
    parser = spython.SingularityParser(str(tmp_path / "maskrcnn.def"))
    (recipe,) = parser.recipe.values()
    assert recipe.fromHeader == "nvcr.io/nvidia/pytorch:25.05-py3"
    assert recipe.files == ["object_detection /workspace/object_detection"]
    assert (tmp_path / "object_detection" / "run_and_time.sh").is_file()
    assert {"OMP_NUM_THREADS=1", "DATADIR=/data", "LOGDIR=/results"} <= set(recipe.environ)
    assert recipe.cmd == 'exec /workspace/object_detection/run_and_time.sh "$@"'
    post = "\n".join(recipe.install)
    assert "pip install --no-cache-dir --no-deps --no-build-isolation -e ." in post
    assert "org.mlcommons.benchmark maskrcnn" in recipe.labels
    test = "\n".join(scripts["/tests.sh"])
    assert "import bind_launch, maskrcnn_benchmark, mlperf_logging, torch" in test and "--dry-run" in test
