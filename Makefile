# RocBoard: `make run` sets up and starts the app with the CPU demo; `make test` runs the tests.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# What to install when no torch is importable: backend/doctor/torch_choice.py decides. With an
# AMD GPU (sysfs vendor 0x1002 or /dev/kfd) torch and torchvision come from PyTorch's ROCm wheel
# index for the ROCm found (/opt/rocm/.info/version, `amd-smi version`, or TORCH_ROCM=7.2
# given); where that cannot be told it stops with the command to run. Without one: TORCH_SPEC's
# default below (it must stay torch_choice.py's DEFAULT_SPEC). TORCH_SPEC given on the command
# line or in the environment is installed as it is, with no choice made. A torch already in
# the system Python (a ROCm build, the rocm/pytorch image) is kept.
TORCH_SPEC ?= torch==2.14.1 torchvision==0.29.1
HOST ?= 127.0.0.1
PORT ?= 7860
RUNS_DIR ?= runs

.PHONY: run test test-fast lint bench setup setup-test demo clean gguf

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
	elif [ "$(origin TORCH_SPEC)" != file ]; then $(PIP) install $(TORCH_SPEC); \
	else torch_args="$$($(PY) backend/doctor/torch_choice.py)" || exit 1; \
	  echo "$(PIP) install $$torch_args"; $(PIP) install $$torch_args; fi
	$(PIP) install -r requirements.txt
	$(PIP) install --no-deps -e .
	@touch $@

$(VENV)/.test-deps: $(VENV)/.deps requirements-test.txt
	$(PIP) install -r requirements-test.txt
	@touch $@

setup: $(VENV)/.deps
setup-test: $(VENV)/.test-deps gguf

# GGUF export needs llama.cpp's converter (convert_hf_to_gguf.py, the conversion/ package it
# imports, and the gguf-py it puts first on sys.path: newer than PyPI's gguf 0.19.0 although
# numbered the same; the converter fails with PyPI's). It is on no registry as a package of
# its own, but the llama-cpp-python source package vendors llama.cpp. Only those files are
# kept (the sdist, 76 MB, is deleted). `make run` does not need it: the Export page greys out
# GGUF and the doctor says `make gguf` when it is missing.
LLAMA_CPP_PY_VERSION ?= 0.3.36
GGUF_DIR := $(VENV)/share/rocboard/llama.cpp
$(GGUF_DIR)/.stamp-$(LLAMA_CPP_PY_VERSION): $(VENV)/.deps
	rm -rf $(GGUF_DIR).tmp && mkdir -p $(GGUF_DIR).tmp
	$(PIP) download --no-binary :all: --no-deps llama-cpp-python==$(LLAMA_CPP_PY_VERSION) -d $(GGUF_DIR).tmp
	tar -xzf $(GGUF_DIR).tmp/llama_cpp_python-$(LLAMA_CPP_PY_VERSION).tar.gz -C $(GGUF_DIR).tmp \
	  llama_cpp_python-$(LLAMA_CPP_PY_VERSION)/vendor/llama.cpp/convert_hf_to_gguf.py \
	  llama_cpp_python-$(LLAMA_CPP_PY_VERSION)/vendor/llama.cpp/conversion \
	  llama_cpp_python-$(LLAMA_CPP_PY_VERSION)/vendor/llama.cpp/gguf-py/gguf \
	  llama_cpp_python-$(LLAMA_CPP_PY_VERSION)/vendor/llama.cpp/LICENSE
	rm -rf $(GGUF_DIR) && mv $(GGUF_DIR).tmp/llama_cpp_python-$(LLAMA_CPP_PY_VERSION)/vendor/llama.cpp $(GGUF_DIR)
	rm -rf $(GGUF_DIR).tmp
	@touch $@

gguf: $(GGUF_DIR)/.stamp-$(LLAMA_CPP_PY_VERSION)

demo: $(VENV)/.deps
	$(PY) -m backend.demo

run: setup demo
	$(PY) app.py --host $(HOST) --port $(PORT) --runs-dir $(RUNS_DIR)

# -rs: every skipped test's reason is printed at the end (a test that cannot run here says why).
# The pytest cache (.pytest_cache: --lf, --ff) is kept outside CI; CI (CI set, as .ci/run does) runs without it.
PYTEST := $(PY) -m pytest -q -rfEs $(if $(CI),-p no:cacheprovider)
test: setup-test demo
	$(PYTEST) tests

# The fast loop: every test that starts no trainer, browser, Slurm, app server or LLaMA-Factory
# helper (those are marked slow or browser by the fixtures they use: tests/tiers.py), and it
# refuses to start one. It runs on every core (pytest-xdist; FAST_WORKERS=0 for one process).
# `make test-fast ARGS="--lf"` reruns what failed last time.
FAST_WORKERS ?= auto
test-fast: setup-test demo
	$(PYTEST) -n $(FAST_WORKERS) -m "not slow and not browser" $(ARGS) tests

# ruff (lint and import order) and mypy, configured in pyproject.toml, both at zero findings;
# .ci/run runs this before the tests. Only the test tools are needed (no demo, no converter).
lint: $(VENV)/.test-deps
	$(PY) -m ruff check .
	$(PY) -m mypy

bench: setup-test demo
	$(PY) -m bench.run_all

clean:
	rm -rf $(VENV) demo .pytest_cache .ruff_cache .mypy_cache *.egg-info
