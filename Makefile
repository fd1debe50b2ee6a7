# jobforge: `make dev` brings up the embedded stack, `make test` runs the whole suite.
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: dev test lint bench faults clean browser compose-tools

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

# Options go through ARGS: make dev ARGS='--data-dir /tmp/x --api-port 8010' (jobforge dev --help).
dev: $(STAMP)
	$(BIN)/jobforge dev $(ARGS)

# The dashboard tests drive Debian's Chromium; as root, install it when missing.
browser:
	@command -v chromium >/dev/null || [ "$$(id -u)" != 0 ] || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }
	@command -v chromium >/dev/null || echo "chromium is missing: the dashboard tests will be skipped (apt-get install chromium)"

# tests/test_compose.py validates docker-compose.yml with Debian's docker-compose (no
# Docker engine needed); as root, install it when missing.
compose-tools:
	@command -v docker-compose >/dev/null || [ "$$(id -u)" != 0 ] || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-compose; }
	@command -v docker-compose >/dev/null || echo "docker-compose is missing: the compose validation will be skipped (apt-get install docker-compose)"

test: $(STAMP) browser compose-tools
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/pytest -q

lint: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy

# The fault battery at full load (CI runs it reduced, within `make test`); docs/reliability.md.
faults: $(STAMP)
	JOBFORGE_FAULT_LOAD=full $(BIN)/pytest -q tests/test_faults_processes.py tests/test_faults_inputs.py tests/test_fuzz.py

# The three main benches, one after the other (docs/benchmarks.md); each starts its own dev server.
bench: $(STAMP)
	$(BIN)/python -m bench.throughput --jobs 1000
	$(BIN)/python -m bench.claim_latency
	$(BIN)/python -m bench.event_latency

clean:
	rm -rf $(VENV) .jobforge .pytest_cache .mypy_cache .ruff_cache
