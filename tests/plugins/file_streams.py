"""Real Spark file-source queries that write the checkpoints the inspector and archive tests use.

A :class:`FileStream` is a small file-source query: JSON files land in ``landing/``, each
:meth:`FileStream.run` is one ``availableNow`` run of Spark reading them into parquet ``output/`` with
its checkpoint in ``checkpoint/``. One run over new files is one committed batch.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

# A folder and file names that Spark must URI-encode in its file source log.
DEFAULT_FOLDER = "région=eu/2026/11/22"


class FileStream:
    """A JSON landing folder read by a Spark file stream into parquet, one availableNow run at a time."""

    def __init__(self, spark: Any, base: Path) -> None:
        self.spark = spark
        self.base = base
        self.landing = base / "landing"
        self.checkpoint = base / "checkpoint"
        self.output = base / "output"
        self.archive = base / "archive"
        self.landing.mkdir(parents=True)
        self._next_id = 0
        self.batches: list[list[Path]] = []
        self.query_id: str | None = None

    def land(
        self, files: int, *, rows: int = 3, folder: str = DEFAULT_FOLDER, root: Path | None = None
    ) -> list[Path]:
        """Write ``files`` JSON files of ``rows`` events each, every event with a unique ``id``."""
        target = (root or self.landing) / folder
        target.mkdir(parents=True, exist_ok=True)
        written = []
        for _ in range(files):
            first = self._next_id
            path = target / f"events {first:05d}.json"
            lines = [json.dumps({"id": first + k, "body": f"event {first + k}"}) for k in range(rows)]
            path.write_text("\n".join(lines) + "\n", encoding="utf-8")
            self._next_id += rows
            written.append(path)
        return written

    def run(self, *, source: Path | None = None) -> str:
        """One availableNow run over everything new in ``source`` (default: the landing folder)."""
        query = (
            self.spark.readStream.format("json")
            .schema("id long, body string")
            .option("recursiveFileLookup", "true")
            .load(str(source or self.landing))
            .writeStream.format("parquet")
            .option("path", str(self.output))
            .option("checkpointLocation", str(self.checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        self.query_id = str(query.id)
        return self.query_id

    def land_and_run(self, batches: int, files_per_batch: int) -> list[list[Path]]:
        """``batches`` runs, each over ``files_per_batch`` new files; returns the files of each batch."""
        for _ in range(batches):
            self.batches.append(self.land(files_per_batch))
            self.run()
        return self.batches

    def output_ids(self) -> list[int]:
        """Every event id in the parquet output (read through the sink's log: committed files only)."""
        return sorted(row.id for row in self.spark.read.parquet(str(self.output)).select("id").collect())

    def uncommit_last_batch(self) -> int:
        """Delete the newest commit file, as if the run died after planning its last batch."""
        commits = sorted(int(p.name) for p in (self.checkpoint / "commits").iterdir() if p.name.isdigit())
        last = commits[-1]
        (self.checkpoint / "commits" / str(last)).unlink()
        (self.checkpoint / "commits" / f".{last}.crc").unlink(missing_ok=True)
        return last


def age_files(folder: Path, seconds: float) -> None:
    """Set the modification time of every file below ``folder`` to ``seconds`` ago."""
    stamp = time.time() - seconds
    for path in folder.rglob("*"):
        if path.is_file():
            os.utime(path, (stamp, stamp))


def relative_files(root: Path) -> list[str]:
    """Sorted paths of the files below ``root``, relative to it."""
    if not root.exists():
        return []
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
