"""The Makefile's venv and demo recipes on a fresh machine, with a stand-in Python (nothing is installed): a venv that
could not be made is made again, an old Python is refused in one line, and the demo runs the venv's Python."""
import os
import subprocess
import sys
import textwrap

import pytest

from .test_scripts import ROOT

pytestmark = pytest.mark.slow  # starts make


def _python(tmp_path, version="3.11", venv_fails=False, venv_package=None):
    """A stand-in for python3: ``-m venv DIR`` makes DIR/bin/python (which takes any command and logs it), or, as
    Debian's python3 without python3-venv does, makes it and then fails (ensurepip missing); with ``venv_package``
    (a path), fails until that file exists (the package installed)."""
    if venv_package is not None:
        venv_fails = f'[[ ! -e {venv_package} ]]'
    else:
        venv_fails = "true" if venv_fails else "false"
    fake = tmp_path / f"python{version}"
    parts = [int(p) for p in version.split(".")] + [0]
    version_tuple = (*parts[:3], "final", 0)
    fake.write_text(textwrap.dedent(f"""\
        #!/bin/bash
        if [[ "$1" == -c ]]; then  # the version check, run by a real Python that says it is {version}
          if [[ "$2" == *platform* ]]; then echo "{version}"; exit 0; fi
          exec {sys.executable} -c "import sys; sys.version_info = {version_tuple}; exec(sys.argv[1])" "$2"
        fi
        if [[ "$1 $2" == "-m venv" ]]; then
          dir="${{@: -1}}"
          mkdir -p "$dir/bin"
          printf '#!/bin/bash\\necho "$*" >> {tmp_path}/venv-python.log\\n' > "$dir/bin/python"
          chmod +x "$dir/bin/python"
          if {venv_fails}; then
            echo "The virtual environment was not created successfully because ensurepip is not available." >&2
            exit 1
          fi
          exit 0
        fi
        exit 0
        """))
    fake.chmod(0o755)
    return fake


