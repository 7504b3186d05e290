"""images.lock: how every image hubflow builds FROM or docker-compose.yml runs is pinned, and its checks.

Each image reference (``name:tag`` as the files write it) is pinned in one or both of two ways:

- by the registry's digest (``sha256:...``): scripts/stack.sh pulls ``name:tag@digest``, and
  docker-compose.yml writes the images it never makes here with their digest;
- by its build inputs, for the equivalent made here from Debian's packages where no registry
  answers (the development machines reach none): the sha256 of its build folder's files, and of its
  base's inputs. scripts/stack.sh labels the image it makes with it (``org.hubflow.inputs``) and uses
  an image it finds only when that label, or one of its registry digests, is the recorded one.

Python's standard library only (scripts/stack.sh runs it with the host's python3).

    python3 scripts/images.py inputs NAME    the recorded inputs of NAME (a reference or a local
                                             tag); exit 1 when its build folder has changed since
    python3 scripts/images.py check NAME     exit 0 when the image NAME here is the recorded one
    python3 scripts/images.py digest NAME    the recorded digest of NAME, or nothing
    python3 scripts/images.py lock [--digests]
                                             record every local recipe's inputs from the files
                                             (make lock-images); --digests also records, where a
                                             registry answers, the digest of each reference pulled
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
LOCK = REPO_ROOT / "images.lock"
#: The label scripts/stack.sh gives the images it makes: their recorded inputs.
INPUTS_LABEL = "org.hubflow.inputs"
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_FROM = re.compile(r"^FROM\s+(\S+)", re.M)
NONE = "-"


@dataclass(frozen=True)
class Image:
    """One line of images.lock."""

    reference: str  # name:tag, as the Dockerfiles and docker-compose.yml write it
    digest: str  # the registry's digest, or "-"
    local_tag: str  # the tag of the equivalent made here, or "-"
    folder: str  # its build folder (repository-relative), or "-"
    inputs: str  # the sha256 of its build inputs, or "-"

    @property
    def made_here(self) -> bool:
        return self.folder != NONE


def read_lock(path: Path | None = None) -> list[Image]:
    """The lines of images.lock; a malformed one raises ValueError naming it."""
    path = path or LOCK
    images = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        if len(fields) != 5:
            raise ValueError(f"{path.name}:{number}: expected 5 columns, got {len(fields)}: {line!r}")
        image = Image(*fields)
        if image.digest != NONE and not _DIGEST.match(image.digest):
            raise ValueError(f"{path.name}:{number}: {image.digest!r} is not sha256:<64 hex digits>")
        made = {image.local_tag != NONE, image.folder != NONE, image.inputs != NONE}
        if len(made) != 1:
            raise ValueError(f"{path.name}:{number}: a local image needs its tag, folder and inputs")
        if image.inputs != NONE and not _DIGEST.match(image.inputs):
            raise ValueError(f"{path.name}:{number}: {image.inputs!r} is not sha256:<64 hex digits>")
        images.append(image)
    return images


def find(images: list[Image], name: str) -> Image:
    """The entry whose reference or local tag is ``name``."""
    for image in images:
        if name in (image.reference, image.local_tag):
            return image
    raise SystemExit(f"images.py: {name} is not in images.lock; add it (see the file's header)")


def compute_inputs(image: Image, images: list[Image]) -> str:
    """sha256 over the build folder's files (path and content) and the inputs of the image it is
    built FROM, when that one is made here too."""
    folder = REPO_ROOT / image.folder
    if not folder.is_dir():
        raise SystemExit(f"images.py: {image.reference}: build folder {image.folder} does not exist")
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(f"{path.relative_to(REPO_ROOT).as_posix()}\0".encode())
        digest.update(hashlib.sha256(path.read_bytes()).hexdigest().encode() + b"\n")
    dockerfile = folder / "Dockerfile"
    if dockerfile.is_file():
        for base in _FROM.findall(dockerfile.read_text(encoding="utf-8")):
            parent = find(images, base)
            if parent.made_here:
                digest.update(f"FROM {base} {compute_inputs(parent, images)}\n".encode())
    return f"sha256:{digest.hexdigest()}"


def recorded_inputs(name: str) -> str:
    """The recorded inputs of ``name``; exits 1 when its files no longer match them."""
    images = read_lock()
    image = find(images, name)
    if not image.made_here:
        raise SystemExit(f"images.py: {name} is not made here (images.lock records no build folder)")
    actual = compute_inputs(image, images)
    if actual != image.inputs:
        raise SystemExit(
            f"images.py: {image.folder} (the build inputs of {image.local_tag}) changed since images.lock "
            f"recorded them: review the change, then run `make lock-images` and commit images.lock"
        )
    return image.inputs


def inspect(name: str) -> dict | None:
    """``docker image inspect`` of ``name``, or None when there is no such image here."""
    result = subprocess.run(["docker", "image", "inspect", name], capture_output=True, text=True)
    if result.returncode != 0:
        return None
    return json.loads(result.stdout)[0]


def check(name: str) -> str | None:
    """Why the image ``name`` here is not the recorded one, or None when it is."""
    image = find(read_lock(), name)
    found = inspect(name)
    if found is None:
        return f"there is no image {name} here"
    if image.digest != NONE and any(d.endswith(f"@{image.digest}") for d in found.get("RepoDigests") or []):
        return None
    label = ((found.get("Config") or {}).get("Labels") or {}).get(INPUTS_LABEL)
    if image.made_here and label == recorded_inputs(name):
        return None
    wanted = " or ".join(
        part
        for part in (
            f"digest {image.digest}" if image.digest != NONE else "",
            f"{INPUTS_LABEL}={image.inputs}" if image.made_here else "",
        )
        if part
    )
    return f"{name} here ({found['Id'][:19]}, label {label or 'none'}) is not the recorded one ({wanted})"


def write_lock(images: list[Image], path: Path | None = None) -> None:
    """Rewrite the entries of images.lock, keeping its header comment."""
    path = path or LOCK
    header = [line for line in path.read_text(encoding="utf-8").splitlines() if line.startswith("#")]
    rows = [(i.reference, i.digest, i.local_tag, i.folder, i.inputs) for i in images]
    widths = [max(len(row[column]) for row in rows) for column in range(5)]
    lines = [
        "  ".join(value.ljust(width) for value, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    path.write_text("\n".join([*header, *lines]) + "\n", encoding="utf-8")


def pulled_digest(reference: str) -> str | None:
    """The registry digest of ``reference`` after pulling it, or None when no registry answers."""
    if subprocess.run(["docker", "pull", "-q", reference], capture_output=True).returncode != 0:
        return None
    found = inspect(reference) or {}
    digests = [d.split("@", 1)[1] for d in found.get("RepoDigests") or [] if "@" in d]
    return digests[0] if digests else None


def lock(with_digests: bool) -> list[str]:
    """Record every local recipe's inputs (and digests, ``with_digests``); return what changed."""
    images = read_lock()
    updated, changes = [], []
    for image in images:
        new = image
        if image.made_here:
            new = replace(new, inputs=compute_inputs(image, images))
        if with_digests:
            digest = pulled_digest(image.reference)
            if digest is None:
                print(f"images.py: cannot pull {image.reference}; its digest is kept", file=sys.stderr)
            else:
                new = replace(new, digest=digest)
        if new != image:
            changes.append(image.reference)
        updated.append(new)
    write_lock(updated)
    return changes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for command in ("inputs", "check", "digest"):
        commands.add_parser(command).add_argument("name")
    commands.add_parser("lock").add_argument("--digests", action="store_true")
    args = parser.parse_args(argv)
    if args.command == "inputs":
        print(recorded_inputs(args.name))
    elif args.command == "digest":
        digest = find(read_lock(), args.name).digest
        if digest != NONE:
            print(digest)
    elif args.command == "check":
        problem = check(args.name)
        if problem:
            print(f"images.py: {problem}", file=sys.stderr)
            return 1
    else:
        changes = lock(args.digests)
        print(f"images.lock: {', '.join(changes) if changes else 'unchanged'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
