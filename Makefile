# Two entry points: `make demo` and `make test`. Both set up .venv and the cached testbed first.
# `make help` lists every target.
SHELL  := /bin/bash
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: help setup testbed demo test unit component lint fmt clean

# Types: engine/, tui/, bench/ and tests/ ([tool.mypy] in pyproject.toml).
MYPY := $(BIN)/mypy

help:  ## this list
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

# A machine whose environment sets PYTHONDONTWRITEBYTECODE (this one's does) compiles the engine
# again in every process: each `ruler` a test starts cost about 1 s of CPU more than with its
# bytecode kept, and a tier starts hundreds. The targets keep bytecode, and setup compiles it once
# (each tier's workers would otherwise compile the same modules side by side).
unexport PYTHONDONTWRITEBYTECODE

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	$(BIN)/pip install -q -e '.[test,report,bench]'
	touch $(STAMP)

setup: $(STAMP)  ## .venv with ruler installed editable, its test, report and bench extras
	@$(BIN)/python -m compileall -q engine tui tests bench >/dev/null

testbed: setup  ## build or find the cached testbed (llama-server, SmolLM2, vLLM's CPU build)
	$(BIN)/ruler testbed

# The demo campaign runs on llama.cpp alone: it does not wait for vLLM's 3.4 GB environment.
# make cannot change its caller's PATH: its last line is the one that puts ruler there, so that
# every command ruler printed (`ruler report RUN`, `ruler attach RUN`) works as printed.
demo: setup  ## the llama.cpp testbed, then the demo campaign
	$(BIN)/ruler testbed --no-vllm
	$(BIN)/ruler run campaigns/demo-smollm2.yaml; rc=$$?; \
	  echo "ruler is $(CURDIR)/$(BIN)/ruler; to type it as ruler, run: export PATH=\"$(CURDIR)/$(BIN):\$$PATH\""; \
	  exit $$rc

# The tiers in order: unit (in process, on three workers), component (the Runner on in-process fakes
# and the commands end to end in forked children, on two workers), integration (real llama-server,
# vLLM, Docker, Slurm, sockets; on two workers, a module per worker so module fixtures run once,
# handed out in the order tests/integration/conftest.py gives, not by their count of tests).
# A unit worker is idle a quarter of its time (a console test waits for the screen to settle after
# each key), so three keep two cores busy: 83-87 s against 89-90 s on two here. The first two
# tiers steal work: a worker that runs dry takes tests from another's queue, so a tier does not
# end on one worker finishing a long test while the others idle. A failing step stops the ones
# after it. Each tier's pytest summary and time is printed again at the end. A tier that collects
# no test exits 5 and fails the target.
TIERS := unit component integration
tier_args_unit := -n 3 --dist worksteal
tier_args_component := -n 2 --dist worksteal
tier_args_integration := -n 2 --dist loadfile --no-loadscope-reorder --durations=25

# Only the integration tier needs the testbed: `ruler testbed` runs in the background from the
# start, at nice 19 (vLLM's environment is mostly downloads; llama.cpp's build takes only the CPU
# the lint and the first two tiers leave idle: mypy runs on one core, a unit worker idles a quarter
# of its time; a component test on fakes times its fake server, and calls a row noisy when the
# machine is busy enough), and the integration tier waits for it. Its log is printed then; a
# testbed that failed fails the target there, by name, with its exit status. Leaving early (a
# failed step, ^C) stops it: an interrupted build resumes where it stopped next time. Each step
# begins with a line "== STEP" (bench/fresh_ci.sh times them).
test: setup  ## what CI runs: the testbed beside ruff, lint-imports, mypy, unit, component; then integration
	@rc=0; recap=""; failed=""; tblog=$$(mktemp); \
	echo "== testbed, in the background (niced) until the integration tier"; \
	nice -n 19 setsid -w $(BIN)/ruler testbed >$$tblog 2>&1 </dev/null & tb=$$!; \
	trap 'kill -- -'$$tb' 2>/dev/null; rm -f '$$tblog EXIT; \
	echo "== lint"; \
	$(BIN)/ruff check . && $(BIN)/lint-imports && $(MYPY) || { rc=1; failed=lint; }; \
	for tier in $(TIERS); do \
	  if [ $$rc -ne 0 ]; then recap+="$$tier tier: not run (the $$failed step failed)"$$'\n'; continue; fi; \
	  if [ $$tier = integration ]; then \
	    echo "== testbed: waiting for it"; wait $$tb; tbrc=$$?; cat $$tblog; \
	    echo "== testbed: done (exit $$tbrc)"; \
	    if [ $$tbrc -ne 0 ]; then \
	      rc=$$tbrc; failed=testbed; \
	      recap+="integration tier: not run (ruler testbed failed, exit $$tbrc: its log is above)"$$'\n'; \
	      continue; \
	    fi; \
	  fi; \
	  echo "== $$tier tier"; log=$$(mktemp); \
	  case $$tier in unit) args="$(tier_args_unit)";; component) args="$(tier_args_component)";; \
	    *) args="$(tier_args_integration)";; esac; \
	  $(BIN)/pytest -q -ra $$args tests/$$tier 2>&1 | tee $$log; rc=$${PIPESTATUS[0]}; \
	  [ $$rc -ne 0 ] && failed=$$tier; \
	  recap+="$$tier tier: $$(tail -n 1 $$log)"$$'\n'; rm -f $$log; \
	done; \
	printf '\n%s' "$$recap"; exit $$rc

unit: setup  ## the unit tier alone (no testbed needed)
	$(BIN)/pytest -q -ra $(tier_args_unit) tests/unit

component: setup  ## the component tier alone: the Runner on fakes, commands in children (no testbed)
	$(BIN)/pytest -q -ra $(tier_args_component) tests/component

lint: setup  ## ruff, lint-imports, mypy
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(MYPY)

# Fixes what ruff can (import order, upgrades, simplifications). No `ruff format`: at this
# line length it reflows 402 of 506 files, the engine and console from 36,039 lines to 41,080
# (a call's arguments one per line), six modules past the 500 lines a module keeps to; the
# layout stays hand-set, held by `ruff check`.
fmt: setup  ## ruff's fixes in place (imports sorted and the like)
	$(BIN)/ruff check --fix .

clean:  ## remove .venv and the tools' caches
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache
