# The two commands a newcomer runs: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
DEMO_CONFIG ?= configs/demo.yaml

.PHONY: demo test

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q -U pip

# torch is pinned to 2.13.0 inside the extras: a plain `torch` pulls a multi-GB CUDA build.
$(VENV)/.core: $(PY) pyproject.toml
	$(PIP) install -q -e ".[embed]"
	touch $@

$(VENV)/.dev: $(PY) pyproject.toml
	$(PIP) install -q -e ".[dev,embed,train]"
	touch $@ $(VENV)/.core

demo: $(VENV)/.core
	$(VENV)/bin/fabrika run $(DEMO_CONFIG)

test: $(VENV)/.dev
	$(PY) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)