def _make(tmp_path, *args, path=None, tmpdir=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS"))}
    if path is not None:
        env["PATH"] = path
    if tmpdir is not None:
        env["TMPDIR"] = str(tmpdir)
    return subprocess.run(["make", "--no-print-directory", *args, f"VENV={tmp_path / 'venv'}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


def test_a_venv_that_could_not_be_made_is_made_again(tmp_path):
    """Debian's python3 without python3-venv makes .venv/bin/python, then fails (no ensurepip): the next make, after
    the user installed python3-venv, found bin/python, kept the broken venv and failed at 'No module named pip' until
    make clean. The half-made venv is removed with one line saying what to install (as root, after apt-get failed
    to: a stand-in here, that says why; the real one would change this machine)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "apt-get").write_text('#!/bin/bash\necho "E: Unable to locate package python3.11-venv"\nexit 100\n')
    (bindir / "apt-get").chmod(0o755)
    r = _make(tmp_path, "venv", f"PYTHON={_python(tmp_path, venv_fails=True)}",
              path=f"{bindir}:{os.environ['PATH']}", tmpdir=tmp_path)
    assert r.returncode != 0 and not (tmp_path / "venv").exists(), r.stdout + r.stderr
    if os.geteuid() == 0:
        assert "apt-get could not install python3.11-venv (E: Unable to locate package python3.11-venv; its output" \
            in r.stderr, r.stderr
    else:
        assert "install python3-venv (apt-get install python3-venv)" in r.stderr, r.stderr
    r = _make(tmp_path, "venv", f"PYTHON={_python(tmp_path)}")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "-m pip install" in (tmp_path / "venv-python.log").read_text()


def test_as_root_a_python_without_venv_support_gets_its_venv_package(tmp_path):
    """A fresh Debian/Ubuntu CI image as root: make test stopped at the venv ("install python3-venv"), one step
    before tests/cluster/install_deps.sh would have apt-installed everything else itself."""
    if os.geteuid() != 0:
        pytest.skip("the apt-get path is root's")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    marker = tmp_path / "installed"
    (bindir / "apt-get").write_text(f'#!/bin/bash\necho "$*" >> {tmp_path}/apt.log\ntouch {marker}\n')
    (bindir / "apt-get").chmod(0o755)
    python = _python(tmp_path, venv_package=marker)
    env_path = f"{bindir}:{os.environ['PATH']}"
    r = _make(tmp_path, "venv", f"PYTHON={python}", path=env_path)
    assert r.returncode == 0, r.stdout + r.stderr
    apt = (tmp_path / "apt.log").read_text().splitlines()
    assert "update -q" in apt[0] and "install -y -q python3.11-venv" in apt[1], apt  # a fresh image: lists empty
    assert "-m pip install" in (tmp_path / "venv-python.log").read_text()


def test_a_made_venv_is_kept_whatever_python_make_is_given_later(tmp_path):
    """make demo PYTHON=python3.11 on a host whose python3 is 3.9, then a plain make after a change to
    requirements.txt: refused ("python3 is Python 3.9") although the venv's own Python is in range."""
    r = _make(tmp_path, "venv", f"PYTHON={_python(tmp_path)}")
    assert r.returncode == 0, r.stdout + r.stderr
    (tmp_path / "venv" / ".installed").unlink()  # the requirements changed
    r = _make(tmp_path, "venv", f"PYTHON={_python(tmp_path, version='3.9')}")
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "venv-python.log").read_text().count("-m pip install -q --no-compile -r requirements.txt") == 2


def test_a_second_make_waits_for_the_venv_the_first_is_making(tmp_path):
    """make demo in one shell and make test in another on a fresh clone: both removed and made the venv, each
    installing into a folder the other deleted."""
    import fcntl
    import time

    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS"))}
    with open(tmp_path / "venv.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # the first make, making the venv
        second = subprocess.Popen(["make", "--no-print-directory", "venv", f"VENV={tmp_path / 'venv'}",
                                   f"PYTHON={_python(tmp_path)}"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
        time.sleep(2)
        waited = second.poll() is None and not (tmp_path / "venv").exists()
    out = second.communicate(timeout=60)[0]
    assert waited, out
    assert second.returncode == 0 and (tmp_path / "venv" / ".installed").exists(), out


def test_a_python_older_than_torchs_is_refused_in_one_line(tmp_path):
    """torch 2.12.1 needs Python 3.10: Debian 11's 3.9 got pip's 'Could not find a version that satisfies the
    requirement torch==2.12.1'."""
    r = _make(tmp_path, "venv", f"PYTHON={_python(tmp_path, version='3.9')}")
    assert r.returncode != 0 and "Python 3.10 or newer" in r.stderr, r.stdout + r.stderr
    assert not (tmp_path / "venv").exists()


@pytest.mark.parametrize("version,refused", [("3.14.1", True), ("3.15.0", True), ("3.14.0", False)])
def test_a_python_newer_than_the_wheels_is_refused_in_one_line(tmp_path, version, refused):
    """torchvision 0.27.1 requires Python >= 3.10 but not 3.14.1, and torch 2.12.1 has no wheel past 3.14: pip's
    'No matching distribution found for torchvision==0.27.1' is what such a Python got."""
    r = _make(tmp_path, "venv", f"PYTHON={_python(tmp_path, version=version)}")
    if refused:
        assert r.returncode != 0 and f"is Python {version}: torch 2.12.1 and torchvision 0.27.1 need Python 3.10 " \
            "or newer, up to 3.14 (torchvision excludes 3.14.1)" in r.stderr, r.stdout + r.stderr
        assert not (tmp_path / "venv").exists()
    else:
        assert (tmp_path / "venv" / "bin" / "python").exists(), r.stdout + r.stderr


def test_the_demo_runs_the_venvs_python_whatever_python_make_was_given(tmp_path):
    """make exports a PYTHON given on its command line to its recipes: tools/demo.sh then ran that bare Python (no
    torch) instead of the venv's."""
    import shlex

    r = _make(tmp_path, "-n", "demo", "PYTHON=python3.12")
    assert r.returncode == 0, r.stderr
    line = [ln for ln in r.stdout.splitlines() if "tools/demo.sh" in ln]
    assert line and shlex.split(line[0])[:2] == [f"PYTHON={tmp_path / 'venv'}/bin/python", "tools/demo.sh"], r.stdout


def test_a_checkout_whose_path_has_a_space_runs_the_demo_with_its_venv(tmp_path):
    """A checkout in "my projects": the demo's PYTHON (the venv's, by its absolute path) was cut at the space, and
    make demo failed with 'No such file or directory' (127)."""
    import shlex
    import shutil

    checkout = tmp_path / "my projects" / "maskrcnn"
    checkout.mkdir(parents=True)
    for name in ("Makefile", "requirements.txt", "pyproject.toml"):
        shutil.copy(ROOT / name, checkout / name)
    (checkout / ".venv" / "bin").mkdir(parents=True)
    (checkout / ".venv" / "bin" / "python").write_text("")
    (checkout / ".venv" / ".installed").write_text("")  # newer than the files it is made from: no venv step
    r = subprocess.run(["make", "--no-print-directory", "-n", "demo"], cwd=checkout, capture_output=True, text=True,
                       timeout=60, env={k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS"))})
    assert r.returncode == 0, r.stderr
    line = [ln for ln in r.stdout.splitlines() if "tools/demo.sh" in ln]
    assert line and shlex.split(line[0])[:2] == [f"PYTHON={checkout}/.venv/bin/python", "tools/demo.sh"], r.stdout

def test_a_venv_of_a_python_out_of_range_is_made_again(tmp_path):
    """Any venv with a working pip was kept, whatever Python had made it: one of Debian 11's 3.9 (made before the
    version check, or by hand) got pip's 'No matching distribution found for torch==2.12.1' at every make until
    make clean. It is made again with the Python make was given, with one line saying why."""
    old = _python(tmp_path, version="3.9")
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "python").symlink_to(old)
    r = _make(tmp_path, "venv", f"PYTHON={_python(tmp_path)}")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "is Python 3.9, outside 3.10-3.14: making the venv again" in r.stdout + r.stderr
    assert not (tmp_path / "venv" / "bin" / "python").is_symlink()
    assert "-m pip install" in (tmp_path / "venv-python.log").read_text()


def test_make_gpu_check_in_a_checkout_whose_path_has_a_space(tmp_path):
    """The results folder, the binds and the golden outputs' folder were not quoted (and make's realpath splits
    a path at its spaces): in "my projects" gpu-check made a folder "my", and the image got no ../shared."""
    import shlex
    import shutil

    checkout = tmp_path / "my projects" / "maskrcnn"
    checkout.mkdir(parents=True)
    (tmp_path / "my projects" / "shared").mkdir()
    shutil.copy(ROOT / "Makefile", checkout / "Makefile")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS"))}
    r = subprocess.run(["make", "--no-print-directory", "-n", "gpu-check", "IMAGE=/i.sif"], cwd=checkout,
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    words = shlex.split(r.stdout)
    assert words[:3] == ["mkdir", "-p", f"{checkout}/results"], words
    binds = next(w for w in words if w.startswith("CONTAINER_BINDS="))[len("CONTAINER_BINDS="):].split(",")
    assert binds == [f"{checkout}:/workspace/object_detection:ro", f"{checkout}/results:/results",
                     f"{tmp_path}/my projects/shared:/workspace/shared:ro"], binds
    r = subprocess.run(["make", "--no-print-directory", "-n", "gpu-check", "GPU_CHECK_PYTHON=python3"], cwd=checkout,
                       capture_output=True, text=True, timeout=60, env=env)
    words = shlex.split(r.stdout)
    assert words[words.index("--out") + 1] == f"{checkout}/results/gpu-check", words


@pytest.mark.parametrize("runner_ci", [None, "1", "True"])
def test_ci_entry_fails_rather_than_skips_the_system_tests(tmp_path, runner_ci):
    """install_deps.sh only fails (instead of skipping the Slurm, container and launch tests) when CI=true: a
    runner that does not export CI (Jenkins, cron, .ci/run by hand) passed with those tests skipped, and one that
    exports another value (CI=1; AppVeyor's True) kept it: the checks compare it with "true"."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "make").write_text(f'#!/bin/bash\necho "CI=${{CI:-unset}} $*" > {tmp_path}/make.log\n')
    (fake / "make").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PATH"] = f"{fake}:{env['PATH']}"
    if runner_ci is not None:
        env["CI"] = runner_ci
    r = subprocess.run([str(ROOT / ".ci" / "run")], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "make.log").read_text().split() == ["CI=true", "test"]


def test_the_package_metadata_never_lets_pip_pick_torch_2_13_0():
    """pip install -e .[dev] (the dev extra invites it) resolved torch>=2.4 to the newest torch, 2.13.0, on which
    torchvision breaks; the venv pins the pair (requirements.txt), the metadata excludes the break."""
    tomllib = pytest.importorskip("tomllib", reason="Python 3.10 has no tomllib (3.11 and newer read the metadata)")
    from packaging.requirements import Requirement

    deps = {Requirement(d).name: Requirement(d).specifier
            for d in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]}
    assert "2.13.0" not in deps["torch"] and {"2.12.1", "2.11.0"} <= set(deps["torch"].filter(["2.12.1", "2.11.0"]))


def test_the_dev_extra_installs_what_the_suite_needs():
    """pip install -e .[dev] lacked pytest-xdist (make test's -n 2), scipy and spython (imported by tests): every
    package of the venv's requirements.txt is a dependency of the package or of its dev extra."""
    tomllib = pytest.importorskip("tomllib", reason="Python 3.10 has no tomllib (3.11 and newer read the metadata)")
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    given = {Requirement(d).name.lower() for d in project["dependencies"] + project["optional-dependencies"]["dev"]}
    lines = [ln.split("#")[0].strip() for ln in (ROOT / "requirements.txt").read_text().splitlines()]
    wanted = {Requirement(ln).name.lower() for ln in lines if ln}
    assert sorted(wanted - given) == []

