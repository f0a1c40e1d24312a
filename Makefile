# corpusforge: every target does its own setup in the project's own virtualenv (.venv).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.corpusforge-installed
STORE  ?= .corpusforge
# pip, not uv: on these machines pip's config points at the local CPU torch wheel (see README).
PIP    := $(PY) -m pip --disable-pip-version-check
# torch is installed first and pinned, so that resolving the rest never pulls multi-GB CUDA wheels on a
# CPU machine. On a GPU machine, keep its torch: `make install TORCH_SPEC=` (empty) with a venv made by
# `python3 -m venv --system-site-packages .venv`, or name the wheel you want.
TORCH_SPEC ?= torch==2.13.0
# The test tools plus the Dask and Ray task runners (tests/flows/test_runners.py runs the pipeline on both).
# `make install EXTRAS=dev` leaves out the runners (Ray is an ~80 MB wheel); their tests then skip.
EXTRAS ?= dev,dask,ray

.PHONY: install demo test lint ui clean-store help

help:
	@echo "make demo   - install into $(VENV) if needed, run configs/demo.yaml on data/sample, then configs/demo-translation.yaml on data/pairs and configs/demo-classification.yaml on data/labelled"
	@echo "make test   - install into $(VENV) if needed, run the import-layer contract and the test suite"
	@echo "make ui     - Prefect + MLflow UIs for the demo store on 127.0.0.1"

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PIP) install -q --upgrade pip
	@if [ -n "$(TORCH_SPEC)" ] && ! $(PY) -c "import torch" 2>/dev/null; then \
		echo "installing $(TORCH_SPEC) first (CPU build on these machines)"; $(PIP) install -q "$(TORCH_SPEC)"; fi
	$(PIP) install -q -e ".[$(EXTRAS)]"
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/corpusforge run configs/demo.yaml --store $(STORE)
	$(VENV)/bin/corpusforge run configs/demo-translation.yaml --store $(STORE)
	$(VENV)/bin/corpusforge run configs/demo-classification.yaml --store $(STORE)

lint: $(STAMP)
	LINT_IMPORTS=$(VENV)/bin/lint-imports .ci/lint-imports

test: $(STAMP) lint
	$(PY) -m pytest

ui: $(STAMP)
	$(VENV)/bin/corpusforge ui --store $(STORE)

clean-store:
	rm -rf $(STORE)
