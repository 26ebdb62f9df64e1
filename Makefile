# Two commands matter on a fresh machine: `make test` and `make demo`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv test demo bench clean

venv: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

test: venv
	bash tests/cluster/install_deps.sh
	$(PY) -m pytest -q -ra --durations=12 tests

demo: venv
	tools/demo.sh

bench: venv
	$(PY) bench/model_step.py --device cpu

clean:
	rm -rf $(VENV) .pytest_cache
