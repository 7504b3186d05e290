"""Keep the very files of the hashed locks (wheels, sdists where there is no wheel) in a local folder.

The image build installs requirements.lock with ``uv pip sync --require-hashes --find-links
<wheelhouse URL>`` when ``scripts/stack.sh`` serves such a folder, so a rebuild downloads nothing
it downloaded before. Every file must match one of its pin's ``--hash=sha256:`` values in the lock:
uv refuses any other. That is why the files are the ones the package index serves, downloaded here
once and kept (a wheel re-zipped from uv's cache, which keeps wheels unpacked, has other bytes and
another hash). pyspark publishes only an sdist: its sdist is kept and the build makes the wheel.

For each pin the best wheel for this machine's tags is chosen (the image is Debian 12's Python 3.11
on the same architecture as the host), else the sdist. Files already in the folder whose hash
matches are kept; files no lock names any more are deleted. A pin that cannot be fetched is left
out: the image build fetches it from the index itself, checked against the same hashes.

    python scripts/wheelhouse.py --lock requirements.lock --lock requirements-uv.lock \\
        --out .hubflow/stack/wheelhouse
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import ssl
import sys
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from packaging.tags import Tag, sys_tags
from packaging.utils import canonicalize_name, parse_wheel_filename

DEFAULT_INDEX = "https://pypi.org/simple"
SDIST_SUFFIXES = (".tar.gz", ".zip")


@dataclass(frozen=True)
class Pin:
    name: str  # canonical
    version: str
    hashes: frozenset[str]  # sha256 hex digests


def locked_pins(lock: Path) -> dict[str, Pin]:
    """``{canonical name: Pin}`` of every ``name==version --hash=sha256:...`` requirement of a lock."""
    text = lock.read_text(encoding="utf-8").replace("\\\n", " ")
    pins = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" not in line or line.startswith("-"):
            continue
        requirement, _, options = line.partition(" ")
        name, version = requirement.split("==", 1)
        name = canonicalize_name(name.split("[", 1)[0])
        hashes = frozenset(re.findall(r"--hash=sha256:([0-9a-f]{64})", options))
        pins[name] = Pin(name, version.split(";", 1)[0].strip(), hashes)
    return pins


def sha256_of(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def choose(files: list[dict], pin: Pin, supported: list[Tag]) -> dict | None:
    """The file of ``pin`` to keep among an index's ``files`` (PEP 691 entries): the wheel whose tags
    rank best on this machine, else the sdist; only files whose sha256 the lock lists."""
    rank = {tag: i for i, tag in enumerate(supported)}
    best, best_rank, sdist = None, len(rank), None
    for entry in files:
        filename = entry.get("filename", "")
        if entry.get("hashes", {}).get("sha256") not in pin.hashes or entry.get("yanked") is True:
            continue
        if filename.endswith(".whl"):
            try:
                name, version, _, tags = parse_wheel_filename(filename)
            except ValueError:
                continue
            if name != pin.name or str(version) != pin.version:
                continue
            score = min((rank[tag] for tag in tags if tag in rank), default=None)
            if score is not None and score < best_rank:
                best, best_rank = entry, score
        elif filename.endswith(SDIST_SUFFIXES):
            sdist = sdist or entry
    return best or sdist


class Index:
    """A PEP 691 (JSON) simple index, read with the host's trust store (``SSL_CERT_FILE`` if set)."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        cafile = os.environ.get("SSL_CERT_FILE") or os.environ.get("PIP_CERT") or None
        self.context = ssl.create_default_context(cafile=cafile)

    def files(self, name: str) -> list[dict]:
        request = urllib.request.Request(
            f"{self.url}/{name}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
        )
        with urllib.request.urlopen(request, timeout=60, context=self.context) as response:
            page = json.load(response)
        base = response.url
        for entry in page.get("files", []):
            entry["url"] = urllib.parse.urljoin(base, entry["url"])
        return page.get("files", [])

    def download(self, url: str, target: Path) -> None:
        with urllib.request.urlopen(url, timeout=600, context=self.context) as response:
            with open(target, "wb") as handle:
                while block := response.read(1 << 20):
                    handle.write(block)


def fetch(index: Index, pin: Pin, out: Path, supported: list[Tag]) -> str | None:
    """Download the file of ``pin`` into ``out``, hash-checked; its name, or None with a reason printed."""
    try:
        entry = choose(index.files(pin.name), pin, supported)
        if entry is None:
            print(f"wheelhouse: no file of {pin.name}=={pin.version} has a hash of the lock", file=sys.stderr)
            return None
        target = out / entry["filename"]
        partial = target.with_name(target.name + ".partial")
        index.download(entry["url"], partial)
        if sha256_of(partial) not in pin.hashes:
            partial.unlink()
            print(f"wheelhouse: {entry['filename']} has no hash of the lock; left out", file=sys.stderr)
            return None
        partial.rename(target)
        return target.name
    except OSError as exc:
        print(f"wheelhouse: cannot fetch {pin.name}=={pin.version}: {exc}", file=sys.stderr)
        return None


def build_wheelhouse(
    locks: list[Path], out: Path, index: Index, workers: int = 6
) -> tuple[list[str], list[str], list[str]]:
    """Make ``out`` hold one hash-checked file per pin of ``locks``; (kept, downloaded, missing) names."""
    out.mkdir(parents=True, exist_ok=True)
    pins: dict[str, Pin] = {}
    for lock in locks:
        pins.update(locked_pins(lock))
    wanted_hashes = {digest: pin for pin in pins.values() for digest in pin.hashes}
    kept: dict[str, str] = {}  # pin name -> file name
    for path in sorted(out.iterdir()):
        if not path.is_file():
            continue
        pin = wanted_hashes.get(sha256_of(path)) if not path.name.endswith(".partial") else None
        if pin is None or pin.name in kept:
            path.unlink()  # stale (no lock names it), a leftover download, or a second file of a pin
        else:
            kept[pin.name] = path.name
    supported = list(sys_tags())
    todo = [pin for name, pin in sorted(pins.items()) if name not in kept and pin.hashes]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(lambda pin: fetch(index, pin, out, supported), todo))
    downloaded = [pin.name for pin, name in zip(todo, results, strict=True) if name]
    missing = [pin.name for pin, name in zip(todo, results, strict=True) if not name]
    missing += [name for name, pin in sorted(pins.items()) if not pin.hashes]
    return sorted(kept), downloaded, missing


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lock", type=Path, action="append", required=True, help="a hashed lock (repeat it)")
    parser.add_argument("--out", type=Path, required=True, help="the wheelhouse folder")
    parser.add_argument(
        "--index-url",
        default=os.environ.get("UV_DEFAULT_INDEX") or os.environ.get("PIP_INDEX_URL") or DEFAULT_INDEX,
        help=f"a PEP 691 simple index (default {DEFAULT_INDEX})",
    )
    args = parser.parse_args(argv)
    kept, downloaded, missing = build_wheelhouse(args.lock, args.out, Index(args.index_url))
    total = len(kept) + len(downloaded) + len(missing)
    message = f"wheelhouse {args.out}: {len(kept) + len(downloaded)} of {total} locked packages"
    message += f" ({len(downloaded)} downloaded now)"
    if missing:
        message += f"; the image build downloads the others ({', '.join(missing[:8])}"
        message += ", ...)" if len(missing) > 8 else ")"
    print(message, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
