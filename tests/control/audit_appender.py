"""A child process of the audit-trail tests: ``audit_appender.py URL WRITER COUNT GO`` waits for the
file GO to exist (so every writer starts at once), appends COUNT entries by ``writer WRITER`` (reason
= the entry's number) to the status folder at URL, then prints ``ATTEMPTS <n>``: the conditional
writes it made in all (more than COUNT when it lost a race and retried)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from hubflow.operations import audit
from hubflow.status import StatusFolder


def main(url: str, writer: str, count: int, go: Path) -> None:
    folder = StatusFolder(url)
    deadline = time.monotonic() + 120
    while not go.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"{go} did not appear")
        time.sleep(0.01)
    attempts = 0
    for n in range(count):
        entry = audit.AuditEntry.now(
            by=f"writer {writer}", action="stop", dry_run=True, reason=str(n), outcome="done: would stop"
        )
        audit.append_audit(folder, entry)
        attempts += audit._append_line.statistics["attempt_number"]
    print(f"ATTEMPTS {attempts}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]))
