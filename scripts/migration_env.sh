#!/usr/bin/env bash
# Creates or refreshes the Spark 3.5 virtualenv (.venv-spark35 at the repository root) of the
# migration test (tests/migration): pyspark 3.5 from requirements-spark35.lock (every file
# hash-checked) and Microsoft's Scala Event Hubs connector with its dependencies from
# jvm-deps-spark35.lock in that venv's pyspark/jars (SHA-256 checked). Kept apart from .venv, whose
# Spark 4.2 (Scala 2.13) cannot load the connector's Scala 2.12 jar. `make migration-env` runs it;
# `make test-all` too. Reused while the locks are unchanged (a stamp records their checksum).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv-spark35"
stamp="$venv/.hubflow-stamp"

wanted_stamp() {
  cat "$root/requirements-spark35.lock" "$root/requirements-build.lock" "$root/jvm-deps-spark35.lock" "$root/scripts/jvm_deps.py" \
    "$root/scripts/migration_env.sh" | sha256sum | cut -d' ' -f1
}

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$(wanted_stamp)" ] && [ -x "$venv/bin/python" ]; then
  exit 0
fi

echo "hubflow: preparing $venv (Spark 3.5 and the Scala Event Hubs connector) for the migration test" >&2
if [ ! -x "$venv/bin/python" ]; then
  python3 -c 'import sys; sys.exit(0 if sys.version_info[:2] >= (3, 8) else 1)' || {
    echo "hubflow: pyspark 3.5 needs Python 3.8 or newer (python3 is $(python3 --version 2>&1))." >&2
    exit 3
  }
  python3 -m venv "$venv"
fi
# pyspark publishes only an sdist: it is built without isolation by the setuptools of
# requirements-build.lock, installed hash-checked first (an isolated build would fetch an unpinned,
# unhashed one from the index).
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps \
  --only-binary :all: -r "$root/requirements-build.lock"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps \
  --no-build-isolation -r "$root/requirements-spark35.lock"
# Run with this venv's python, so the jars go into (and are resolved against) its pyspark/jars.
"$venv/bin/python" "$root/scripts/jvm_deps.py" install --lock "$root/jvm-deps-spark35.lock"
"$venv/bin/python" "$root/scripts/jvm_deps.py" check --lock "$root/jvm-deps-spark35.lock"
wanted_stamp >"$stamp"
