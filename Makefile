# tieredctl: the two commands a fresh machine needs are `make demo` and `make test`; `make check` is the minute-long
# loop while working (lint and every unit test), `make soak` the long runs at full size.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
# Python writes bytecode (our own modules' and pytest's rewritten test modules', under __pycache__/, ignored by git)
# even where the caller's environment says not to: without it every process a test starts compiles the package
# again, and every pytest worker rewrites every test module's asserts again (20 s of make check's collection).
# For the same reason the install does not compile the dependencies (--no-compile): the first process that imports
# a module writes its bytecode, so only what runs is compiled (pyspark, botocore and moto ship thousands of modules
# that never do), which took 14 s of a fresh clone's 36 s install.
unexport PYTHONDONTWRITEBYTECODE
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The compiled hot paths (*.pyx) are built by the same install: a change to one installs again.
BUILD_INPUTS := pyproject.toml $(wildcard orchestrator/*/*.pyx)
STAMP := $(VENV)/.installed-$(shell cat $(BUILD_INPUTS) | md5sum | cut -c1-12)

.PHONY: all venv java-check clients kcat postgres setup scan-class-archive lint ruff-check ruff-format mypy lint-imports test check \
	unit unit-tests soak slowest demo bench chaos clean

all: test

$(STAMP): $(BUILD_INPUTS)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --no-compile -e '.[dev,s3server,spark]'
	@rm -f $(VENV)/.installed-*
	@touch $(STAMP)

venv: $(STAMP)

java-check:
	@command -v java >/dev/null 2>&1 || { echo "error: Java 17+ is required (PySpark 4 runs on the JVM). Install it, e.g. 'apt-get install openjdk-17-jre-headless', and retry." >&2; exit 1; }
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1); \
	  if [ -z "$$v" ] || [ "$$v" -lt 17 ]; then echo "error: Java 17+ is required, found '$$v' at $$(command -v java)." >&2; exit 1; fi

# The third-party Kafka clients the compatibility tests use as judges: kafkajs (npm) and kcat (Debian's kafkacat).
KAFKAJS_DIR := tests/clients/kafkajs
KAFKAJS_STAMP := $(KAFKAJS_DIR)/node_modules/.installed-$(shell cat $(KAFKAJS_DIR)/package-lock.json | md5sum | cut -c1-12)

$(KAFKAJS_STAMP): $(KAFKAJS_DIR)/package.json $(KAFKAJS_DIR)/package-lock.json
	@command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || { echo "error: Node.js 20 and npm are needed by the kafkajs compatibility tests. Install them (e.g. 'apt-get install -y nodejs npm', or from nodejs.org) and retry." >&2; exit 1; }
	cd $(KAFKAJS_DIR) && npm ci --no-audit --no-fund --loglevel=error
	@rm -f $(KAFKAJS_DIR)/node_modules/.installed-*
	@touch $(KAFKAJS_STAMP)

kcat:
	@command -v kcat >/dev/null 2>&1 || command -v kafkacat >/dev/null 2>&1 || { \
	  echo "kcat is missing: installing Debian's kafkacat package"; \
	  { command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; } || { echo "error: kcat is needed by the Kafka compatibility tests; install Debian's 'kafkacat' package (apt-get install -y kafkacat) as root and retry." >&2; exit 1; }; \
	  apt-get install -y -q kafkacat >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q kafkacat >/dev/null; } || { echo "error: 'apt-get install -y kafkacat' failed; install kcat by hand and retry." >&2; exit 1; }; \
	}

clients: $(KAFKAJS_STAMP) kcat

# The PostgreSQL server binaries the store's PostgreSQL tests start a throwaway server with (initdb, postgres).
postgres:
	@command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  echo "PostgreSQL's server binaries are missing: installing Debian's postgresql package"; \
	  { command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; } || { echo "error: the PostgreSQL store tests need PostgreSQL's server (initdb, postgres); install Debian's 'postgresql' package (apt-get install -y postgresql) as root and retry." >&2; exit 1; }; \
	  apt-get install -y -q postgresql >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q postgresql >/dev/null; } || { echo "error: 'apt-get install -y postgresql' failed; install PostgreSQL 15's server by hand and retry." >&2; exit 1; }; \
	}

# Everything `make test` needs on a fresh machine: the venv, Java, the Kafka clients, PostgreSQL's binaries, and the
# scan JVM's class-data archive (remote_storage/scan/class_archive.py: built once per machine and PySpark build, in
# ~/.cache/tieredctl, about 40 s; every local scan's JVM then starts in about half the time). An archive that cannot
# be built is a warning, not a failure: scans run as before without it.
setup: venv java-check clients postgres scan-class-archive

scan-class-archive: venv java-check
	@$(VENV)/bin/python -m remote_storage.scan.class_archive build || echo "warning: the scan's class-data archive was not built (above); scans run without it, slower to start" >&2

# The four linters are independent: `make -j4 lint` (as `make check` does) runs them side by side.
lint: ruff-check ruff-format mypy lint-imports

ruff-check: venv
	$(VENV)/bin/ruff check .

ruff-format: venv
	$(VENV)/bin/ruff format --check .

mypy: venv
	$(VENV)/bin/mypy

lint-imports: venv
	$(VENV)/bin/lint-imports --no-cache

# pytest-xdist: TEST_WORKERS processes, two more than the cores: the tests spend part of their time waiting on the
# processes they start, so one per core left the CPUs idle a third of the time. On this suite and 2 cores: 3 workers
# ran the tests in 570 s (CPU 81% busy), 4 in 466 s (89%), 5 in 506 s (97%, and a standby's takeover starved past
# its test's 30 s wait). --dist loadscope hands out whole modules, the longest first
# (tests/support/schedule.py; xdist's own order, most tests first, left the longest for last), so a module's
# live cluster (a module-scoped fixture) starts once, and tests that read what earlier tests of their module left
# (the clients' request traces) run in order on one worker; the modules that use the SparkSession go to one worker
# as one unit, so one JVM warms up instead of three. Each worker has its own moto server, PostgreSQL server,
# SparkSession, temporary directories and slice of ports (tests/conftest.py).
TEST_WORKERS ?= $(shell echo $$(( $$(nproc) + 2 )))
PYTEST_PARALLEL := $(VENV)/bin/pytest -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder

# The whole suite, from a fresh clone: set-up, then the linters beside every test on every core (lint's output,
# kept in var/lint.log, is printed once the tests end); either failing fails the run. CI runs exactly this.
LINT_LOG := var/lint.log
test: setup
	@mkdir -p var
	@set +e; \
	  $(MAKE) --no-print-directory -j4 --output-sync=target lint > $(LINT_LOG) 2>&1 & lint=$$!; \
	  $(PYTEST_PARALLEL); tests=$$?; \
	  wait $$lint; linted=$$?; \
	  echo "--- lint ($(LINT_LOG)) ---"; cat $(LINT_LOG); \
	  if [ $$linted -ne 0 ]; then echo "error: lint failed (above); 'make lint' runs it alone" >&2; fi; \
	  if [ $$tests -ne 0 ]; then echo "error: tests failed (pytest exit status $$tests)" >&2; fi; \
	  [ $$linted -eq 0 ] && [ $$tests -eq 0 ]

# The loop while working, under a minute: the linters and every unit test (pure logic, selected by marker), side
# by side. Needs only the venv. Property tests run CHECK_EXAMPLES examples each here (tests/support/examples.py);
# `make test` runs them at their full count.
CHECK_EXAMPLES ?= 1
check: venv
	$(MAKE) --no-print-directory -j5 --output-sync=target ruff-check ruff-format mypy lint-imports unit-tests

unit-tests: venv
	$(VENV)/bin/pytest -m unit -q -n $(TEST_WORKERS) --examples-cap=$(CHECK_EXAMPLES)

unit: unit-tests

# The tests that exist to run long, at full size (`make test` runs them smaller): the 50 local clusters under port
# churn, ten more chaos seeds at make chaos's size and four with replicas whose brokers lose their disks, the
# standalone Spark cluster in both inventory formats, the demo. The soak marker selects them; --soak sizes them (tests/support/soak.py).
soak: setup
	$(PYTEST_PARALLEL) --soak -m soak

# The 30 slowest tests of the newest run (every run writes var/test-reports/durations-*.json).
slowest: venv
	$(PY) -m tests.support.durations --top 30

demo: venv java-check
	$(PY) -m orchestrator.demo

# The fault suite's long run: SEEDS random scenarios on real clusters under faults, checked; prints a table of
# violations and coverage (each fault kind and crash point hit, by store, security and replication factor).
# STORE=postgresql keeps the metadata in a throwaway PostgreSQL server started for the run (a database per seed; the
# server's pauses and restarts join the faults), STORE=all runs each seed on both; SECURE=1 runs on TLS, SCRAM logins
# and ACLs; RF=3 creates the workload's topics with 3 replicas and min.insync.replicas=2 (RF=1, the default: one);
# DISK=1 makes brokers' data directories fail with EIO, or turn read-only or full (mounts, so as root), and with RF=3
# lost; a broker halts on its failed disk.
# OPS, TOPICS, CONTROLLERS and BROKERS size each scenario (OPS=100 TOPICS=10 CONTROLLERS=3 BROKERS=4: the long ones).
# MATRIX=1 deals the seeds round the full matrix in turn (SQLite and PostgreSQL, plain and secure, RF 1 and 3, all with
# disk faults: as root), one column each; SEEDS=200 gives each of the eight 25 seeds.
SEEDS ?= 200
STORE ?= sqlite
RF ?= 1
OPS ?= 20
TOPICS ?= 3
CONTROLLERS ?= 2
BROKERS ?= 3
chaos: venv $(if $(or $(MATRIX),$(filter postgresql all,$(STORE))),postgres)
	$(PY) -m chaos --seeds $(SEEDS) --store $(STORE) --replication-factor $(RF) $(if $(SECURE),--secure) \
	  $(if $(DISK),--disk-faults) $(if $(MATRIX),--matrix) --operations $(OPS) --topics $(TOPICS) \
	  --controllers $(CONTROLLERS) --brokers $(BROKERS)

AWS_CLI_VENV := .venv-awscli

$(AWS_CLI_VENV)/bin/aws:
	$(PYTHON) -m venv $(AWS_CLI_VENV)
	$(AWS_CLI_VENV)/bin/pip install --quiet awscli

bench: venv java-check $(AWS_CLI_VENV)/bin/aws
	AWS_CLI=$(CURDIR)/$(AWS_CLI_VENV)/bin/aws $(PY) -m bench

clean:
	rm -rf $(VENV) $(AWS_CLI_VENV) .pytest_cache .mypy_cache .ruff_cache build *.egg-info
