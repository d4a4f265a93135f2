# The two commands a newcomer runs: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
DEMO_CONFIG ?= configs/demo.yaml

.PHONY: demo test lock

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q -U pip

# torch is pinned to 2.13.0 inside the extras: a plain `torch` pulls a multi-GB CUDA build.
# requirements-lock.txt pins every release (pip -c): a fresh venv resolves the same libraries, so the
# same config gives the same rows on any machine (`make lock` rewrites it from this venv).
$(VENV)/.core: $(PY) pyproject.toml requirements-lock.txt
	$(PIP) install -q -c requirements-lock.txt -e ".[embed]"
	touch $@

$(VENV)/.dev: $(PY) pyproject.toml requirements-lock.txt
	$(PIP) install -q -c requirements-lock.txt -e ".[dev,embed,train]"
	$(PIP) install -q -c requirements-lock.txt --no-deps bfcl-eval==2026.3.23 mpmath
	touch $@ $(VENV)/.core

lock: $(VENV)/.dev
	{ sed -n '1,2p' requirements-lock.txt; $(PIP) freeze --exclude-editable | grep -iv '^fabrika=' | grep -iv '^py-spy='; } > requirements-lock.txt.new
	mv requirements-lock.txt.new requirements-lock.txt

DEMO_RUN ?= runs/demo

demo: $(VENV)/.core
	$(VENV)/bin/fabrika run $(DEMO_CONFIG)
	$(VENV)/bin/fabrika export $(DEMO_RUN) --kind sft --format hf --out $(DEMO_RUN)/export/sft --overwrite
	$(VENV)/bin/fabrika export $(DEMO_RUN) --kind grpo --format hf --out $(DEMO_RUN)/export/grpo --overwrite
	$(VENV)/bin/fabrika report $(DEMO_RUN)
	@echo
	@echo "Dataset (gated, all stages): $(DEMO_RUN)/versions/  (made by the offline 'sim' backend: a stand-in, not model quality)"
	@echo "HF datasets:                  $(DEMO_RUN)/export/sft  $(DEMO_RUN)/export/grpo"
	@echo "Look at it:  $(VENV)/bin/fabrika status $(DEMO_RUN)"
	@echo "             $(PY) -c \"import datasets; ds = datasets.load_from_disk('$(DEMO_RUN)/export/sft'); print(ds); print(ds[0])\""
	@echo "             open $(DEMO_RUN)/report/index.html"

# bubblewrap: installed like .ci/run does (root + apt), else one loud line; CI=true makes its absence fail.
# Lint (ruff) and types (mypy) first: both pinned in the dev extra, configured in pyproject.toml.
test: $(VENV)/.dev
	@bash .ci/ensure-bwrap.sh
	$(VENV)/bin/ruff check fabrika tests bench
	$(VENV)/bin/mypy fabrika
	$(PY) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

# The report's browser test drives Debian's `chromium` through Playwright (never `playwright install`).
.PHONY: chromium
test: chromium
chromium:
	@command -v chromium >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq chromium) >/dev/null 2>&1 \
	  || echo "WARNING: could not install chromium: the report's browser test will be SKIPPED" >&2
