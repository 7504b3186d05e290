"""Collect the wheels of requirements.lock that uv's cache on this machine already holds.

The image build installs the lock with ``uv pip sync --find-links <wheelhouse URL>`` when
``scripts/stack.sh`` serves such a folder, so the build neither downloads again what ``make venv``
downloaded nor rebuilds pyspark's wheel from its 450 MB sdist. The wheelhouse only spares
downloads; the lock decides every version, and a package missing here is fetched from the index as
on any other machine.

uv keeps the wheels it downloaded unpacked (``archive-v0/<id>``, reached through
``wheels-v*/<index>/<name>/<version>-<tags>`` links) and the wheels it built from sdists as files
(``sdists-v*/<index>/<name>/<version>/<id>/*.whl``). A built wheel is linked as it is; an unpacked
one is zipped again exactly as it came (stored, not recompressed: fast), after every file was
checked against the wheel's own RECORD. A package whose files do not match RECORD is left out.
This is written here because uv has no command that exports wheels from its cache
(astral-sh/uv#1681).

    python scripts/wheelhouse.py --lock requirements.lock --out .hubflow/stack/wheelhouse
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import io
import os
import shutil
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

from packaging.tags import sys_tags
from packaging.utils import canonicalize_name, parse_wheel_filename


def locked_pins(lock: Path) -> dict[str, str]:
    """``{canonical name: version}`` of every ``name==version`` line of a pip-compile lock."""
    pins = {}
    for line in lock.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line and not line.startswith("-"):
            name, version = line.split("==", 1)
            pins[canonicalize_name(name.split("[", 1)[0])] = version.split(";", 1)[0].strip()
    return pins


def uv_cache_dir() -> Path:
    """uv's cache folder: ``UV_CACHE_DIR``, else ``$XDG_CACHE_HOME/uv``, else ``~/.cache/uv``."""
    if os.environ.get("UV_CACHE_DIR"):
        return Path(os.environ["UV_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "uv"


def candidates(cache: Path, name: str, version: str) -> Iterator[tuple[str, Path]]:
    """``(wheel file name, path)`` of cached wheels of ``name==version``: files first, then unpacked."""
    for built in sorted(cache.glob(f"sdists-v*/*/{name}/{version}/*/*.whl")):
        yield built.name, built
    for link in sorted(cache.glob(f"wheels-v*/*/{name}/{version}-*")):
        if link.is_dir() and not link.name.endswith((".http", ".msgpack", ".lock", ".rev")):
            dist_infos = list(link.resolve().glob("*.dist-info"))
            if len(dist_infos) == 1:
                distribution = dist_infos[0].name[: -len(f"-{version}.dist-info")]
                tags = wheel_tags(dist_infos[0] / "WHEEL")
                if tags:
                    yield f"{distribution}-{version}-{tags}.whl", link.resolve()


def wheel_tags(wheel_file: Path) -> str | None:
    """The compressed tag set (``cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64``) of a WHEEL file."""
    tags = [
        line.split(":", 1)[1].strip().split("-")
        for line in wheel_file.read_text(encoding="utf-8").splitlines()
        if line.startswith("Tag:")
    ]
    if not tags or any(len(tag) != 3 for tag in tags):
        return None
    parts = [sorted({tag[i] for tag in tags}) for i in range(3)]
    if len(tags) != len(parts[0]) * len(parts[1]) * len(parts[2]):
        return None  # not a product of its parts: no single file name says it
    return "-".join(".".join(part) for part in parts)


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def zip_unpacked_wheel(folder: Path, target: Path) -> bool:
    """Zip the unpacked wheel ``folder`` into ``target`` if every file matches its RECORD."""
    (dist_info,) = folder.glob("*.dist-info")
    with open(dist_info / "RECORD", newline="", encoding="utf-8") as handle:
        record = {row[0]: row[1] for row in csv.reader(handle) if row}
    files = sorted(p for p in folder.rglob("*") if p.is_file() or p.is_symlink())
    names = {p.relative_to(folder).as_posix() for p in files}
    if names != set(record):
        return False
    partial = target.with_suffix(".partial")
    # The .dist-info folder goes last, as the wheel spec recommends.
    ordered = sorted(files, key=lambda p: (p.is_relative_to(dist_info), p.as_posix()))
    with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_STORED) as wheel:
        for path in ordered:
            name = path.relative_to(folder).as_posix()
            data = path.read_bytes()
            if record[name] and record[name] != _record_hash(data):
                wheel.close()
                partial.unlink()
                return False
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if os.access(path, os.X_OK) else 0o644) << 16
            wheel.writestr(info, data)
    partial.rename(target)
    return True


def link_or_copy(source: Path, target: Path) -> None:
    """Hard-link ``source`` to ``target`` (same file system), else copy it."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def build_wheelhouse(lock: Path, out: Path, cache: Path) -> tuple[list[str], list[str]]:
    """Fill ``out`` with a wheel for every pin found; return (found, missing) package names."""
    out.mkdir(parents=True, exist_ok=True)
    supported = set(sys_tags())
    found, missing = [], []
    wanted = set()
    for name, version in sorted(locked_pins(lock).items()):
        for filename, path in candidates(cache, name, version):
            try:
                _, _, _, tags = parse_wheel_filename(filename)
            except ValueError:
                continue
            if not tags & supported:
                continue
            target = out / filename
            if not target.exists():
                if path.is_file():
                    link_or_copy(path, target)
                elif not zip_unpacked_wheel(path, target):
                    continue
            found.append(name)
            wanted.add(filename)
            break
        else:
            missing.append(name)
    for stale in out.glob("*.whl"):
        if stale.name not in wanted:
            stale.unlink()
    return found, missing


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lock", type=Path, required=True, help="requirements.lock")
    parser.add_argument("--out", type=Path, required=True, help="the wheelhouse folder")
    parser.add_argument("--cache", type=Path, default=None, help="uv's cache (default: uv's own rule)")
    args = parser.parse_args(argv)
    cache = args.cache or uv_cache_dir()
    found, missing = build_wheelhouse(args.lock, args.out, cache)
    out = io.StringIO()
    total = len(found) + len(missing)
    out.write(f"wheelhouse {args.out}: {len(found)} of {total} locked packages from {cache}")
    if missing:
        out.write(f"; the image build downloads the others ({', '.join(missing[:8])}")
        out.write(", ...)" if len(missing) > 8 else ")")
    print(out.getvalue(), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
