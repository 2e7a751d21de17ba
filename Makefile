# MASCOT: `make run` starts the app, `make test` runs the whole suite. Both set everything up.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 7860
PYTEST_ARGS ?=
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: run test test-fast setup setup-dev chromium postgres model bench lint clean llama-rebuild

$(PY):
	$(PYTHON) -m venv $(VENV)

# llama-cpp-python compiles at install. It is built first, with the CPU's own extensions and never AMX
# (scripts/llama_cmake_args.py: on these VMs the CPU reports AMX but using it faults), and never from pip's
# wheel cache, which may hold a -march=native build from another machine.
LLAMA_CPP_PIN := $(shell grep -E '^llama-cpp-python==' requirements.txt | cut -d' ' -f1)
LLAMA_BUILD = CMAKE_ARGS="$$($(PYTHON) scripts/llama_cmake_args.py)" CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) \
  $(PY) -m pip install -q --no-cache-dir --force-reinstall --no-deps "$(LLAMA_CPP_PIN)"

$(VENV)/.installed: requirements.txt scripts/llama_cmake_args.py pyproject.toml | $(PY)
	$(PY) -m pip install -q --upgrade pip
	$(LLAMA_BUILD)
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	touch $@

$(VENV)/.dev-installed: requirements-dev.txt $(VENV)/.installed
	$(PY) -m pip install -q -r requirements-dev.txt
	touch $@

# rebuild llama-cpp-python for this CPU (after moving the venv to another machine, or an old -march=native build)
llama-rebuild: | $(PY)
	$(LLAMA_BUILD)
	rm -rf "$${MASCOT_CACHE_DIR:-$$HOME/.cache/mascot}/llamacpp-probe"

setup: $(VENV)/.installed
setup-dev: $(VENV)/.dev-installed chromium postgres

# Debian's Chromium drives the browser tests (Playwright never downloads its own browser here).
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends chromium fonts-noto-color-emoji >/dev/null; }

# Debian's PostgreSQL: the annotation store's tests also run on a throwaway cluster (tests/postgres_cluster.py).
postgres:
	@command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends postgresql >/dev/null; }

# Prepare the model caches once: the embedded GGUF as safetensors (progress bar; ~20 s), the weights llama.cpp
# serves, and the crisis detector's merged encoders (each is otherwise made on first use).
model: $(VENV)/.installed
	$(PY) -m mascot.files.model_files

run: $(VENV)/.installed
	$(PY) app.py --host $(HOST) --port $(PORT)

test: setup-dev model
	$(PY) -m pytest $(PYTEST_ARGS)

# the quick loop: no real model, no training, no live server, no browser, SQLite only
test-fast: setup-dev
	$(PY) -m pytest -m "not model and not train and not live and not browser and not postgres" $(PYTEST_ARGS)

lint: $(VENV)/.dev-installed
	$(VENV)/bin/ruff check .

bench: setup model
	$(PY) benchmarks/chat_latency.py

clean:
	rm -rf $(VENV) .pytest_cache
