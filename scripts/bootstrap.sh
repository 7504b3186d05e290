#!/usr/bin/env bash
# Creates or refreshes the project's virtualenv (.venv at the repository root) from
# requirements-dev.lock (the runtime lock requirements.lock plus the test and development tools) and
# jvm-deps.lock. Every Python package is hash-checked: uv from requirements-uv.lock with pip
# --require-hashes, the build backend (setuptools) from requirements-build.lock, then the lock with uv
# pip sync --require-hashes. Nothing is built in an isolated build environment (which would fetch
# its backend from the index, unpinned and unhashed): pyspark's sdist and the project's own packages
# are built with --no-build-isolation by the locked setuptools in the virtualenv.
#
# The virtualenv is reused while the locks and the local packages' metadata are unchanged (a stamp
# file records their checksum), so repeated `make test` runs start at once. Java 17+ is checked first
# because Spark cannot start without it.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
stamp="$venv/.hubflow-stamp"

check_java() {
  local java_bin="${JAVA_HOME:+$JAVA_HOME/bin/}java"
  if ! command -v "$java_bin" >/dev/null 2>&1; then
    echo "hubflow: Java 17 or newer is required by Spark, and no 'java' was found." >&2
    echo "  Install it (Debian/Ubuntu: apt-get install openjdk-17-jre-headless) or set JAVA_HOME." >&2
    exit 3
  fi
  local version major
  version="$("$java_bin" -version 2>&1 | awk -F'"' '/version/ {print $2; exit}')"
  major="${version%%.*}"
  if [ -z "$major" ] || [ "$major" -lt 17 ] 2>/dev/null; then
    echo "hubflow: Java 17 or newer is required by Spark 4; found Java '${version:-unknown}' at $(command -v "$java_bin")." >&2
    echo "  Install openjdk-17 or point JAVA_HOME at a JDK 17+." >&2
    exit 3
  fi
}

wanted_stamp() {
  cat "$root/requirements-uv.lock" "$root/requirements-build.lock" "$root/requirements-dev.lock" "$root"/connectors/pyproject.toml "$root"/emulator/pyproject.toml \
    "$root"/control/pyproject.toml "$root"/jobs/pyproject.toml "$root"/cli/pyproject.toml \
    "$root"/connectors/setup.py "$root"/connectors/pyspark_eventhubs/_native.c \
    "$root/scripts/bootstrap.sh" "$root/jvm-deps.lock" "$root/scripts/jvm_deps.py" \
    2>/dev/null | sha256sum | cut -d' ' -f1
}

# A C compiler and the Python headers, for the connector's compiled hot loops
# (connectors/pyspark_eventhubs/_native.c, built by the editable install below). Without them the
# install still succeeds and the connector runs its pure-Python loops; the test that the compiled
# loops are built says so.
install_build_tools() {
  local missing=()
  command -v gcc >/dev/null 2>&1 || missing+=(gcc)
  python3 -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
    || missing+=(python3-dev)
  apt_install "to build the connector's compiled loops" "the connector will run its pure-Python loops" "${missing[@]}"
}

# apt_install WHY WITHOUT PACKAGE...: install the Debian packages (as root with apt-get), saying WHY;
# when they cannot be installed, say WITHOUT (what happens then) and go on.
apt_install() {
  local why="$1" without="$2"
  shift 2
  [ "$#" -eq 0 ] && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "hubflow: installing $* (Debian packages) $why" >&2
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "$@"; } >/dev/null 2>&1 \
      || echo "hubflow: could not install $*; $without" >&2
  else
    echo "hubflow: $* missing and not installable here (needs root and apt-get); $without" >&2
  fi
}

# Headless Chromium (status page browser tests) and docker-compose (validates docker-compose.yml
# without a Docker engine) come from Debian's packages; tests that need them skip, saying why,
# when they cannot be installed.
install_test_tools() {
  local missing=()
  command -v chromium >/dev/null 2>&1 || missing+=(chromium)
  command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
  command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
  apt_install "for the browser and compose tests" "the tests that need them will be skipped" "${missing[@]}"
}

