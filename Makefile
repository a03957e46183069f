# RCEA Audit — the two commands that matter on a fresh machine are `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
LS_VENV := .venv-labelstudio
LABEL_STUDIO_VERSION := 1.23.2
BIN := $(VENV)/bin
EXTRAS ?= dev,llm,train
PYTEST_ARGS ?=

.PHONY: install chromium demo test lint bench mutation gpu-check serve view labelstudio clean

install: $(VENV)/.installed $(LS_VENV)/.installed chromium ## create .venv and .venv-labelstudio; Debian chromium

chromium: ## Debian chromium for the browser tests (apt-get as root, else the command to run)
	@.ci/chromium

$(VENV)/.installed: pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[$(EXTRAS)]'
	@touch $@

$(LS_VENV)/.installed:
	@test -x $(LS_VENV)/bin/python || $(PYTHON) -m venv $(LS_VENV)
	$(LS_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(LS_VENV)/bin/python -m pip install --quiet 'label-studio==$(LABEL_STUDIO_VERSION)'
	@touch $@

DEMO_ARGS ?=
demo: install ## the embedded study end to end, then serve Label Studio, API, view (Ctrl-C stops)
	$(BIN)/rcea demo --serve $(DEMO_ARGS)

test: install ## ruff + the whole test suite (PostgreSQL and browser tests included)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: install ## speed figures, as ratios against a named baseline in the same run
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

MUTANTS ?=
mutation: install ## mutation testing of the guards and statistics (mutmut; not part of make test)
	$(BIN)/mutmut run $(MUTANTS)
	$(BIN)/mutmut results

gpu-check: install ## the prepared GPU script (skips cleanly without CUDA)
	$(BIN)/python -m pipeline.gpu_check

serve: install ## the REST API (bearer token in rcea-data/api-token)
	$(BIN)/rcea serve

view: install ## the Streamlit view
	$(BIN)/rcea view

clean:
	rm -rf $(VENV) $(LS_VENV) .pytest_cache .ruff_cache build *.egg-info
