"""The backlog of Spark's own file and Delta sources, measured on the driver after each batch.

The Event Hubs source reports its backlog itself (``pyspark_eventhubs.backlog``). Spark's file
source and delta-spark's source report none, so the jobs runtime's listener asks
:class:`SourceBacklogs` for each progress, with the same names (:class:`BacklogMetric`):

* **files** (``FileStreamSource[<landing folder>]``): ``filesBehindLatest``, the files in the landing
  folder the query has not taken (its file source log in the checkpoint, ``sources/<n>/``, up to
  the batch's ``logOffset``: read once, then only the new log files; files archived away are
  forgotten), and ``secondsBehindLatest``,
  the age of the oldest of them (now minus its modification time); 0 when none is left. Hidden
  names (``.``, ``_``) are not counted, as Spark does not read them.
* **Delta** (``DeltaSource[<table>]``): ``versionsBehindLatest``, the table's commits after the
  batch's end offset (``reservoirVersion``; a version the offset is inside counts as read), and
  ``secondsBehindLatest``, the age of the oldest of them (now minus its commit timestamp; of the
  oldest of the newest :data:`MAX_COMMITS_READ` when more are behind, so at least that old).

No Airflow, no Spark: the table is read with delta-rs (``hubflow.checkpoints.delta_log``), files
through fsspec (``hubflow.storage.azure.url_to_fs``).
"""

from __future__ import annotations

import json
import logging
import re
import threading
from datetime import UTC, datetime
from typing import Any

from pyspark_eventhubs.backlog import SOURCE_BACKLOG, BacklogMetric

log = logging.getLogger(__name__)

#: ``<kind>[<path>]``: the description Spark gives its file source and delta-spark its source.
_DESCRIPTION = re.compile(r"^(FileStreamSource|DeltaSource)\[(.*)\]$", re.S)
#: Commits read from a Delta table's history to date its oldest unread one.
MAX_COMMITS_READ = 1000


class FilesBacklog:
    """One file source of a query: the files it took so far (read from its log incrementally)."""

    def __init__(self, landing_url: str, log_dir_url: str) -> None:
        from hubflow.operations.archive import LandingRoot
        from hubflow.storage.azure import url_to_fs

        fs, root = url_to_fs(landing_url)
        self.landing = LandingRoot(landing_url, fs, root)
        self.log_fs, self.log_dir = url_to_fs(log_dir_url)
        self.taken: set[str] = set()
        self.read_up_to: int | None = None

    def _take_log(self, log_offset: int) -> None:
        """Add the files of log offsets up to ``log_offset`` to :attr:`taken`."""
        from hubflow.checkpoints.spark_logs import committed_file_entries, iter_file_log, join, list_file_log

        if self.read_up_to is None:
            entries: Any = committed_file_entries(self.log_fs, self.log_dir, log_offset)
        else:
            files = list_file_log(self.log_fs, self.log_dir)
            entries = (
                entry
                for offset in range(self.read_up_to + 1, log_offset + 1)
                if offset in files
                for entry in iter_file_log(self.log_fs, join(self.log_dir, files[offset]))
            )
        for entry in entries:
            relative, _ = self.landing.relative(entry.path)
            if relative is not None:
                self.taken.add(relative)
        self.read_up_to = max(log_offset, self.read_up_to or 0)

    def measure(self, log_offset: int, now: datetime) -> dict[str, Any]:
        """``{filesBehindLatest, secondsBehindLatest}`` after the batch that ends at ``log_offset``."""
        from hubflow.checkpoints.spark_logs import info_time

        if self.read_up_to is None or log_offset > self.read_up_to:
            self._take_log(log_offset)
        prefix = self.landing.root.rstrip("/") + "/"
        try:
            found = self.landing.fs.find(self.landing.root, detail=True)
        except FileNotFoundError:
            found = {}
        unread = []
        listed = set()
        for path, info in found.items():
            relative = path[len(prefix) :] if path.startswith(prefix) else None
            if relative is None or info.get("type") == "directory":
                continue
            listed.add(relative)
            if relative in self.taken or any(part.startswith((".", "_")) for part in relative.split("/")):
                continue
            unread.append(info_time(info))
        # Taken files that left the landing folder (archived) are not listed again: forget them.
        self.taken &= listed
        times = [t for t in unread if t is not None]
        seconds = max(0.0, (now - min(times)).total_seconds()) if times else 0.0
        return {BacklogMetric.FILES.value: len(unread), BacklogMetric.SECONDS.value: seconds}


def delta_backlog(table: str, end_offset: Any, now: datetime) -> dict[str, Any] | None:
    """``{versionsBehindLatest, secondsBehindLatest}`` of a Delta source whose batch ended at
    ``end_offset`` (delta-spark's offset JSON); None when the offset or the table says nothing."""
    from hubflow.checkpoints.delta_log import oldest_commit_since

    if not isinstance(end_offset, dict) or not isinstance(end_offset.get("reservoirVersion"), int):
        return None
    version, index = end_offset["reservoirVersion"], end_offset.get("index", -1)
    first_unread = version if index == -1 else version + 1
    found = oldest_commit_since(table, first_unread, MAX_COMMITS_READ)
    if found is None:
        return None
    newest, oldest_ms = found
    behind = max(0, newest - first_unread + 1)
    seconds = max(0.0, now.timestamp() - oldest_ms / 1000) if behind and oldest_ms is not None else 0.0
    return {BacklogMetric.VERSIONS.value: behind, BacklogMetric.SECONDS.value: seconds}


class SourceBacklogs:
    """Adds the backlog of the file and Delta sources to progress summaries of one query.

    ``checkpoint``: the query's checkpoint location (a file source's log is ``sources/<n>/`` there,
    ``n`` its place among the progress's sources). Never raises: a backlog that cannot be measured
    is logged and left out.
    """

    def __init__(self, checkpoint: str | None) -> None:
        self.checkpoint = checkpoint
        self._files: dict[int, FilesBacklog] = {}
        self._lock = threading.Lock()

    def add_to(self, summary: dict[str, Any], now: datetime | None = None) -> None:
        """Set ``backlog`` on each file or Delta source of ``summary`` (``last_progress``'s shape)."""
        now = now or datetime.now(UTC)
        with self._lock:
            for index, source in enumerate(summary.get("sources") or []):
                if source.get(SOURCE_BACKLOG) is not None:
                    continue
                match = _DESCRIPTION.match(str(source.get("description") or ""))
                if match is None:
                    continue
                try:
                    backlog = self._measure(index, match.group(1), match.group(2), source, now)
                except Exception as exc:  # a report: the job goes on without it
                    log.warning("backlog of %s not measured: %s", source.get("description"), exc)
                    continue
                if backlog is not None:
                    source[SOURCE_BACKLOG] = backlog

    def _measure(
        self, index: int, kind: str, path: str, source: dict[str, Any], now: datetime
    ) -> dict[str, Any] | None:
        end = source.get("end_offset")
        if isinstance(end, str):
            end = json.loads(end)
        if kind == "DeltaSource":
            return delta_backlog(path, end, now)
        if self.checkpoint is None or not isinstance(end, dict) or not isinstance(end.get("logOffset"), int):
            return None
        files = self._files.get(index)
        if files is None:
            log_dir = f"{self.checkpoint.rstrip('/')}/sources/{index}"
            files = self._files[index] = FilesBacklog(path, log_dir)
        return files.measure(end["logOffset"], now)