# Azurite, Microsoft's Azure Storage emulator (the Blob API the storage tests run against), from npm
# at the version tests/support/azurite/package-lock.json pins. Reinstalled only when the lock
# changes. Tests that need it skip, saying why, where Node.js is missing.
install_azurite() {
  local folder="$root/tests/support/azurite"
  local stamp_file="$folder/node_modules/.hubflow-stamp"
  local wanted
  wanted="$(sha256sum "$folder/package-lock.json" | cut -d' ' -f1)"
  if [ -f "$stamp_file" ] && [ "$(cat "$stamp_file")" = "$wanted" ] && [ -x "$folder/node_modules/.bin/azurite-blob" ]; then
    return 0
  fi
  if ! command -v npm >/dev/null 2>&1; then
    echo "hubflow: npm (Node.js 20+) is missing, so Azurite cannot be installed; the Azure Blob tests will be skipped" >&2
    return 0
  fi
  echo "hubflow: installing Azurite (npm ci in tests/support/azurite) for the Azure Blob tests" >&2
  (cd "$folder" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null) || {
    echo "hubflow: npm ci of Azurite failed; the Azure Blob tests will fail until it installs" \
      "(see the output of: cd $folder && npm ci)" >&2
    return 0
  }
  echo "$wanted" >"$stamp_file"
}

# Apache Kafka's broker and tools (jvm-deps-kafka.lock) into tests/support/kafka/libs, each jar checked
# against its locked SHA-256 (downloads are cached; a present, matching jar is kept): the Kafka
# conformance tests (tests/kafka) start the broker from there. scripts/jvm_deps.py is stdlib-only.
install_kafka() {
  python3 "$root/scripts/jvm_deps.py" install --lock "$root/jvm-deps-kafka.lock" || {
    echo "hubflow: could not install jvm-deps-kafka.lock; the Kafka conformance tests will be skipped" >&2
    return 0
  }
}

check_java
if [ "${1:-}" = "--with-test-tools" ]; then
  install_test_tools
  install_azurite
  install_kafka
fi

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$(wanted_stamp)" ] && [ -x "$venv/bin/python" ]; then
  exit 0
fi

echo "hubflow: preparing $venv from requirements-dev.lock" >&2
install_build_tools
if [ ! -x "$venv/bin/python" ]; then
  python3 -c 'import sys; sys.exit(0 if sys.version_info[:2] >= (3, 11) else 1)' || {
    echo "hubflow: Python 3.11 or newer is required (python3 is $(python3 --version 2>&1))." >&2
    exit 3
  }
  python3 -m venv "$venv"
fi
# uv at the version and with the hashes of requirements-uv.lock (also the installer of the image).
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps \
  --only-binary :all: -r "$root/requirements-uv.lock"
# The build backend, hash-checked, before anything is built: requirements-dev.lock holds the same
# setuptools (same version and hashes), so the sync below keeps it.
"$venv/bin/uv" pip install --quiet --require-hashes --no-deps --only-binary :all: --python "$venv/bin/python" \
  -r "$root/requirements-build.lock"
# sync installs exactly the lock, every file checked against its sha256 (--require-hashes: a line
# without hashes is refused too): pyspark-client is left out of the lock on purpose, because it
# writes the same pyspark/ files as pyspark and would leave Python files and jars of two versions.
# --compile-bytecode: the .pyc files are written once here. Spark starts a new Python process for
# every streaming Python source (and planner) and waits a fixed 10 s (not configurable) for it to
# import pyspark and connect back; without bytecode caches (PYTHONDONTWRITEBYTECODE, a read-only
# or fresh venv) every such start compiles pyspark's sources again, which on a loaded machine
# alone outlasts that wait ("Python worker failed to connect back"). --no-build-isolation: pyspark
# publishes only an sdist, built here by the virtualenv's locked setuptools.
"$venv/bin/uv" pip sync --quiet --require-hashes --no-build-isolation --compile-bytecode \
  --python "$venv/bin/python" "$root/requirements-dev.lock"
# The project's own packages, editable, without touching their locked dependencies (the connector's
# C extension is built in place here, by the locked setuptools: connectors/setup.py). "compat" mode
# puts the folders on sys.path (a .pth file), so Spark's discovery of pyspark_* modules finds the
# connector and registers format("eventhubs") by itself, and the Airflow side imports the jobs'
# status-folder contract (hubflow.status) from the working copy. Built without isolation by the
# locked setuptools: nothing is fetched.
"$venv/bin/uv" pip install --quiet --python "$venv/bin/python" --no-deps --no-build-isolation --offline \
  --config-settings editable_mode=compat -e "$root/connectors" -e "$root/emulator" -e "$root/control" -e "$root/jobs" \
  -e "$root/cli"
# The locked JVM jars (Delta, Azure storage drivers) into pyspark's jars folder, checksums verified;
# jobs never fetch jars at run time.
"$venv/bin/python" "$root/scripts/jvm_deps.py" install
wanted_stamp >"$stamp"
