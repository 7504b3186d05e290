"""The JVM jars the jobs need beyond pyspark's own: locked with checksums, installed into the venv.

Three commands, stdlib only (it runs before anything else is installed, and in the image build):

``lock``     resolves ``jvm-deps.in`` with Maven into ``jvm-deps.lock`` (group:artifact:version and
             SHA-256 of every jar). Artifacts whose jar pyspark already ships (same artifact id, any
             version) are left out, so Spark's versions win and no class exists twice.
``install``  downloads every locked jar from Maven Central (or ``HUBFLOW_MAVEN_REPO``) into a cache,
             checks its SHA-256, and copies it into the virtualenv's ``pyspark/jars`` folder, where
             every Spark that venv starts finds it: local sessions, spark-submit, the standalone
             master/worker and their executors. Jars an earlier install put there and the lock no
             longer names are removed (a manifest records what was installed).
``check``    says whether ``pyspark/jars`` holds exactly the locked jars for the installed pyspark.

``--lock FILE`` picks another lock (its input is the same name ending in ``.in``), for another
virtualenv: ``jvm-deps-spark35.lock`` is the Spark 3.5 venv's (the migration test's Scala Event Hubs
connector), run with that venv's python so that its ``pyspark/jars`` is the one resolved against and
installed into.

A lock whose input says ``folder PATH`` is a standalone classpath, not Spark's: nothing is left out
for pyspark, no pyspark version is recorded or checked, and ``install``/``check`` use ``PATH``
(relative to the repository). ``jvm-deps-kafka.lock`` is one: the Apache Kafka broker and tools the
Kafka conformance tests start (tests/support/kafka_broker.py).

Why a script of our own: Spark's ``--packages`` (Ivy) resolves at job start, which the project
forbids (no network when a job runs, no unpinned versions); Maven only resolves at lock time.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

ROOT = Path(__file__).resolve().parent.parent
LOCK_INPUT = ROOT / "jvm-deps.in"
LOCK_FILE = ROOT / "jvm-deps.lock"
MANIFEST = ".hubflow-jvm-deps"
DEFAULT_REPO = "https://repo1.maven.org/maven2"
#: A jar file name: artifact id, then a version that starts with a digit.
_JAR_NAME = re.compile(r"^(?P<artifact>.+?)-(?P<version>\d[^-]*(?:-[A-Za-z0-9.]+)*)\.jar$")


class JvmDepsError(Exception):
    """The lock, the download or the installed jars are not what they should be; says what to do."""


@dataclass(frozen=True)
class LockedJar:
    """One locked artifact: ``group:artifact:version`` and the SHA-256 of its jar."""

    group: str
    artifact: str
    version: str
    sha256: str

    @property
    def coordinates(self) -> str:
        return f"{self.group}:{self.artifact}:{self.version}"

    @property
    def file_name(self) -> str:
        return f"{self.artifact}-{self.version}.jar"

    def url(self, repo: str) -> str:
        folder = f"{self.group.replace('.', '/')}/{self.artifact}/{self.version}"
        return f"{repo.rstrip('/')}/{folder}/{self.file_name}"


@dataclass(frozen=True)
class Lock:
    """A parsed lock: the pyspark version it was compiled for (or its own folder), and its jars."""

    pyspark_version: str | None
    jars: tuple[LockedJar, ...]
    folder: str | None = None

    def jars_dir(self) -> Path:
        """Where the jars are installed: the lock's own folder, else pyspark's ``jars``."""
        return ROOT / self.folder if self.folder else pyspark_jars_dir()


def pyspark_jars_dir() -> Path:
    """The ``pyspark/jars`` folder of the interpreter running this script."""
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def pyspark_version() -> str:
    import pyspark

    return pyspark.__version__


def artifact_of(jar_name: str) -> str | None:
    """The artifact id of a jar file name such as ``jackson-core-2.21.2.jar``."""
    match = _JAR_NAME.match(jar_name)
    return match.group("artifact") if match else None


def read_input(path: Path = LOCK_INPUT) -> tuple[list[str], set[str], str | None]:
    """Dependencies (``g:a:v``), exclusions (``g:a``) and the ``folder`` (if any) of an ``.in`` file."""
    deps, excludes, folder = [], set(), None
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("exclude "):
            excludes.add(line.split(None, 1)[1].strip())
        elif line.startswith("folder "):
            folder = line.split(None, 1)[1].strip()
        elif line.count(":") == 2:
            deps.append(line)
        else:
            raise JvmDepsError(
                f"{path}:{number}: expected group:artifact:version, 'exclude group:artifact' or 'folder PATH'"
            )
    return deps, excludes, folder


def read_lock(path: Path = LOCK_FILE) -> Lock:
    """Parse ``jvm-deps.lock``; errors name the line."""
    version = folder = None
    jars = []
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if line.startswith("# pyspark "):
            version = line.split()[2]
        if line.startswith("# folder "):
            folder = line.split(None, 2)[2]
        if not line or line.startswith("#"):
            continue
        try:
            coordinates, digest = line.split()
            group, artifact, jar_version = coordinates.split(":")
            algorithm, hexdigest = digest.split(":")
        except ValueError:
            raise JvmDepsError(f"{path}:{number}: expected 'group:artifact:version sha256:HEX'") from None
        if algorithm != "sha256" or len(hexdigest) != 64:
            raise JvmDepsError(f"{path}:{number}: expected a sha256:HEX digest of 64 hex digits")
        jars.append(LockedJar(group, artifact, jar_version, hexdigest))
    if version is None and folder is None:
        raise JvmDepsError(
            f"{path}: no '# pyspark X.Y.Z' line saying which pyspark it was locked for (or '# folder PATH')"
        )
    return Lock(version, tuple(jars), folder)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def compile_lock(input_path: Path = LOCK_INPUT, output: Path = LOCK_FILE) -> Lock:
    """Resolve ``input_path`` with Maven and write the lock (see the module docstring)."""
    deps, excludes, folder = read_input(input_path)
    shipped: set[str | None] = set()
    if folder is None:  # a Spark classpath: pyspark's own jars win
        jars_dir = pyspark_jars_dir()
        ours = set((jars_dir / MANIFEST).read_text().split()) if (jars_dir / MANIFEST).exists() else set()
        shipped = {artifact_of(p.name) for p in jars_dir.glob("*.jar") if p.name not in ours} - {None}
    dependencies = "\n".join(
        "<dependency><groupId>{}</groupId><artifactId>{}</artifactId><version>{}</version></dependency>".format(
            *dep.split(":")
        )
        for dep in deps
    )
    pom = (
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>hubflow</groupId><artifactId>jvm-deps</artifactId><version>0</version>"
        f"<dependencies>{dependencies}</dependencies></project>"
    )
    with tempfile.TemporaryDirectory() as work:
        Path(work, "pom.xml").write_text(pom)
        listing = Path(work, "deps.txt")
        command = [
            "mvn",
            "-q",
            "-B",
            "dependency:list",
            "-DincludeScope=runtime",
            "-DoutputAbsoluteArtifactFilename=true",
            f"-DoutputFile={listing}",
        ]
        result = subprocess.run(command, cwd=work, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise JvmDepsError(f"mvn dependency:list failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
        jars = []
        for line in listing.read_text().splitlines():
            parts = line.strip().split(":")
            if len(parts) < 6 or parts[2] != "jar":
                continue
            group, artifact, _, version, _scope = parts[:5]
            path = Path(":".join(parts[5:]))
            if artifact in shipped or f"{group}:{artifact}" in excludes:
                continue
            if folder is None:
                _check_spark_version(path.with_suffix(".pom"), f"{group}:{artifact}:{version}")
            jars.append(LockedJar(group, artifact, version, _sha256(path)))
    jars.sort(key=lambda jar: jar.coordinates)
    if output == LOCK_FILE:
        origin = "# Locked JVM dependencies of hubflow's jobs: compiled from jvm-deps.in by `make lock-jvm`;"
    else:
        origin = (
            f"# Locked JVM dependencies: compiled from {input_path.name} by "
            f"`scripts/jvm_deps.py lock --lock {output.name}`;"
        )
    if folder is None:
        header = [
            origin,
            "# installed into the virtualenv's pyspark/jars by scripts/jvm_deps.py (checked by SHA-256).",
            f"# pyspark {pyspark_version()}",
        ]
    else:
        header = [
            origin,
            "# installed into this folder by scripts/jvm_deps.py (checked by SHA-256).",
            f"# folder {folder}",
        ]
    output.write_text("\n".join(header + [f"{jar.coordinates} sha256:{jar.sha256}" for jar in jars]) + "\n")
    return Lock(None if folder else pyspark_version(), tuple(jars), folder)


def _check_spark_version(pom: Path, coordinates: str) -> None:
    """Refuse an artifact built against another Spark than the installed pyspark (its pom says)."""
    if not pom.exists():
        return
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    for dep in ElementTree.parse(pom).getroot().findall("m:dependencies/m:dependency", ns):
        artifact = dep.findtext("m:artifactId", "", ns)
        version = dep.findtext("m:version", "", ns)
        if dep.findtext("m:scope", "compile", ns) == "test" or not re.fullmatch(
            r"spark-(sql|core)_2\.13", artifact
        ):
            continue
        if version != pyspark_version():
            raise JvmDepsError(
                f"{coordinates} is built for Spark {version} but pyspark {pyspark_version()} is "
                "installed; pick the version built for this Spark in jvm-deps.in"
            )


def _cache_dir() -> Path:
    base = os.environ.get("HUBFLOW_JAR_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "hubflow", "jars"
    )
    return Path(base)


def fetch(jar: LockedJar, repo: str, cache: Path) -> Path:
    """The jar in the cache, downloaded first if missing; its SHA-256 is always checked."""
    target = cache / jar.group / jar.file_name
    if target.exists() and _sha256(target) == jar.sha256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".part")
    url = jar.url(repo)
    try:
        with urllib.request.urlopen(url, timeout=120) as response, open(partial, "wb") as out:
            shutil.copyfileobj(response, out)
    except OSError as exc:
        raise JvmDepsError(f"cannot download {jar.coordinates} from {url}: {exc}") from None
    actual = _sha256(partial)
    if actual != jar.sha256:
        partial.unlink()
        raise JvmDepsError(
            f"{jar.coordinates} from {url} has SHA-256 {actual}, the lock says {jar.sha256}: "
            "the download is damaged or the repository serves another file; nothing was installed"
        )
    partial.replace(target)
    return target


def install(lock_path: Path = LOCK_FILE, jars_dir: Path | None = None, repo: str | None = None) -> list[str]:
    """Install the locked jars into ``jars_dir`` (pyspark's); returns the installed file names."""
    lock = read_lock(lock_path)
    if lock.folder is None and lock.pyspark_version != pyspark_version():
        raise JvmDepsError(
            f"{lock_path} was compiled for pyspark {lock.pyspark_version} but pyspark {pyspark_version()} is "
            f"installed; recompile {lock_path.name} (`make lock-jvm`, or `make lock-jvm-spark35` for the "
            "Spark 3.5 venv) after changing pyspark"
        )
    jars_dir = jars_dir or lock.jars_dir()
    jars_dir.mkdir(parents=True, exist_ok=True)
    repo = repo or os.environ.get("HUBFLOW_MAVEN_REPO", DEFAULT_REPO)
    cache = _cache_dir()
    sources = [(jar, fetch(jar, repo, cache)) for jar in lock.jars]  # every download checked first
    manifest = jars_dir / MANIFEST
    previous = set(manifest.read_text().split()) if manifest.exists() else set()
    wanted = {jar.file_name for jar in lock.jars}
    for stale in sorted(previous - wanted):
        (jars_dir / stale).unlink(missing_ok=True)
    for jar, source in sources:
        target = jars_dir / jar.file_name
        if not target.exists() or _sha256(target) != jar.sha256:
            shutil.copyfile(source, target)
    manifest.write_text("\n".join(sorted(wanted)) + "\n")
    return sorted(wanted)


def check(lock_path: Path = LOCK_FILE, jars_dir: Path | None = None) -> list[str]:
    """Problems with the installed jars (empty when ``jars_dir`` holds exactly the lock's jars)."""
    lock = read_lock(lock_path)
    jars_dir = jars_dir or lock.jars_dir()
    problems = []
    if lock.folder is None and lock.pyspark_version != pyspark_version():
        problems.append(f"lock compiled for pyspark {lock.pyspark_version}, installed {pyspark_version()}")
    for jar in lock.jars:
        path = jars_dir / jar.file_name
        if not path.exists():
            problems.append(f"{jar.coordinates}: {path} is missing")
        elif _sha256(path) != jar.sha256:
            problems.append(f"{jar.coordinates}: {path} does not have the locked SHA-256")
    for jar in lock.jars:
        twins = sorted(
            p.name
            for p in jars_dir.glob(f"{jar.artifact}-*.jar")
            if p.name != jar.file_name and artifact_of(p.name) == jar.artifact
        )
        if twins:
            problems.append(f"{jar.coordinates}: another version is installed beside it: {', '.join(twins)}")
    return problems


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["lock", "install", "check"])
    parser.add_argument(
        "--lock",
        type=Path,
        default=LOCK_FILE,
        help="the lock file (default jvm-deps.lock; its input: the same name, .in)",
    )
    args = parser.parse_args(argv)
    lock_path = args.lock.resolve()
    try:
        if args.command == "lock":
            lock = compile_lock(lock_path.with_suffix(".in"), lock_path)
            target = f"folder {lock.folder}" if lock.folder else f"pyspark {lock.pyspark_version}"
            print(f"hubflow: {lock_path.name}: {len(lock.jars)} jars for {target}")
        elif args.command == "install":
            names = install(lock_path)
            print(
                f"hubflow: {len(names)} locked JVM jars in {read_lock(lock_path).jars_dir()}", file=sys.stderr
            )
        else:
            problems = check(lock_path)
            for problem in problems:
                print(f"hubflow: {problem}", file=sys.stderr)
            return 1 if problems else 0
    except JvmDepsError as exc:
        print(f"hubflow: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
