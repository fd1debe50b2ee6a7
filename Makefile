# jobforge: `make dev` brings up the embedded stack, `make check` the fast tier of the
# checks, `make test` the whole suite, `make faults` the fault battery at full load.
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Bytecode caches on, whatever the environment says: else every pytest process and every
# process the tests start compiles the project's modules again (and pytest rewrites every
# test module again). Collecting the suite takes 8 s of CPU without them, 4 s with
# (`.venv/bin/pytest --collect-only -q -p no:xdist`, run twice).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: dev check test lint bench faults faults-rotation coverage cpu-ledger clean debian-tools

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

# Options go through ARGS: make dev ARGS='--data-dir /tmp/x --api-port 8010' (jobforge dev --help).
dev: $(STAMP)
	$(BIN)/jobforge dev $(ARGS)

# Debian packages the tests drive, as package:command: Chromium (the dashboard tests),
# docker-compose (tests/test_compose.py validates docker-compose.yml; no Docker engine
# needed), podman, runc and a static busybox (tests/test_containers.py runs real
# containers of a busybox image). As root, the missing ones are installed with one
# apt-get run; otherwise their tests skip.
DEBIAN_TOOLS := chromium:chromium docker-compose:docker-compose podman:podman runc:runc busybox-static:busybox
debian-tools:
	@missing=; for pair in $(DEBIAN_TOOLS); do command -v $${pair#*:} >/dev/null || missing="$$missing $${pair%%:*}"; done; \
	if [ -n "$$missing" ] && [ "$$(id -u)" = 0 ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; fi; \
	for pair in $(DEBIAN_TOOLS); do command -v $${pair#*:} >/dev/null || echo "$${pair%%:*} is missing: its tests will be skipped (apt-get install $${pair%%:*})"; done

# The fast tier, under a minute: lint, types, and the tests that start no process but the
# Temporal dev server (unit tests, in-process workflow tests, replays; tests/tiers.py).
# Four test processes on two cores: a third of the tier's time is spent waiting on
# workflow timers, which overlap.
check: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/pytest -q -n 4 --dist worksteal -m "not process"

# TEST_WORKERS test processes (pytest-xdist) that take tests as they free up: most tests
# wait on processes and timeouts, so they overlap well on two cores. Four took 385 and
# 391 s at `e530c15`, three 417 s (README, "Develop").
TEST_WORKERS ?= 4
test: $(STAMP) debian-tools
	$(BIN)/ruff check .
	$(BIN)/mypy
	@start=$$(date +%s); $(BIN)/pytest -q -n $(TEST_WORKERS) --dist worksteal --durations=15 || exit $$?; \
	took=$$(( $$(date +%s) - start )); \
	if [ $$took -lt $(CI_SUITE_BUDGET_S) ]; then $(MAKE) --no-print-directory faults-rotation; \
	else echo "fault rotation: skipped (the suite took $$took s, the budget is $(CI_SUITE_BUDGET_S) s)"; fi

lint: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy

# The fault battery at full load (CI runs it reduced, within `make test`); docs/reliability.md.
FAULT_TESTS := tests/test_faults_processes.py tests/test_faults_scheduling.py \
	tests/test_faults_inputs.py tests/test_fuzz.py tests/test_faults_job_control.py \
	tests/test_faults_tenants.py tests/test_faults_dispatch.py
faults: $(STAMP)
	JOBFORGE_FAULT_LOAD=full $(BIN)/pytest -q $(FAULT_TESTS)

# One scenario of the battery at full load, by rotation: of the battery's process-tier
# tests in collection order, number ROTATION modulo their count (default: today's day of
# the year, UTC). .ci/run runs it after a `make test` that finished within its budget.
ROTATION ?= $(shell date -u +%-j)
# A suite that passed within this many seconds is followed by one rotation scenario.
CI_SUITE_BUDGET_S ?= 300
faults-rotation: $(STAMP)
	@scenarios=$$(JOBFORGE_FAULT_LOAD=full $(BIN)/pytest --collect-only -q -p no:xdist \
		-m process $(FAULT_TESTS) | grep '::'); \
	count=$$(echo "$$scenarios" | wc -l); k=$$(( $(ROTATION) % count )); \
	pick=$$(echo "$$scenarios" | sed -n "$$((k + 1))p"); \
	echo "fault rotation: scenario $$((k + 1)) of $$count (ROTATION=$(ROTATION)) at full load: $$pick"; \
	JOBFORGE_FAULT_LOAD=full $(BIN)/pytest -q -p no:xdist "$$pick"

# The whole suite with line coverage, the processes it starts included (slower than
# `make test`): a summary per package, then `coverage html` for the lines.
# Processes start fresh (not forked from tests/zygote.py): coverage starts with each.
coverage: $(STAMP) debian-tools
	rm -rf .coverage-data
	JOBFORGE_TEST_FRESH_PROCESSES=1 $(BIN)/coverage run -m pytest -q -n 3 --dist worksteal
	$(BIN)/coverage combine -q
	$(BIN)/coverage report --format=total
	$(BIN)/coverage report | awk 'NR<=2 || /TOTAL/' ; for pkg in workflows activities api engine worker; do $(BIN)/coverage report --include="$$pkg/*" --format=total | sed "s|^|$$pkg: |;s|$$|%|"; done

# The whole suite, each test's CPU noted (its own, its processes', the session servers'
# share while it ran: tests/cpu_ledger.py), then the kinds, files and tests that cost most.
cpu-ledger: $(STAMP) debian-tools
	rm -rf .jobforge/cpu-ledger
	@status=0; JOBFORGE_CPU_LEDGER=.jobforge/cpu-ledger $(BIN)/pytest -q -n 3 --dist worksteal \
		|| status=$$?; $(BIN)/python -m tests.cpu_ledger .jobforge/cpu-ledger; exit $$status

# The main benches, one after the other (docs/benchmarks.md); each starts its own dev server.
bench: $(STAMP)
	$(BIN)/python -m bench.throughput --jobs 1000
	$(BIN)/python -m bench.claim_latency
	$(BIN)/python -m bench.event_latency
	$(BIN)/python -m bench.gates
	$(BIN)/python -m bench.progress
	$(BIN)/python -m bench.container_overhead

clean:
	rm -rf $(VENV) .jobforge .pytest_cache .mypy_cache .ruff_cache .coverage-data
