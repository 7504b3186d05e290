"""The inspector on a long-running file-source checkpoint on the real Blob API (Azurite): the
``.compact`` source log (every file the query ever took) is read from its end only, and not at all
while its ETag is unchanged."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from hubflow.checkpoints.inspector import Verdict, inspect_checkpoint
from hubflow.checkpoints.spark_logs import TAIL_CHUNK
from hubflow.storage.azure import url_to_fs
from tests.support.azurite import Azurite
from tests.support.file_source_checkpoint import file_log_text, write_file_source_checkpoint

pytestmark = pytest.mark.integration

BATCHES = 10_000


class ReadCounter:
    """Counts the bytes the filesystem returns per file (cat_file) and the files it opens."""

    def __init__(self, fs: Any) -> None:
        self.bytes: dict[str, int] = {}
        self.opened: list[str] = []
        cat_file, open_ = fs.cat_file, fs.open

        def counting_cat_file(path: str, *args: Any, **kwargs: Any) -> bytes:
            data = cat_file(path, *args, **kwargs)
            self.bytes[path] = self.bytes.get(path, 0) + len(data)
            return data

        def counting_open(path: str, *args: Any, **kwargs: Any) -> Any:
            self.opened.append(path)
            return open_(path, *args, **kwargs)

        fs.cat_file, fs.open = counting_cat_file, counting_open

    def read_of(self, suffix: str) -> int:
        return sum(n for p, n in self.bytes.items() if p.endswith(suffix)) + sum(
            10**9 for p in self.opened if p.endswith(suffix)
        )


def test_a_10000_batch_compact_log_on_blob_is_read_from_its_end_and_cached_by_etag(
    azurite: Azurite, blob_access: Any
) -> None:
    url = azurite.url(azurite.new_container("insp"), "checkpoints/orders")
    fs, root = url_to_fs(url)
    write_file_source_checkpoint(fs, root, BATCHES, azurite.url("landing"), files_per_batch=3)
    compact = f"sources/0/{BATCHES - 1}.compact"
    size = fs.size(f"{root}/{compact}")
    assert size > 40 * TAIL_CHUNK, "the compact log lists 30,000 files"
    counter = ReadCounter(fs)

    def inspect() -> Any:
        return inspect_checkpoint(url, stalled_after=timedelta(minutes=30), fs=fs)

    report = inspect()
    assert report.verdict == Verdict.HEALTHY, report.reason
    assert report.latest_commit_batch_id == BATCHES - 1
    log = report.file_source_logs[0]
    assert (log.latest_log_offset, log.latest_file, log.files_in_latest_entry) == (
        BATCHES - 1,
        f"{BATCHES - 1}.compact",
        3,
    )
    first_read = counter.read_of(".compact")
    assert 0 < first_read <= 3 * TAIL_CHUNK, f"read {first_read} of {size} bytes"

    inspect()
    assert counter.read_of(".compact") == first_read, "unchanged ETag: the compact log is not read again"

    # The same name rewritten (a new ETag) with 5 files in the newest batch: read again, new answer.
    text = file_log_text(azurite.url("landing"), range(BATCHES - 1), 3)
    newest = file_log_text(azurite.url("landing"), range(BATCHES - 1, BATCHES), 5)
    fs.pipe_file(f"{root}/{compact}", (text + "\n" + newest.split("\n", 1)[1]).encode())
    assert inspect().file_source_logs[0].files_in_latest_entry == 5
    assert first_read < counter.read_of(".compact") <= 2 * first_read + TAIL_CHUNK
