# RCEA Audit — the two commands that matter on a fresh machine are `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
LS_VENV := .venv-labelstudio
VERL_SITE := .verl-site
VERL_VERSION := 0.9.1
# verl 0.9.1 pins transformers<5.11; tests/test_install.py installs these wheels into a fresh
# environment to run the `live` extra under verl's real pins (docs/installation.md)
VERL_PINS := .verl-pins
VERL_PINNED := 'transformers==5.10.4' 'tokenizers==0.22.2' 'huggingface-hub==1.33.0'
TRACKIO_SITE := .trackio-site
LMEVAL_SITE := .lmeval-site
LMEVAL_VERSION := 0.4.13
TRACKIO_VERSION := 0.43.0
TRITON_SITE := .triton-site
TRITON_VERSION := 3.9.0
LABEL_STUDIO_VERSION := 1.23.2
BIN := $(VENV)/bin
EXTRAS ?= app,dev,llm,train,sign
PYTEST_ARGS ?=
# Three pytest-xdist workers on 2 cores (docs/tests.md: 10 min 28 s against 12 min 43 s with
# two, same tree, same machine: the tests wait on Label Studio, launches and locks, and a
# third worker fills that idle core time); TEST_WORKERS=0 runs serially. load with chunks
# of one: a free worker takes the next test, the longest first (tests/conftest.py), so the
# minutes-long demo tests start at once and no worker is left with a queue at the end.
TEST_WORKERS ?= 3

.PHONY: install lock shell chromium texlive nginx demo test lint bench mutation gpu-check serve view docs docs-serve screenshots clean

install: $(VENV)/.installed $(LS_VENV)/.installed $(VERL_SITE)/.installed $(VERL_PINS)/.installed $(TRACKIO_SITE)/.installed $(TRITON_SITE)/.installed $(LMEVAL_SITE)/.installed chromium texlive nginx ## create .venv, .venv-labelstudio, .verl-site, .verl-pins, .trackio-site, .triton-site and .lmeval-site; Debian chromium, pdflatex and nginx

chromium: ## Debian chromium for the browser tests (apt-get as root, else the command to run)
	@.ci/chromium

texlive: ## Debian pdflatex + booktabs for the LaTeX table test (apt-get as root, else the command)
	@.ci/texlive

nginx: ## Debian nginx-light for the front door (docs/team.md; apt-get as root, else the command to run)
	@.ci/nginx

# The exact versions come from requirements.lock; pyproject.toml's ranges are what a user's
# own environment must satisfy. Installing the project after the lock moves nothing (every
# range is met: tests/test_install.py); only an extra the lock lacks (gpu: vLLM) adds
# packages. pip check then refuses an inconsistent environment.
$(VENV)/.installed: pyproject.toml requirements.lock
	@echo "[install 1/9] $(VENV): virtual environment and pip"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	@echo "[install 2/9] $(VENV): requirements.lock, then rcea with [$(EXTRAS)] (torch, TRL, Streamlit …; the longest phase, ≈ 2–3 min)"
	$(BIN)/python -m pip install --quiet -r requirements.lock
	$(BIN)/python -m pip install --quiet -e '.[$(EXTRAS)]'
	$(BIN)/python -m pip check
	@touch $@

lock: $(VENV)/.installed ## rewrite requirements.lock from .venv (after changing a range in pyproject.toml and installing)
	@{ sed -n '1,3p' requirements.lock; $(BIN)/python -m pip freeze --exclude-editable | grep -v '^rcea-audit'; } > requirements.lock.tmp
	@mv requirements.lock.tmp requirements.lock

$(LS_VENV)/.installed:
	@echo "[install 3/9] $(LS_VENV): virtual environment and pip"
	@test -x $(LS_VENV)/bin/python || $(PYTHON) -m venv $(LS_VENV)
	$(LS_VENV)/bin/python -m pip install --quiet --upgrade pip
	@echo "[install 4/9] $(LS_VENV): label-studio==$(LABEL_STUDIO_VERSION) (≈ 1 min)"
	$(LS_VENV)/bin/python -m pip install --quiet 'label-studio==$(LABEL_STUDIO_VERSION)'
	@touch $@

# verl itself, as the peer the tests compare against (its dumps, core_algos): installed
# --no-deps into its own target dir, because verl pins transformers<5.11; the modules the
# tests import (core_algos, ray_trainer._dump_generations, DataProto) run on the
# project's torch and transformers. Tests put it on sys.path (tests/support/verl_env.py).
$(VERL_SITE)/.installed: $(VENV)/.installed
	@echo "[install 5/9] $(VERL_SITE): verl==$(VERL_VERSION) and what its dumping and core modules import (≈ 270 MB, mostly ray)"
	$(BIN)/python -m pip install --quiet --no-deps --target $(VERL_SITE) 'verl==$(VERL_VERSION)' ray 'tensordict==0.10.0' omegaconf hydra-core codetiming 'antlr4-python3-runtime==4.9.3' pyvers msgpack orjson torchdata cachetools
	@touch $@

$(VERL_PINS)/.installed: $(VENV)/.installed
	@echo "[install 6/9] $(VERL_PINS): wheels of verl's own transformers pin (transformers<5.11 and the tokenizers, huggingface-hub it needs; ≈ 17 MB)"
	$(BIN)/python -m pip download --quiet --no-deps --dest $(VERL_PINS) $(VERL_PINNED)
	@touch $@

