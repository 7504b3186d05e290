#!/usr/bin/env bash
# Creates or refreshes the virtualenv (.venv-livetests at the repository root) in which
# `make live-tests` runs Microsoft's live tests of azure-eventhub: requirements-livetests.lock, every
# file hash-checked. Kept apart from .venv: the tests need azure-mgmt-eventhub, the blob checkpoint
# stores and python-dotenv, and the run adds the emulator's CA to this venv's certifi bundle (the
# SDK trusts only certifi's). Reused while the lock is unchanged (a stamp records its checksum).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv-livetests"
stamp="$venv/.hubflow-stamp"

wanted_stamp() {
  cat "$root/requirements-livetests.lock" "$root/scripts/livetests_env.sh" | sha256sum | cut -d' ' -f1
}

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$(wanted_stamp)" ] && [ -x "$venv/bin/python" ]; then
  exit 0
fi

echo "hubflow: preparing $venv for Microsoft's azure-eventhub live tests" >&2
[ -x "$venv/bin/python" ] || "$root/.venv/bin/python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps \
  -r "$root/requirements-livetests.lock"
wanted_stamp >"$stamp"
