"""Azure storage on Azurite: archive throughput against the SDK's own copies, and inspector latency.

    .venv/bin/python bench/azure_storage.py [--files 300] [--repeats 3] [--workers 8] [--batches 10000]

1. **Archive**: ``archive_processed_files`` moving ``--files`` landing files of a file-source
   checkpoint (conditional server-side copies, the source ETag recorded, ETag-conditional deletes)
   against the reference: the azure-storage-blob SDK copying the same number of files with
   ``start_copy_from_url`` on as many threads, then deleting the sources with the SDK's batch
   ``delete_blobs`` (no conditions, no checkpoint reading: the fastest move the SDK offers). Each
   repetition uses a fresh container per side; the sides alternate (interleaved), files/s per side,
   median and min-max, ratio of the medians printed.
2. **Inspector**: ``inspect_checkpoint`` on a ``--batches``-batch file-source checkpoint on Azurite
   (its ``.compact`` log lists every file): cold (nothing cached), warm (same ETags), against the
   reference of reading the whole ``.compact`` file once (what the inspector did before).

Both sides run in this process against the same Azurite, one at a time. Azurite comes from
``make test-tools``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "jobs"), str(REPO_ROOT / "plugins")]

from hubflow.checkpoints import spark_logs as checkpoint_logs  # noqa: E402
from hubflow.checkpoints.inspector import inspect_checkpoint  # noqa: E402
from hubflow.operations.archive import archive_processed_files  # noqa: E402
from hubflow.storage.azure import forget_accesses, url_to_fs, use_access  # noqa: E402
from tests.support.azurite import Azurite, start_azurite  # noqa: E402
from tests.support.file_source_checkpoint import write_file_source_checkpoint  # noqa: E402


def _landing(azurite: Azurite, files: int) -> tuple[str, list[str]]:
    """A fresh container with ``files`` landing files and the checkpoint that consumed them."""
    from azure.storage.blob import ContainerClient

    container = azurite.new_container("bench")
    client = ContainerClient.from_connection_string(azurite.connection_string, container)
    names = [f"landing/batch-{b:06d}-0.json" for b in range(files)]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda n: client.upload_blob(n, b'{"id": 1}\n' * 50), names))
    fs, root = url_to_fs(azurite.url(container, "checkpoint"))
    write_file_source_checkpoint(fs, root, files, azurite.url(container, "landing"))
    return container, names


def _hubflow_archive(azurite: Azurite, container: str, workers: int) -> int:
    result = archive_processed_files(
        azurite.url(container, "checkpoint"),
        azurite.url(container, "landing"),
        azurite.url(container, "archive"),
        max_workers=workers,
        log=lambda line: None,
    )
    return len(result.moved)


def _sdk_move(azurite: Azurite, container: str, names: list[str], workers: int) -> int:
    from azure.storage.blob import ContainerClient

    client = ContainerClient.from_connection_string(azurite.connection_string, container)

    def copy(name: str) -> None:
        source = client.get_blob_client(name).url
        status = client.get_blob_client(f"archive/{name[len('landing/') :]}").start_copy_from_url(source)
        if status["copy_status"] != "success":
            raise RuntimeError(f"copy of {name}: {status['copy_status']}")

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(copy, names))
    for start in range(0, len(names), 256):  # one batch request holds at most 256 operations
        client.delete_blobs(*names[start : start + 256])
    return len(names)


def _spread(values: list[float]) -> str:
    return f"median {statistics.median(values):8.1f}  (min {min(values):.1f}, max {max(values):.1f})"


def bench_archive(azurite: Azurite, files: int, repeats: int, workers: int) -> None:
    rates: dict[str, list[float]] = {"hubflow archive": [], "SDK copy + batch delete": []}
    for repeat in range(repeats):
        order = list(rates) if repeat % 2 == 0 else list(reversed(rates))
        for side in order:
            container, names = _landing(azurite, files)
            started = time.perf_counter()
            if side == "hubflow archive":
                moved = _hubflow_archive(azurite, container, workers)
            else:
                moved = _sdk_move(azurite, container, names, workers)
            elapsed = time.perf_counter() - started
            if moved != files:
                raise RuntimeError(f"{side} moved {moved} of {files} files")
            rates[side].append(files / elapsed)
    print(f"archive, {files} files, {workers} threads, {repeats} repetitions (files/s):")
    for side, values in rates.items():
        print(f"  {side:26s} {_spread(values)}")
    ratio = statistics.median(rates["hubflow archive"]) / statistics.median(rates["SDK copy + batch delete"])
    print(f"  ratio hubflow / SDK: {ratio:.2f}")


def bench_inspector(azurite: Azurite, batches: int, repeats: int) -> None:
    container = azurite.new_container("insp")
    url = azurite.url(container, "checkpoint")
    fs, root = url_to_fs(url)
    write_file_source_checkpoint(fs, root, batches, azurite.url(container, "landing"))
    compact = f"{root}/sources/0/{(batches // 10) * 10 - 1}.compact"  # the newest compact file
    timings: dict[str, list[float]] = {
        "inspector, cold": [],
        "inspector, warm": [],
        "read whole .compact": [],
    }
    for _ in range(repeats):
        checkpoint_logs._count_cache.clear()
        for side in ("inspector, cold", "inspector, warm", "read whole .compact"):
            started = time.perf_counter()
            if side == "read whole .compact":
                sum(1 for _ in fs.cat_file(compact).splitlines())
            else:
                inspect_checkpoint(url, stalled_after=timedelta(hours=1), fs=fs)
            timings[side].append(1000 * (time.perf_counter() - started))
    size = fs.size(compact)
    print(f"inspector, {batches}-batch file-source checkpoint (.compact {size / 1e6:.1f} MB), ms:")
    for side, values in timings.items():
        print(f"  {side:26s} {_spread(values)}")
    cold, whole = (statistics.median(timings[k]) for k in ("inspector, cold", "read whole .compact"))
    print(f"  ratio cold inspection / whole-file read: {cold / whole:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--batches", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as location:
        azurite = start_azurite(Path(location))
        try:
            forget_accesses()
            use_access(azurite.access())
            bench_archive(azurite, args.files, args.repeats, args.workers)
            bench_inspector(azurite, args.batches, max(args.repeats, 5))
        finally:
            azurite.stop()


if __name__ == "__main__":
    main()