# trackio, for TRL's report_to = ["trackio"] (docs/training-live.md): --no-deps into its own
# target dir, because trackio 0.43 pins pillow<13 and pip would downgrade .venv's Pillow 13,
# on which trackio imports and logs fine; beside it the only runtime dependencies .venv lacks
# (gradio-client, brotli, orjson; uvicorn's [standard] extras are for its dashboard only).
# `rcea train run` appends the folder to sys.path when report_to names trackio
# (rcea/pipeline/training/reporting.py); the test runs it so (tests/support/trackio_env.py).
$(TRACKIO_SITE)/.installed: $(VENV)/.installed
	@echo "[install 7/9] $(TRACKIO_SITE): trackio==$(TRACKIO_VERSION) and the gradio-client, brotli, orjson it imports (≈ 17 MB)"
	$(BIN)/python -m pip install --quiet --no-deps --target $(TRACKIO_SITE) 'trackio==$(TRACKIO_VERSION)' 'gradio-client==2.7.2' 'brotli==1.2.1' 'orjson==3.13.0'
	@touch $@

# Triton, for the tests of the GPU path's fold kernels on this CPU-only machine: Triton 3.9's
# interpreter (TRITON_INTERPRET=1) runs them on CPU tensors with the CPU torch. --no-deps into
# its own target dir (≈ 1 GB the CPU environment otherwise does without; a CUDA build of
# torch brings its own Triton, which wins). Tests put it on sys.path
# (tests/support/triton_env.py); `make gpu-check` appends it where torch has none.
$(TRITON_SITE)/.installed: $(VENV)/.installed
	@echo "[install 8/9] $(TRITON_SITE): triton==$(TRITON_VERSION) (≈ 1 GB; its interpreter tests the GPU kernels on CPU)"
	$(BIN)/python -m pip install --quiet --no-deps --target $(TRITON_SITE) 'triton==$(TRITON_VERSION)'

# lm-evaluation-harness, as the peer whose --log_samples files `rcea import lm-eval` reads
# (tests/support/lm_eval_logs.py runs its evaluator and sample logger): --no-deps into its
# own target dir, with only the modules its evaluator imports that .venv lacks (its full
# dependency set brings scikit-learn/datasets pins and more; the logger needs none of them).
$(LMEVAL_SITE)/.installed: $(VENV)/.installed
	@echo "[install 9/9] $(LMEVAL_SITE): lm_eval==$(LMEVAL_VERSION) and what its evaluator imports (≈ 106 MB, mostly nltk)"
	$(BIN)/python -m pip install --quiet --no-deps --target $(LMEVAL_SITE) 'lm_eval==$(LMEVAL_VERSION)' 'sacrebleu==2.6.0' 'evaluate==0.4.6' 'sqlitedict==2.1.0' 'pytablewriter==1.2.1' 'rouge_score==0.1.2' 'word2number==1.1' 'portalocker==4.4.2' 'tabulate==0.10.0' 'colorama==0.4.6' 'DataProperty==1.1.1' 'mbstrdecoder==1.1.5' 'pathvalidate==3.3.1' 'tabledata==1.3.5' 'tcolorpy==0.1.7' 'typepy==2.0.0' 'chardet==7.7.0' 'absl-py==2.5.1' 'nltk==3.10.4'
	@touch $@

shell: install ## an interactive shell with .venv activated (`rcea` on PATH); exit to leave
	@echo "rcea is on PATH in this shell (exit to leave; elsewhere: source .venv/bin/activate)"
	@exec bash --rcfile <(printf 'source ~/.bashrc 2>/dev/null; source "%s/bin/activate"\n' "$(CURDIR)/$(VENV)") -i

DEMO_ARGS ?=
demo: install ## the embedded study end to end, then serve Label Studio, API, view (Ctrl-C stops)
	@echo "rcea is $(BIN)/rcea: \`source $(VENV)/bin/activate\` (or \`make shell\`) puts it on PATH"
	$(BIN)/rcea demo --serve $(DEMO_ARGS)

test: install ## ruff, ruff format, mypy + the whole test suite (PostgreSQL and browser tests included); the 30 slowest tests and the total
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m mypy
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist load --maxschedchunk 1 --durations=30 $(PYTEST_ARGS)

lint: install ## ruff, ruff format and mypy only (what the pre-commit hooks run)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m mypy

bench: install ## speed figures (ratios against a named baseline in the same run) → docs/benchmarks.md
	@for b in benchmarks/bench_*.py; do n=$$(basename $$b .py); echo "== $$b"; \
	  $(BIN)/python $$b --json-out benchmarks/results/$${n#bench_}.json || exit 1; done
	$(BIN)/python -m benchmarks.figures

MUTANTS ?=
docs: install ## regenerate docs/reference (commands, settings, REST API) and build the site strictly into site/
	$(BIN)/python -m tools.reference_docs
	$(BIN)/mkdocs build --strict

screenshots: install ## docs/img/*.png from the real pages (quick SIMULATED demo, view, Label Studio; minutes)
	$(BIN)/python -m tools.screenshots

docs-serve: docs ## serve the documentation site on http://127.0.0.1:8001
	$(BIN)/mkdocs serve -a 127.0.0.1:8001

mutation: install ## mutation testing of the guards and statistics (mutmut; not part of make test)
	$(BIN)/mutmut run $(MUTANTS)
	$(BIN)/mutmut results

gpu-check: install ## the prepared GPU script (skips cleanly without CUDA)
	$(BIN)/python -m rcea.pipeline.gpu_check

serve: install ## the REST API (bearer token in rcea-data/api-token)
	$(BIN)/rcea serve

view: install ## the Streamlit view
	$(BIN)/rcea view

clean:
	rm -rf $(VENV) $(LS_VENV) $(TRACKIO_SITE) $(LMEVAL_SITE) .pytest_cache .ruff_cache .mypy_cache build *.egg-info
