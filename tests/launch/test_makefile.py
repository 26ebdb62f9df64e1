"""The Makefile's venv and demo recipes on a fresh machine, with a stand-in Python (nothing is installed): a venv that
could not be made is made again, an old Python is refused in one line, and the demo runs the venv's Python."""
import os
import subprocess
import sys
import textwrap

import pytest

from .test_scripts import ROOT

pytestmark = pytest.mark.slow  # starts make


def _python(tmp_path, version="3.11", venv_fails=False):
    """A stand-in for python3: ``-m venv DIR`` makes DIR/bin/python (which takes any command and logs it), or, as
    Debian's python3 without python3-venv does, makes it and then fails (ensurepip missing)."""
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
          {'echo "The virtual environment was not created successfully because ensurepip is not available." >&2; exit 1' if venv_fails else 'exit 0'}
        fi
        exit 0
        """))
    fake.chmod(0o755)
    return fake


def _make(tmp_path, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS"))}
    return subprocess.run(["make", "--no-print-directory", *args, f"VENV={tmp_path / 'venv'}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


def test_a_venv_that_could_not_be_made_is_made_again(tmp_path):
    """Debian's python3 without python3-venv makes .venv/bin/python, then fails (no ensurepip): the next make, after
    the user installed python3-venv, found bin/python, kept the broken venv and failed at 'No module named pip' until
    make clean. The half-made venv is removed with one line saying what to install."""
    r = _make(tmp_path, "venv", f"PYTHON={_python(tmp_path, venv_fails=True)}")
    assert r.returncode != 0
    assert "python3-venv" in r.stderr and not (tmp_path / "venv").exists(), r.stdout + r.stderr
    r = _make(tmp_path, "venv", f"PYTHON={_python(tmp_path)}")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "-m pip install" in (tmp_path / "venv-python.log").read_text()


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