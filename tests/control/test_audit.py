"""The audit trail (``hubflow.operations.audit``) on a real local status folder: entries round-trip,
appends from several processes at once all land, the file keeps only the newest entries, and a
secret in a reason is masked before it is stored."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from hubflow.operations.audit import AuditEntry, append_audit, outcome, read_audit
from hubflow.status import StatusFolder
from hubflow.status.names import AUDIT_FILE, AUDIT_KEPT

#: The child that appends entries (and says how many conditional writes that took).
APPENDER = Path(__file__).with_name("audit_appender.py")


def concurrent_appends(url: str, go: Path, writers: int, count: int, env: dict | None = None) -> int:
    """Run ``writers`` appender processes on the folder at ``url``, all released at once by ``go``;
    return the conditional writes they made in all."""
    children = [
        subprocess.Popen(
            [sys.executable, str(APPENDER), url, str(writer), str(count), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for writer in range(writers)
    ]
    time.sleep(1)  # every child imported and waiting
    go.touch()
    attempts = 0
    for child in children:
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0, err
        attempts += int(out.split()[-1])
    return attempts


def assert_every_entry_landed(folder: StatusFolder, writers: int, count: int) -> None:
    entries = read_audit(folder)
    assert len(entries) == writers * count
    for writer in range(writers):
        mine = [int(e.reason or -1) for e in entries if e.by == f"writer {writer}"]
        assert mine == list(range(count)), f"writer {writer}'s entries, in its order"


def _entry(n: int = 0, **fields: object) -> AuditEntry:
    values: dict = {
        "by": "alice (run manual__1)",
        "action": "stop",
        "dry_run": False,
        "reason": f"sink full {n}",
        "outcome": outcome("done", "held job clicks"),
        "hold_before": None,
        "hold_after": "by alice (run manual__1) at 2026-11-28T02:00:00.000+00:00: sink full",
    }
    values.update(fields)
    return AuditEntry.now(**values)


def test_an_appended_entry_reads_back_whole_as_one_json_line(tmp_path: Path) -> None:
    folder = StatusFolder(str(tmp_path / "clicks"))
    assert read_audit(folder) == [], "no audit file yet"
    first, second = _entry(1), _entry(2, action="start", dry_run=True, source="cli", hold_after=None)
    assert append_audit(folder, first) == first
    append_audit(folder, second)

    assert read_audit(folder) == [first, second], "oldest first"
    assert read_audit(folder, limit=1) == [second]
    lines = (tmp_path / "clicks" / AUDIT_FILE).read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["reason"] for line in lines] == ["sink full 1", "sink full 2"]
    assert json.loads(lines[1]) == {
        "at": second.at,
        "by": "alice (run manual__1)",
        "action": "start",
        "dry_run": True,
        "reason": "sink full 2",
        "outcome": "done: held job clicks",
        "hold_before": None,
        "hold_after": None,
        "source": "cli",
        "version": None,
    }
    assert second.line() == (
        f"{second.at} alice (run manual__1): start (dry run) because sink full 2 -> done: held job "
        "clicks [cli]"
    )
    assert first.line().endswith(
        "-> done: held job clicks; hold none -> by alice (run manual__1) at "
        "2026-11-28T02:00:00.000+00:00: sink full"
    )


def test_appends_from_four_processes_at_once_lose_no_entry(tmp_path: Path) -> None:
    url = str(tmp_path / "clicks")
    attempts = concurrent_appends(url, tmp_path / "go", writers=4, count=25)
    assert_every_entry_landed(StatusFolder(url), writers=4, count=25)
    assert attempts >= 100, "one conditional write per entry at least"


class _AnotherWriterBetween:
    """The real store, where another appender writes right after this appender's first read."""

    def __init__(self, store: Any, other: Any) -> None:
        self._store, self._other, self.reads = store, other, 0

    def read(self, name: str) -> Any:
        document = self._store.read(name)
        self.reads += 1
        if self.reads == 1:
            self._other()
        return document

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


@pytest.mark.parametrize("existing", [False, True], ids=["first-entry", "later-entry"])
def test_an_append_that_loses_the_race_reads_again_and_keeps_both(tmp_path: Path, existing: bool) -> None:
    folder = StatusFolder(str(tmp_path / "clicks"))
    if existing:
        append_audit(folder, _entry(0))
    racing = _AnotherWriterBetween(folder.store, lambda: append_audit(folder, _entry(1)))
    append_audit(SimpleNamespace(store=racing), _entry(2))
    assert racing.reads == 2, "the conditional write failed once and the append read again"
    expected = [f"sink full {n}" for n in ([0] if existing else []) + [1, 2]]
    assert [e.reason for e in read_audit(folder)] == expected


def test_the_file_keeps_only_the_newest_entries(tmp_path: Path) -> None:
    folder = StatusFolder(str(tmp_path / "clicks"))
    for n in range(7):
        append_audit(folder, _entry(n), kept=5)
    assert [e.reason for e in read_audit(folder)] == [f"sink full {n}" for n in range(2, 7)]
    assert len((tmp_path / "clicks" / AUDIT_FILE).read_text(encoding="utf-8").splitlines()) == 5
    assert AUDIT_KEPT >= 100, "the default keeps a useful history"


def test_a_secret_in_a_reason_or_outcome_is_masked_before_it_is_stored(tmp_path: Path) -> None:
    folder = StatusFolder(str(tmp_path / "clicks"))
    secret = "c2VjcmV0LWtleS12YWx1ZQ=="
    stored = append_audit(
        folder,
        _entry(
            reason=f"rotating Endpoint=sb://ns/;SharedAccessKeyName=x;SharedAccessKey={secret}",
            outcome=outcome("failed", f"start failed: password={secret}"),
            hold_after=f"by bob: client_secret={secret}",
        ),
    )
    assert stored.reason == "rotating Endpoint=sb://ns/;SharedAccessKeyName=x;SharedAccessKey=***"
    assert stored.outcome == "failed: start failed: password=***"
    raw = (tmp_path / "clicks" / AUDIT_FILE).read_text(encoding="utf-8")
    assert secret not in raw and "SharedAccessKey=***" in raw and "client_secret=***" in raw


def test_a_broken_line_is_skipped_and_long_texts_are_cut(tmp_path: Path) -> None:
    folder = StatusFolder(str(tmp_path / "clicks"))
    append_audit(folder, _entry(1))
    with open(tmp_path / "clicks" / AUDIT_FILE, "a", encoding="utf-8") as handle:
        handle.write("{not json\n")
    stored = append_audit(folder, _entry(2, outcome="done: " + "x" * 5000))
    assert len(stored.outcome) == 1000 and stored.outcome.endswith("…")
    assert [e.reason for e in read_audit(folder)] == ["sink full 1", "sink full 2"]
