# CacheScout developer entry points. Every target creates .venv on first use.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo demo-tiered test lint install bench dashboards e2e-vllm replay sim clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

## The main job: simulated engine + proxy + multi-agent workload, direct vs through the proxy.
demo: $(STAMP)
	$(VENV)/bin/cachescout demo $(if $(TIERED),--tiered)

## The same with a host-memory (CPU offload) tier of 4x the cache behind each engine (= make demo TIERED=1).
demo-tiered: $(STAMP)
	$(VENV)/bin/cachescout demo --tiered

## The test suite (no GPU, no network beyond loopback).
test: $(STAMP)
	$(PY) -m pytest -q

## Linter, formatter check and type checker (strict on the pure core), as CI runs them.
lint: $(STAMP)
	$(VENV)/bin/ruff check proxy tests benchmarks dashboards
	$(VENV)/bin/ruff format --check proxy tests benchmarks dashboards
	$(VENV)/bin/mypy proxy
	$(VENV)/bin/mypy --strict proxy/core

bench: $(STAMP)
	$(PY) benchmarks/overhead.py
	$(PY) benchmarks/policy_core.py
	$(PY) benchmarks/replay_speed.py
	$(PY) benchmarks/hints_overhead.py

## Every policy side by side on a seeded multi-agent workload, in virtual time (report in replay-out/).
replay: $(STAMP)
	$(VENV)/bin/cachescout replay --workload selector --out replay-out

## The simulated engine alone, on :8100.
sim: $(STAMP)
	$(VENV)/bin/cachescout sim-engine --port 8100 --capacity-blocks 2048

dashboards: $(STAMP)
	$(PY) dashboards/generate.py

e2e-vllm: $(STAMP)
	bash tests/e2e_vllm/run.sh
	CACHESCOUT_E2E_CHECKS=7,8 CACHESCOUT_E2E_OUT=$${CACHESCOUT_E2E_OUT:-out/e2e-vllm}-priority bash tests/e2e_vllm/run.sh

clean:
	rm -rf $(VENV) .pytest_cache
