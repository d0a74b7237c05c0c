# RocBoard: `make run` sets up and starts the app with the CPU demo; `make test` runs the tests.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# What to install when no torch is importable. ROCm users: install the ROCm build of torch
# into the system Python (or use the rocm/pytorch image) first, and it is kept.
TORCH_SPEC ?= torch==2.14.1 torchvision==0.29.1
HOST ?= 127.0.0.1
PORT ?= 7860
RUNS_DIR ?= runs

.PHONY: run test bench setup setup-test demo clean

# A Python that already has torch (a ROCm build, the rocm/pytorch image) is reused through
# --system-site-packages, so its torch is kept rather than replaced by a CUDA build.
$(PY):
	@if $(PYTHON) -c "import torch" 2>/dev/null; then \
	  echo "Found torch in $(PYTHON): creating $(VENV) with --system-site-packages to keep it."; \
	  $(PYTHON) -m venv --system-site-packages $(VENV); \
	else $(PYTHON) -m venv $(VENV); fi

# RocBoard itself is installed editable and without dependencies (they came from
# requirements.txt), so nothing pip resolves for it can replace the torch above.
$(VENV)/.deps: $(PY) requirements.txt pyproject.toml
	@if $(PY) -c "import torch" 2>/dev/null; then \
	  echo "torch is importable: $$($(PY) -c 'import torch; print(torch.__version__)'); not installing another."; \
	else $(PIP) install $(TORCH_SPEC); fi
	$(PIP) install -r requirements.txt
	$(PIP) install --no-deps -e .
	@touch $@

$(VENV)/.test-deps: $(VENV)/.deps requirements-test.txt
	$(PIP) install -r requirements-test.txt
	@touch $@

setup: $(VENV)/.deps
setup-test: $(VENV)/.test-deps

demo: $(VENV)/.deps
	$(PY) -m backend.demo

run: setup demo
	$(PY) app.py --host $(HOST) --port $(PORT) --runs-dir $(RUNS_DIR)

test: setup-test demo
	$(PY) -m pytest -q tests

bench: setup-test demo
	$(PY) -m bench.run_all

clean:
	rm -rf $(VENV) demo .pytest_cache *.egg-info
