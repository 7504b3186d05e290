#!/usr/bin/env python
"""Build what spark-submit ships: the connectors wheel and a zip of the jobs' runtime package.

    .venv/bin/python scripts/build_dist.py            # into dist/
    .venv/bin/python scripts/build_dist.py --out DIR  # elsewhere (tests build into a temp folder)

Produces ``hubflow_connectors-<version>-py3-none-any.whl`` (from ``connectors/``, built by
setuptools through ``uv build --wheel --no-build-isolation``, or ``python -m build --wheel --no-isolation``
without uv: no build fetches its backend, the venv has requirements-build.lock's setuptools) and
``hubflow_jobs.zip`` (the driver side ``jobs/hubflow_jobs`` and the control plane it imports,
``control/hubflow``, importable from the zip). Pass both to
``spark-submit --py-files`` together with the entry script ``jobs/<name>.py``. The last line printed
is a JSON object ``{"wheel": PATH, "jobs_zip": PATH}`` for scripts that call this one.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
CONNECTORS_DIR = REPO_ROOT / "connectors"
#: The packages a driver imports from the zip: the driver side and the control plane under it.
JOBS_PACKAGES = (REPO_ROOT / "jobs" / "hubflow_jobs", REPO_ROOT / "control" / "hubflow")
JOBS_ZIP_NAME = "hubflow_jobs.zip"


def build_connectors_wheel(out_dir: Path) -> Path:
    """Build the connectors wheel into ``out_dir`` and return its path."""
    with tempfile.TemporaryDirectory(prefix="hubflow-wheel-") as scratch:
        # Build from a copy: setuptools writes build/ and *.egg-info next to the sources, and other
        # people may be building or testing connectors/ at the same moment.
        source = Path(scratch) / "connectors"
        shutil.copytree(
            CONNECTORS_DIR,
            source,
            ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__", "*.pyc", "tests"),
        )
        wheel_dir = Path(scratch) / "wheels"
        result = subprocess.run(_wheel_command(source, wheel_dir), capture_output=True, text=True)
        if result.returncode != 0:
            raise SystemExit(
                f"build_dist: building the connectors wheel failed (exit {result.returncode}):\n"
                f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
            )
        wheels = sorted(wheel_dir.glob("*.whl"))
        if len(wheels) != 1:
            raise SystemExit(
                f"build_dist: expected one wheel from connectors/, got {[w.name for w in wheels]}"
            )
        target = out_dir / wheels[0].name
        shutil.copy2(wheels[0], target)
        return target


def _wheel_command(source: Path, wheel_dir: Path) -> list[str]:
    """``uv build --wheel`` when uv is installed (the venv has it), else ``python -m build``.

    Either builds without isolation, with this interpreter's setuptools (requirements-build.lock,
    hash-checked into the venv by ``make venv``) and offline: an isolated build would fetch
    setuptools from the index, unpinned and unhashed.
    """
    uv = Path(sys.executable).with_name("uv")
    uv_path = str(uv) if uv.exists() else shutil.which("uv")
    if uv_path:
        return [
            uv_path,
            "build",
            "--wheel",
            "--no-build-isolation",
            "--offline",
            "--python",
            sys.executable,
            "--out-dir",
            str(wheel_dir),
            str(source),
        ]
    return [
        sys.executable,
        "-m",
        "build",
        "--wheel",
        "--no-isolation",
        "--outdir",
        str(wheel_dir),
        str(source),
    ]


def build_jobs_zip(out_dir: Path) -> Path:
    """Zip ``jobs/hubflow_jobs`` and ``control/hubflow`` (sources only) into ``out_dir``; return its path."""
    target = out_dir / JOBS_ZIP_NAME
    temp = target.with_suffix(".zip.tmp")
    with zipfile.ZipFile(temp, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for package in JOBS_PACKAGES:
            for path in sorted(package.rglob("*.py")):
                if "__pycache__" not in path.parts:
                    archive.write(path, path.relative_to(package.parent).as_posix())
    temp.replace(target)
    return target


def main(argv: list[str] | None = None) -> int:
    """Build both artifacts; print their paths."""
    parser = argparse.ArgumentParser(
        description="Build the connectors wheel and the jobs zip for spark-submit."
    )
    parser.add_argument("--out", default=str(REPO_ROOT / "dist"), help="output folder (default: dist/)")
    args = parser.parse_args(argv)
    out_dir = Path(args.out).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in [*out_dir.glob("hubflow_connectors-*.whl"), out_dir / JOBS_ZIP_NAME]:
        stale.unlink(missing_ok=True)
    wheel = build_connectors_wheel(out_dir)
    jobs_zip = build_jobs_zip(out_dir)
    print(f"built {wheel}")
    print(f"built {jobs_zip}")
    print(json.dumps({"wheel": str(wheel), "jobs_zip": str(jobs_zip)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
