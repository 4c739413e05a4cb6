# Two entry points: `make demo` and `make test`. Both set up .venv and the cached testbed first.
# `make unit` runs only the unit tier (no testbed needed).
SHELL  := /bin/bash
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup testbed demo test unit lint clean

# Types: engine/, tui/ and tests/ ([tool.mypy] in pyproject.toml).
MYPY := $(BIN)/mypy

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	$(BIN)/pip install -q -e '.[test,report,bench]'
	touch $(STAMP)

setup: $(STAMP)

testbed: setup
	$(BIN)/ruler testbed

# The demo campaign runs on llama.cpp alone: it does not wait for vLLM's 3.4 GB environment.
demo: setup
	$(BIN)/ruler testbed --no-vllm
	$(BIN)/ruler run campaigns/demo-smollm2.yaml

# The unit tier (in-process, seconds) then the integration tier (real llama-server, Docker,
# sockets; on two workers, a module per worker so module fixtures run once); a failing unit tier
# stops there. Each tier's pytest summary and time is printed again at the end. A tier that collects no test exits 5 and fails the target.
test: testbed
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(MYPY)
	@rc=0; recap=""; \
	for tier in unit integration; do \
	  if [ $$rc -ne 0 ]; then recap+="$$tier tier: not run (the unit tier failed)"$$'\n'; continue; fi; \
	  log=$$(mktemp); \
	  args=""; [ $$tier = integration ] && args="-n 2 --dist loadfile"; \
	  $(BIN)/pytest -q -ra $$args tests/$$tier 2>&1 | tee $$log; rc=$${PIPESTATUS[0]}; \
	  recap+="$$tier tier: $$(tail -n 1 $$log)"$$'\n'; rm -f $$log; \
	done; \
	printf '\n%s' "$$recap"; exit $$rc

unit: setup
	$(BIN)/pytest -q -ra tests/unit

lint: setup
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(MYPY)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache
