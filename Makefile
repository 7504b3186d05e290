# hubflow developer commands. The two that matter:
#   make demo   run the main job on embedded defaults (emulator, local Spark)
#   make test   install everything (first run) and pass ruff and the test suite
# The team stack (docker-compose.yml, scripts/stack.sh, docs/deployment.md):
#   make stack-up / make stack-down [VOLUMES=1] / make stack-test
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
export PYSPARK_PYTHON := $(CURDIR)/$(VENV)/bin/python
export PYSPARK_DRIVER_PYTHON := $(CURDIR)/$(VENV)/bin/python
export SPARK_LOCAL_IP := 127.0.0.1

.PHONY: venv test-tools live-tests lock-livetests test test-stress test-all lint check-locks audit demo demo-stop \
  lock lock-jvm bench clean stack-up stack-down stack-test migration-env lock-images lock-spark35 \
  lock-jvm-spark35 lock-jvm-kafka

venv:
	@bash scripts/bootstrap.sh

test-tools:
	@bash scripts/bootstrap.sh --with-test-tools
	@$(VENV)/bin/python tests/support/class_archive.py || true
	@bash scripts/postgres.sh

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# The supply chain's offline checks, run by `make test` (so by CI) before the suite: the jars in the
# virtualenv's pyspark/jars are exactly jvm-deps.lock's, and tests/support/kafka/libs holds
# jvm-deps-kafka.lock's, each with its locked SHA-256 (the Python
# locks' pins and hashes are checked by tests/deploy/test_supply_chain.py, and every install of them
# is hash-checked).
check-locks: venv
	$(PY) scripts/jvm_deps.py check
	$(PY) scripts/jvm_deps.py check --lock jvm-deps-kafka.lock

# Known vulnerabilities of every locked Python package (requirements-dev.lock holds the runtime lock,
# the tools and uv), from PyPI's JSON API, or OSV with AUDIT_ARGS="-s osv". Online, so not part of
# `make test`; --strict fails when a package could not be audited (these machines reach neither
# service: every package is reported "not found"). The lock is hashed: nothing is installed.
audit: venv
	$(VENV)/bin/pip-audit --progress-spinner off --strict --require-hashes --disable-pip \
	  -r requirements-dev.lock $(AUDIT_ARGS)

# The default run: everything but the slow soaks, the docker-compose stack proof included (skipped
# with the reason where Docker cannot run). Three pytest-xdist workers on 2 cores, whole files each:
# one spends the proof's minutes of image building and waiting on it while the other two run the
# rest (the suite waits on processes far more than it computes: with two workers the cores were
# 30% idle). The 60 slowest tests are listed at the end, for keeping within the 40-minute target.
test: test-tools lint check-locks
	$(VENV)/bin/pytest -m "not slow" -n 3 --dist loadfile --no-loadscope-reorder --durations=60 $(PYTEST_ARGS)

# The load mode: the Airflow, Delta and stack test files, and those where a test judged a moment
# instead of waiting for a state (issue #52: the job's last log line, a broker's committed offsets,
# listener events, process exits, polls), on two workers beside two spinning processes (pytest
# --cpu-burn, tests/support/cpu_burner.py), so each test process gets about half the CPU it gets in
# `make test`: timing assumptions fail here before they fail in CI.
STRESS_TESTS ?= tests/dags tests/jobs/test_delta_backfill.py tests/jobs/test_delta_sinks.py \
  tests/jobs/test_delta_source.py tests/deploy/test_stack.py \
  tests/jobs/test_cluster_auth.py tests/jobs/test_submit.py tests/kafka/test_conformance.py \
  tests/jobs/test_eventhubs_aggregate.py tests/jobs/test_builtin_upgrade.py \
  tests/foundation/test_harness.py tests/plugins/triggers/test_event_arrivals.py \
  tests/control/test_job_control.py tests/plugins/status_page/test_airflow_plugin.py
test-stress: test-tools lint
	$(VENV)/bin/pytest -m "not slow" -n 2 --dist loadfile --no-loadscope-reorder --cpu-burn 2 --durations=15 \
	  $(STRESS_TESTS) $(PYTEST_ARGS)

# Every test, the slow soaks and the stack proof included (and the Spark 3.5 venv of the migration test).
test-all: test-tools lint migration-env
	$(VENV)/bin/pytest $(PYTEST_ARGS)

demo: venv
	$(PY) scripts/demo.py run $(DEMO_ARGS)

# Stop a demo stack left running by `make demo DEMO_ARGS=--keep-running`.
demo-stop: venv
	$(PY) scripts/demo.py stop

# The docker-compose stack: Docker prepared (as root with apt when missing), images made or pulled,
# started and healthy; prints the UI address and login.
stack-up: venv
	@bash scripts/stack.sh up

# Stop the stack and everything stack-up started; VOLUMES=1 deletes its data too.
stack-down:
	@bash scripts/stack.sh down $(if $(filter 1 yes true,$(VOLUMES)),--volumes)

# The proof on a stack of its own (project hubflow-proof), stopped and deleted afterwards.
stack-test: test-tools
	$(VENV)/bin/pytest tests/deploy/test_stack.py $(PYTEST_ARGS)

# Recompile the Python locks, every file's sha256 in them (needs the package index), with the uv of
# requirements-uv.lock: requirements-uv.lock (uv itself), requirements-build.lock (setuptools, the
# build backend every build uses without isolation), requirements.lock (the image's runtime,
# from requirements.in) and requirements-dev.lock (.venv: the runtime lock's versions plus the test
# and development tools of requirements-dev.in). pyspark-client is left out: it would overwrite
# pyspark's Python files with another version's.
LOCK_COMPILE := $(VENV)/bin/uv pip compile --quiet --generate-hashes --python-version 3.11
lock: venv
	$(LOCK_COMPILE) requirements-uv.in -o requirements-uv.lock
	$(LOCK_COMPILE) requirements-build.in -o requirements-build.lock
	$(LOCK_COMPILE) requirements.in --no-emit-package pyspark-client -o requirements.lock
	$(LOCK_COMPILE) requirements-dev.in --no-emit-package pyspark-client -o requirements-dev.lock

# Record in images.lock the build inputs of the images made here from Debian's packages (deploy/debian,
# deploy/postgres, deploy/redis); DIGESTS=1 also records each image's registry digest, pulling it
# (needs Docker and a registry). scripts/images.py; a test fails when the folders changed since.
lock-images:
	python3 scripts/images.py lock $(if $(filter 1 yes true,$(DIGESTS)),--digests)

# Recompile jvm-deps.lock from jvm-deps.in (needs Maven and Maven Central).
lock-jvm: venv
	$(PY) scripts/jvm_deps.py lock

# Recompile jvm-deps-kafka.lock (Apache Kafka's broker and tools for tests/kafka, a classpath of its
# own in tests/support/kafka/libs) from jvm-deps-kafka.in.
lock-jvm-kafka: venv
	$(PY) scripts/jvm_deps.py lock --lock jvm-deps-kafka.lock

# The Spark 3.5 virtualenv (.venv-spark35) with Microsoft's Scala Event Hubs connector that
# tests/migration runs a stream in before continuing it on Spark 4.2 (slow: `make test-all` makes it).
migration-env:
	@bash scripts/migration_env.sh

# Recompile its locks: requirements-spark35.lock (pyspark 3.5, hashes) and jvm-deps-spark35.lock
# (resolved against that venv's pyspark/jars, so Spark 3.5's versions win).
lock-spark35: venv
	$(LOCK_COMPILE) requirements-spark35.in -o requirements-spark35.lock
lock-jvm-spark35: migration-env
	.venv-spark35/bin/python scripts/jvm_deps.py lock --lock jvm-deps-spark35.lock

# Microsoft's own live tests of the locked azure-eventhub release, unmodified, against the emulator
# (docs/emulator.md "Microsoft's live tests"): the sdist in scripts/sdk_live_tests/sdist.lock is
# fetched from PyPI and checked, its tests/ run in .venv-livetests. Not part of `make test` (about
# 10 minutes each). LIVE_SUITES=sync or async for one; LIVE_ARGS goes to pytest (e.g. -k send).
LIVE_SUITES ?= sync async
live-tests: venv
	@bash scripts/livetests_env.sh
	@rc=0; for suite in $(LIVE_SUITES); do \
	  $(PY) scripts/sdk_live_tests/run.py $$suite $(LIVE_ARGS) || rc=1; done; exit $$rc

# Recompile requirements-livetests.lock (hashes) from requirements-livetests.in.
lock-livetests: venv
	$(LOCK_COMPILE) -c requirements-dev.lock requirements-livetests.in -o requirements-livetests.lock

clean:
	rm -rf $(VENV) .venv-spark35 .venv-livetests .pytest_cache .ruff_cache
