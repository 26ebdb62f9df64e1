# Two commands matter on a fresh machine: `make test` and `make demo`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv test test-fast demo bench gpu-check clean

comma := ,

venv: $(STAMP)

# tools/make_venv.sh: made with PYTHON when missing, broken or of a Python outside torch's range; the pinned
# requirements and the package; under a lock, so that two makes at once do not build it over each other.
$(STAMP): requirements.txt pyproject.toml
	@bash tools/make_venv.sh "$(PYTHON)" "$(VENV)"

# Everything (what CI runs): needs root for the system packages of the 4-node Slurm and launch tests.
test: venv
	@echo "make test: the Slurm cluster and launch tests need slurm-wlm, munge, numactl and shellcheck, the compiled tests g++; missing ones are installed now with apt-get (tests/cluster/install_deps.sh)"
	@TEST_PYTHON="$(abspath $(PY))" bash tests/cluster/install_deps.sh
	@rc=0; $(PY) -m pytest -q -n $(TEST_WORKERS) -m "not slow" tests || rc=$$?; \
	  $(PY) -m pytest -q -ra --durations=12 -n $(SLOW_TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m slow tests || rc=$$?; exit $$rc

# The fast loop (40 s on 2 cores on 2026-11-27, the official checkers' tests in the slow set; 42-67 s before them): every test that neither trains nor starts a process, in
# TEST_WORKERS pytest-xdist workers (they share the cores: tests/conftest.py gives each cores / workers torch
# threads, and the programs the tests start one OpenMP thread). make test runs it first, then the slow tests in
# SLOW_TEST_WORKERS workers, one test module per work unit (a module's fixtures, such as the Slurm sandbox cluster, are
# built once), the longest modules first (tests/conftest.py).
TEST_WORKERS ?= 2
# The slow tests in one worker more than the cores: many of them wait (for Slurm's time limit, a rank's timeout, a
# job's steps), and a third worker fills those waits with work (the slow tests alone, 2026-11-26: 832 s in 2
# workers, 768 s in 3 with both cores 96 % busy).
SLOW_TEST_WORKERS ?= 3

test-fast: venv
	$(PY) -m pytest -q -n $(TEST_WORKERS) -m "not slow" tests

# PYTHON: the venv's (make exports a PYTHON given on its command line, which demo.sh would otherwise run)
demo: venv
	PYTHON="$(abspath $(PY))" tools/demo.sh

bench: venv
	$(PY) bench/model_step.py --device cpu

# First contact with a GPU node (about 20 minutes on one GPU: the checks' caps add up to 1180 s; a smaller --budget
# leaves out the checks at the end of its priority list, each named):
# results/gpu-check/report.md. Without an NVIDIA GPU it says so in one line and exits 0.
# IMAGE=path/to/maskrcnn.sif: every stage runs inside the training image
# (singularity exec --nv, the checkout bound over the image's copy as the Slurm job binds it; no venv, no package
# index needed); without IMAGE: the current Python environment (no venv is built on the node), and the report says so.
# GPU_CHECK_ARGS: more arguments for tools/gpu_check.py (e.g. --budget 900; the tests: --device cpu --quick);
# GPU_CHECK_RESULTS: the folder that receives gpu-check/ (default: results/ in the checkout).
GPU_CHECK_RESULTS ?= $(CURDIR)/results
ifdef IMAGE
# ../shared (the golden outputs of the parity stage), where it is beside the checkout: beside the checkout's copy too
# (the shell's realpath: make's splits a path at its spaces)
SHARED_DIR := $(shell realpath -e "$(CURDIR)/../shared" 2> /dev/null)
SHARED_BIND = $(if $(SHARED_DIR),$(SHARED_DIR):/workspace/shared:ro)
gpu-check:
	mkdir -p "$(GPU_CHECK_RESULTS)"
	CONTAINER="$(IMAGE)" CONTAINER_BINDS="$(CURDIR):/workspace/object_detection:ro,$(GPU_CHECK_RESULTS):/results$(if $(SHARED_BIND),$(comma)$(SHARED_BIND))" \
	  MASKRCNN_GPU_CHECK_IMAGE="$(IMAGE)" slurm/in_container.sh python3 tools/gpu_check.py --out /results/gpu-check \
	  $(GPU_CHECK_ARGS)
else
# No image: the current Python environment (this checkout's venv when it was made whole, else python3 on PATH: a host
# install, or a shell already inside the image); nothing is installed on the node, so the checkout goes on
# PYTHONPATH (the package need not be pip-installed there). The report's stack says which Python ran.
GPU_CHECK_PYTHON ?= $(if $(wildcard $(STAMP)),$(PY),python3)
gpu-check:
	@PYTHONPATH="$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH}" $(GPU_CHECK_PYTHON) tools/gpu_check.py --out "$(GPU_CHECK_RESULTS)/gpu-check" $(GPU_CHECK_ARGS)
endif

clean:
	rm -rf $(VENV) .pytest_cache
