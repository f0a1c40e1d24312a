# corpusforge: every target does its own setup in the project's own virtualenv (.venv).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# What is installed, one stamp each: the package alone (make demo), then the extras make test needs, and the
# docs extra alone (make docs). A change to pyproject.toml installs again.
STAMP      := $(VENV)/.corpusforge-installed
TEST_STAMP := $(VENV)/.corpusforge-test-extras
DOCS_STAMP := $(VENV)/.corpusforge-docs-extra
STORE  ?= .corpusforge
# pip, not uv: on these machines pip's config points at the local CPU torch wheel (see the docs, Getting started).
PIP    := $(PY) -m pip --disable-pip-version-check
# torch is installed first and pinned, so that resolving the rest never pulls multi-GB CUDA wheels on a
# CPU machine. On a GPU machine, keep its torch: `make install TORCH_SPEC=` (empty) with a venv made by
# `python3 -m venv --system-site-packages .venv`, or name the wheel you want.
TORCH_SPEC ?= torch==2.13.0
# What make test adds to the package: the test tools, the Dask and Ray task runners (tests/flows/test_runners.py
# runs the pipeline on both) and the docs site's builder (tests/flows/test_docs.py builds it with --strict).
# `make test EXTRAS=dev,docs` leaves out the runners (Ray is an ~80 MB wheel); their tests then skip.
EXTRAS ?= dev,dask,ray,docs
# Test workers (pytest-xdist): one per core (at most 8) by default; the suite is CPU-bound and would use one core.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); [ $$n -gt 8 ] && n=8; echo $$n)
DOCS_DIR := deploy/docs
SITE     := $(DOCS_DIR)/site

.PHONY: install install-dev demo test test-fast lint docs shell ui clean-store help

help:
	@echo "make demo   - install the package alone into $(VENV) if needed, run configs/demo.yaml on data/sample, then configs/demo-translation.yaml on data/pairs and configs/demo-classification.yaml on data/labelled"
	@echo "make test   - install the package with the extras [$(EXTRAS)] into $(VENV) if needed, run the import-layer contract and the whole test suite, both tiers, on $(TEST_WORKERS) workers (it builds the docs with --strict)"
	@echo "make test-fast - the fast tier alone (no corpusforge subprocess, no server, no training to convergence; what a bare pytest runs): a few minutes"
	@echo "make docs   - build the documentation site ($(DOCS_DIR)/mkdocs.yml) into $(SITE)/ with --strict"
	@echo "make shell  - a shell with $(VENV) activated (the corpusforge command on PATH); or: source $(VENV)/bin/activate"
	@echo "make ui     - Prefect + MLflow UIs for the demo store on 127.0.0.1"

$(PY):
	$(PYTHON) -m venv $(VENV)

# The package alone: what make demo needs (a .venv of 2.5 GB; the README says when it was measured).
$(STAMP): pyproject.toml | $(PY)
	$(PIP) install -q --upgrade pip
	@if [ -n "$(TORCH_SPEC)" ] && ! $(PY) -c "import torch" 2>/dev/null; then \
		echo "installing $(TORCH_SPEC) first (CPU build on these machines)"; $(PIP) install -q "$(TORCH_SPEC)"; fi
	$(PIP) install -q -e .
	@touch $(STAMP)

# The extras make test needs, on top of the package.
$(TEST_STAMP): $(STAMP)
	$(PIP) install -q -e ".[$(EXTRAS)]"
	@case ",$(EXTRAS)," in *,docs,*) touch $(DOCS_STAMP);; esac
	@touch $(TEST_STAMP)

$(DOCS_STAMP): $(STAMP)
	$(PIP) install -q -e ".[docs]"
	@touch $(DOCS_STAMP)

install: $(STAMP)

install-dev: $(TEST_STAMP)

demo: $(STAMP)
	$(VENV)/bin/corpusforge run configs/demo.yaml --store $(STORE)
	$(VENV)/bin/corpusforge run configs/demo-translation.yaml --store $(STORE)
	$(VENV)/bin/corpusforge run configs/demo-classification.yaml --store $(STORE)
	$(VENV)/bin/corpusforge run configs/demo-tagging.yaml --store $(STORE)
	$(VENV)/bin/corpusforge run configs/demo-qa.yaml --store $(STORE)
	@echo
	@echo "The corpusforge command is in $(VENV)/bin. Put it on PATH with 'source $(VENV)/bin/activate'"
	@echo "(or 'make shell'), then try 'corpusforge artifacts find --store $(STORE)' or 'corpusforge ui --store $(STORE)'."

lint: $(TEST_STAMP)
	LINT_IMPORTS=$(VENV)/bin/lint-imports .ci/lint-imports

# Both tiers (deploy/docs/pages/internals/tests.md): the modules of a file stay on one worker (--dist loadscope),
# so a module's fixtures are built once.
test: $(TEST_STAMP) lint
	$(PY) -m pytest --tier all -n $(TEST_WORKERS) --dist loadscope

test-fast: $(TEST_STAMP)
	$(PY) -m pytest --tier fast -n $(TEST_WORKERS) --dist loadscope

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict -f $(DOCS_DIR)/mkdocs.yml
	@echo "open $(SITE)/index.html (or: $(VENV)/bin/mkdocs serve -f $(DOCS_DIR)/mkdocs.yml, on 127.0.0.1:8000)"

shell: $(STAMP)
	@echo "a shell with $(VENV) active (the corpusforge command on PATH); exit to leave it"
	@. $(VENV)/bin/activate && exec $${SHELL:-/bin/bash} -i

ui: $(STAMP)
	$(VENV)/bin/corpusforge ui --store $(STORE)

clean-store:
	rm -rf $(STORE)
