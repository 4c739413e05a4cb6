# Two entry points: `make demo` and `make test`. Both set up .venv and the cached testbed first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup testbed demo test lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	$(BIN)/pip install -q -e '.[test,report]'
	touch $(STAMP)

setup: $(STAMP)

testbed: setup
	$(BIN)/ruler testbed

demo: testbed
	$(BIN)/ruler run campaigns/demo-smollm2.yaml

test: testbed
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/pytest -q -ra

lint: setup
	$(BIN)/ruff check .
	$(BIN)/lint-imports

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
