"""The supply chain, checked offline: the Python locks pinned with hashes and installed hash-checked,
the runtime image without development tools, every image the compose file pulls pinned.

``make audit`` (pip-audit, needs PyPI's JSON API or OSV) and the image itself (tests/deploy/
test_stack.py builds it) are checked elsewhere; these tests read the files only.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from tests.deploy.compose_file import REPO_ROOT, load_compose

RUNTIME_LOCK = REPO_ROOT / "requirements.lock"
DEV_LOCK = REPO_ROOT / "requirements-dev.lock"
UV_LOCK = REPO_ROOT / "requirements-uv.lock"
BUILD_LOCK = REPO_ROOT / "requirements-build.lock"
LOCKS = (RUNTIME_LOCK, DEV_LOCK, UV_LOCK, BUILD_LOCK)
#: Test and development tools: in the development lock, never in the runtime lock or the image.
DEV_TOOLS = {
    "pytest",
    "pytest-timeout",
    "pytest-xdist",
    "hypothesis",
    "ruff",
    "uv",
    "aiosmtpd",
    "selenium",
    "build",
    "duckdb",
    "duckdb-extension-delta",
}
#: Their import names.
DEV_MODULES = {"pytest", "_pytest", "xdist", "pytest_timeout", "hypothesis", "ruff", "uv"}
DEV_MODULES |= {"aiosmtpd", "selenium", "build", "duckdb"}
#: What the image copies and runs (Dockerfile: the packages, DAGs, plugins, jobs, pipelines, deploy/).
IMAGE_CODE = ("dags", "plugins", "control", "jobs", "connectors", "emulator", "pipelines", "deploy")
_HASH = re.compile(r"^--hash=sha256:[0-9a-f]{64}$")
_PIN = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)(\[[A-Za-z0-9_,.-]+\])?==([A-Za-z0-9.+!_-]+)")


def requirements(lock: Path) -> dict[str, tuple[str, frozenset[str]]]:
    """``{canonical name: (version, sha256 hashes)}``; fails on any requirement that is not one exact
    ``name==version`` with at least one sha256 hash and nothing else (no URL, path, option, range)."""
    entries = {}
    text = lock.read_text(encoding="utf-8").replace("\\\n", " ")
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        requirement, *options = line.split()
        match = _PIN.fullmatch(requirement)
        assert match, f"{lock.name}:{number}: {requirement!r} is not pinned to one exact version"
        assert options, f"{lock.name}:{number}: {requirement} has no hash"
        bad = [option for option in options if not _HASH.match(option)]
        assert not bad, f"{lock.name}:{number}: {requirement}: {bad} is not a --hash=sha256:<64 hex digits>"
        name = canonicalize_name(match.group(1))
        assert name not in entries, f"{lock.name}: {name} is listed twice"
        entries[name] = (match.group(3), frozenset(option.split(":", 1)[1] for option in options))
    return entries


@pytest.mark.parametrize("lock", LOCKS, ids=lambda path: path.name)
def test_every_requirement_of_every_lock_is_pinned_with_hashes(lock: Path) -> None:
    entries = requirements(lock)
    assert entries, f"{lock.name} lists nothing"
    header = lock.read_text(encoding="utf-8").splitlines()[:2]
    assert "--generate-hashes" in header[1], f"{lock.name} was not compiled with --generate-hashes"


def test_the_parser_refuses_unpinned_or_unhashed_lines(tmp_path: Path) -> None:
    good = "six==1.17.0 \\\n    --hash=sha256:" + "a" * 64 + "\n    # via -r requirements.in\n"
    assert requirements(_write(tmp_path, good)) == {"six": ("1.17.0", frozenset({"a" * 64}))}
    for bad in ("six==1.17.0\n", "six>=1.17\n", "six\n", "-e ./connectors\n", "six @ https://x/six.whl\n"):
        with pytest.raises(AssertionError):
            requirements(_write(tmp_path, bad))
    with pytest.raises(AssertionError):
        requirements(_write(tmp_path, "six==1.17.0 --hash=md5:abc\n"))


def _write(folder: Path, text: str) -> Path:
    path = folder / "requirements.lock"
    path.write_text(text)
    return path


def test_the_runtime_lock_has_no_test_or_development_tool() -> None:
    runtime = requirements(RUNTIME_LOCK)
    assert DEV_TOOLS.isdisjoint(runtime), sorted(DEV_TOOLS & set(runtime))
    essentials = {"apache-airflow", "pyspark", "delta-spark", "deltalake", "azure-eventhub", "celery"}
    assert essentials <= set(runtime)
    assert "pyspark-client" not in runtime  # it would overwrite pyspark's Python files


def test_the_dev_lock_is_the_runtime_lock_plus_the_tools_at_the_same_versions_and_hashes() -> None:
    runtime, dev, uv = requirements(RUNTIME_LOCK), requirements(DEV_LOCK), requirements(UV_LOCK)
    assert set(runtime) <= set(dev)
    differing = {name: (runtime[name][0], dev[name][0]) for name in runtime if runtime[name] != dev[name]}
    assert not differing, f"shared packages differ between the locks (runtime, dev): {differing}"
    assert DEV_TOOLS <= set(dev)
    # The installer: one pin, the same in the development lock (bootstrap's uv pip sync keeps it).
    assert set(uv) == {"uv"} and dev["uv"] == uv["uv"]
    inputs = (REPO_ROOT / "requirements-dev.in").read_text().splitlines()
    assert {"-c requirements.lock", "-r requirements.in", "-r requirements-uv.in"} <= set(inputs)


def test_make_lock_compiles_the_three_locks_with_hashes_and_one_uv() -> None:
    makefile = (REPO_ROOT / "Makefile").read_text()
    recipe = makefile.split("\nlock: venv\n", 1)[1].split("\n\n", 1)[0]
    compile_command = "$(VENV)/bin/uv pip compile --quiet --generate-hashes --python-version 3.11"
    assert f"LOCK_COMPILE := {compile_command}" in makefile
    for source, target in (
        ("requirements-uv.in", "requirements-uv.lock"),
        ("requirements.in", "requirements.lock"),
        ("requirements-dev.in", "requirements-dev.lock"),
    ):
        assert f"$(LOCK_COMPILE) {source} " in recipe and f"-o {target}" in recipe
    # The uv that compiles and installs is the one requirements-uv.in pins.
    pinned = requirements(UV_LOCK)["uv"][0]
    assert f"uv=={pinned}" in (REPO_ROOT / "requirements-uv.in").read_text().split()


def test_bootstrap_installs_the_dev_lock_hash_checked_and_its_stamp_covers_what_it_installs() -> None:
    script = (REPO_ROOT / "scripts/bootstrap.sh").read_text()
    stamp = script.split("wanted_stamp() {", 1)[1].split("\n}", 1)[0]
    for installed in (
        "requirements-uv.lock",
        "requirements-build.lock",
        "requirements-dev.lock",
        "jvm-deps.lock",
    ):
        assert installed in stamp, f"the virtualenv's stamp does not cover {installed}"
    assert '--require-hashes --no-deps \\\n  --only-binary :all: -r "$root/requirements-uv.lock"' in script
    assert "pip sync --quiet --require-hashes --no-build-isolation --compile-bytecode \\\n" in script
    assert '"$root/requirements-dev.lock"' in script
    assert 'pip install --quiet --disable-pip-version-check "uv==' not in script  # never unhashed


def test_the_image_installs_only_the_runtime_lock_hash_checked_and_keeps_no_installer() -> None:
    dockerfile = (REPO_ROOT / "Dockerfile").read_text()
    assert "requirements-dev" not in dockerfile
    ignored = (REPO_ROOT / ".dockerignore").read_text().splitlines()
    assert {"requirements-dev.in", "requirements-dev.lock"} <= set(ignored)
    steps = [step.split("\n#", 1)[0] for step in dockerfile.split("\nRUN ")[1:]]  # bodies, no comments
    (sync,) = [step for step in steps if "uv pip sync" in step]
    assert "--require-hashes --no-deps \\\n        --only-binary :all: --target /tmp/hubflow-uv" in sync
    assert "-r /opt/hubflow/requirements-uv.lock" in sync
    assert "uv pip sync --no-cache --require-hashes --no-build-isolation --compile-bytecode" in sync
    assert "/opt/hubflow/requirements.lock" in sync
    # uv lives outside the virtualenv and goes in the same step: no layer keeps it.
    assert "rm -rf /tmp/hubflow-uv" in sync
    (local,) = [step for step in steps if "/opt/hubflow/src/connectors" in step and "install" in step]
    assert "pip uninstall --yes --disable-pip-version-check pip" in local


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {alias.name.split(".", 1)[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module.split(".", 1)[0])
    return modules


def test_nothing_the_image_runs_imports_a_development_tool() -> None:
    offenders = []
    for folder in IMAGE_CODE:
        for path in sorted((REPO_ROOT / folder).rglob("*.py")):
            if "tests" in path.relative_to(REPO_ROOT).parts:
                continue
            found = _imported_modules(path) & DEV_MODULES
            if found:
                offenders.append(f"{path.relative_to(REPO_ROOT)}: {sorted(found)}")
    assert not offenders, "the runtime image has no development tools, yet: " + "; ".join(offenders)


_VARIABLE_WITH_DEFAULT = re.compile(r"^\$\{(?P<name>[A-Z0-9_]+):-(?P<default>[^}]+)\}$")
#: A tag naming one release: at least major.minor, an optional variant (``-bookworm``); or a digest.
_PINNED_TAG = re.compile(r"^\d+\.\d+(\.\d+)*(-[a-z0-9.]+)?$")


def _compose_images() -> dict[str, tuple[str | None, str, bool]]:
    """``{service: (variable or None, default image, built here)}`` of docker-compose.yml."""
    images = {}
    for name, service in load_compose()["services"].items():
        image = service["image"]
        match = _VARIABLE_WITH_DEFAULT.match(image)
        variable, default = (match["name"], match["default"]) if match else (None, image)
        images[name] = (variable, default, "build" in service)
    return images


def test_every_image_the_compose_file_pulls_is_pinned_to_a_release() -> None:
    pulled = {name: image for name, (_, image, built) in _compose_images().items() if not built}
    assert {"postgres", "redis", "azurite", "eventhubs-microsoft"} <= set(pulled)
    for name, image in pulled.items():
        repository, _, digest = image.partition("@")
        if digest:
            assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest), f"{name}: {image}"
            continue
        _, _, tag = repository.rpartition(":")
        assert tag and "/" not in tag, f"{name}: {image} has no tag (it means :latest)"
        assert _PINNED_TAG.match(tag), f"{name}: {image} is not pinned to one release (a full version)"


@pytest.mark.parametrize("tag", ["latest", "16", "7", "16-bookworm", "bookworm", "lts"])
def test_floating_tags_are_not_taken_for_pinned(tag: str) -> None:
    assert not _PINNED_TAG.match(tag)


def test_stack_sh_and_env_example_default_to_the_compose_files_images() -> None:
    defaults = {variable: image for variable, image, _ in _compose_images().values() if variable}
    stack = (REPO_ROOT / "scripts/stack.sh").read_text()
    env_example = (REPO_ROOT / "deploy/env.example").read_text().splitlines()
    for variable in ("HUBFLOW_POSTGRES_IMAGE", "HUBFLOW_REDIS_IMAGE"):
        assert f"choose_service_image {variable} {defaults[variable]} " in stack
        assert f"{variable}={defaults[variable]}" in env_example


def test_make_test_checks_the_jvm_locks_checksums_and_make_audit_audits_the_hashed_lock() -> None:
    makefile = (REPO_ROOT / "Makefile").read_text()
    test_prerequisites = re.search(r"^test: (.*)$", makefile, re.M)[1].split()
    assert "check-locks" in test_prerequisites  # .ci/run runs `make test`
    assert "\ncheck-locks: venv\n\t$(PY) scripts/jvm_deps.py check\n" in makefile
    audit = makefile.split("\naudit: venv\n", 1)[1].split("\n\n", 1)[0]
    for option in ("--strict", "--require-hashes", "--disable-pip", "-r requirements-dev.lock"):
        assert option in audit
    assert "pip-audit" in requirements(DEV_LOCK)


def _wheelhouse_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("wheelhouse", REPO_ROOT / "scripts" / "wheelhouse.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_wheelhouse_keeps_only_files_with_a_hash_of_the_lock(tmp_path: Path) -> None:
    """scripts/wheelhouse.py, against a fake index: the best wheel for this machine, else the sdist,
    each checked against the lock; stale files and files of other bytes are deleted."""
    import hashlib

    wheelhouse = _wheelhouse_module()
    contents = {
        "six-1.17.0-py2.py3-none-any.whl": b"six wheel",
        "six-1.17.0.tar.gz": b"six sdist",
        "pyspark-4.2.0.tar.gz": b"pyspark sdist",
        "tampered-1.0-py3-none-any.whl": b"other bytes",
    }
    digest = {name: hashlib.sha256(data).hexdigest() for name, data in contents.items()}
    lock = tmp_path / "requirements.lock"
    lock.write_text(
        f"six==1.17.0 \\\n    --hash=sha256:{digest['six-1.17.0-py2.py3-none-any.whl']} \\\n"
        f"    --hash=sha256:{digest['six-1.17.0.tar.gz']}\n    # via -r requirements.in\n"
        f"pyspark==4.2.0 \\\n    --hash=sha256:{digest['pyspark-4.2.0.tar.gz']}\n"
        f"tampered==1.0 \\\n    --hash=sha256:{'0' * 64}\n"
    )

    class FakeIndex:
        def files(self, name: str) -> list[dict]:
            return [
                {"filename": filename, "url": filename, "hashes": {"sha256": digest[filename]}}
                for filename in contents
                if filename.startswith(f"{name}-")
            ]

        def download(self, url: str, target: Path) -> None:
            target.write_bytes(contents[url])

    out = tmp_path / "wheelhouse"
    out.mkdir()
    (out / "stale-0.1-py3-none-any.whl").write_bytes(b"no lock names it")
    kept, downloaded, missing = wheelhouse.build_wheelhouse([lock], out, FakeIndex())
    assert (kept, downloaded, missing) == ([], ["pyspark", "six"], ["tampered"])
    assert sorted(path.name for path in out.iterdir()) == [
        "pyspark-4.2.0.tar.gz",
        "six-1.17.0-py2.py3-none-any.whl",
    ]
    assert wheelhouse.build_wheelhouse([lock], out, FakeIndex()) == (["pyspark", "six"], [], ["tampered"])


# --- builds: nothing fetched that no lock pins with hashes ---------------------------------------

#: Every script that installs Python packages, and the Dockerfile.
INSTALLING_FILES = ("Dockerfile", "scripts/bootstrap.sh", "scripts/migration_env.sh")
_INSTALL = re.compile(r"\b(?:pip|uv pip) (?:install|sync)\b|\buv build\b|\bpip wheel\b")


def _shell_commands(path: Path) -> list[str]:
    """The file's commands, continuation lines joined, comments dropped, split at ``;`` / ``&&``."""
    text = re.sub(r"\\\n\s*", " ", path.read_text(encoding="utf-8"))
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    return [part.strip() for line in lines for part in re.split(r";|&&", line) if part.strip()]


def install_commands(path: Path) -> list[str]:
    return [command for command in _shell_commands(path) if _INSTALL.search(command)]


def unpinned_installs(path: Path) -> list[str]:
    """The install commands of ``path`` that could fetch something no lock pins with its hash.

    A command must install a lock hash-checked (``--require-hashes`` and a ``*.lock``), or only the
    project's own folders (``--no-deps``); and whatever it builds, it builds without isolation
    (``--no-build-isolation``), else it may build nothing (``--only-binary :all:``): an isolated
    build fetches its backend (setuptools) from the index, unpinned and unhashed."""
    problems = []
    for command in install_commands(path):
        if "pip uninstall" in command:
            continue
        locked = "--require-hashes" in command and re.search(r"\S+\.lock\b", command)
        own = ("--no-deps" in command and "/src/" in command) or " -e " in command
        if not (locked or own):
            problems.append(f"{path.name}: not a hash-checked lock nor the project's folders: {command}")
        if "--no-build-isolation" not in command and "--only-binary :all:" not in command:
            problems.append(f"{path.name}: may build in an isolated environment: {command}")
    return problems


@pytest.mark.parametrize("name", INSTALLING_FILES)
def test_every_install_is_hash_checked_and_builds_without_isolation(name: str) -> None:
    path = REPO_ROOT / name
    assert install_commands(path), f"{name} installs nothing any more: update INSTALLING_FILES"
    assert unpinned_installs(path) == []


def test_the_install_check_refuses_isolated_builds_and_unlocked_installs(tmp_path: Path) -> None:
    script = tmp_path / "bootstrap.sh"
    script.write_text(
        'pip install --require-hashes --no-deps -r "$root/requirements-uv.lock"\n'
        "pip install --no-deps --no-build-isolation setuptools  # ok? no: not a lock\n"
        "uv pip install --no-deps /opt/hubflow/src/connectors\n"
        'uv pip sync --require-hashes --no-build-isolation "$root/requirements-dev.lock"; \\\n'
        "  pip uninstall --yes pip\n"
    )
    problems = unpinned_installs(script)
    assert len(problems) == 3, problems
    assert "requirements-uv.lock" in problems[0] and "isolated" in problems[0]
    assert "setuptools" in problems[1] and "not a hash-checked lock" in problems[1]
    assert "src/connectors" in problems[2] and "isolated" in problems[2]


def test_the_build_backend_of_every_local_package_and_sdist_is_in_the_hashed_build_lock() -> None:
    """connectors, emulator, control, jobs and cli build with setuptools; pyspark publishes only an
    sdist, without pyproject.toml (so setuptools too): the build lock's setuptools satisfies them
    all, and the development lock holds the very same pin (its sync must keep it)."""
    import tomllib

    from packaging.requirements import Requirement
    from packaging.version import Version

    build, dev = requirements(BUILD_LOCK), requirements(DEV_LOCK)
    assert set(build) == {"setuptools"}, "the build lock holds the build backend only"
    assert dev["setuptools"] == build["setuptools"]
    version = Version(build["setuptools"][0])
    packages = sorted(path.parent.name for path in REPO_ROOT.glob("*/pyproject.toml"))
    assert packages == ["cli", "connectors", "control", "emulator", "jobs"]
    for package in packages:
        system = tomllib.loads((REPO_ROOT / package / "pyproject.toml").read_text())["build-system"]
        assert system["build-backend"] == "setuptools.build_meta", package
        for needed in map(Requirement, system["requires"]):
            locked = requirements(BUILD_LOCK).get(canonicalize_name(needed.name))
            assert locked, f"{package}/pyproject.toml needs {needed}, which requirements-build.lock lacks"
            assert version in needed.specifier, f"{package} needs {needed}; the build lock has {version}"
    assert "-r requirements-build.in" in (REPO_ROOT / "requirements-dev.in").read_text().splitlines()
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert "$(LOCK_COMPILE) requirements-build.in -o requirements-build.lock" in makefile


def test_the_image_installs_the_build_lock_before_it_builds_anything() -> None:
    steps = [step.split("\n#", 1)[0] for step in (REPO_ROOT / "Dockerfile").read_text().split("\nRUN ")[1:]]
    (sync,) = [step for step in steps if "uv pip sync" in step]
    assert sync.index("requirements-build.lock") < sync.index("uv pip sync")
    assert (
        "COPY requirements.lock requirements-uv.lock requirements-build.lock /opt/hubflow/"
        in (REPO_ROOT / "Dockerfile").read_text()
    )
    (local,) = [step for step in steps if "/opt/hubflow/src/connectors" in step]
    assert "--no-build-isolation --no-index" in local  # builds with what is there, fetches nothing


def _build_dist_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("build_dist", REPO_ROOT / "scripts" / "build_dist.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("with_uv", [True, False], ids=["uv", "python-build"])
def test_build_dist_builds_the_wheel_without_isolation(with_uv: bool, monkeypatch, tmp_path: Path) -> None:
    build_dist = _build_dist_module()
    python = tmp_path / "bin" / "python"
    python.parent.mkdir()
    if with_uv:
        (python.parent / "uv").touch()
    else:
        monkeypatch.setattr(build_dist.shutil, "which", lambda name: None)
    monkeypatch.setattr(build_dist.sys, "executable", str(python))
    command = build_dist._wheel_command(Path("connectors"), Path("wheels"))
    assert command[0] == str(python.parent / "uv" if with_uv else python)
    needed = {"--no-build-isolation", "--offline"} if with_uv else {"--no-isolation"}
    assert needed <= set(command), command


# --- images: pinned by digest, or made here from recorded inputs ---------------------------------


def _images_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("images", REPO_ROOT / "scripts" / "images.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _image_references() -> dict[str, str]:
    """``{image as written: where}`` for every FROM of the Dockerfiles and every compose image."""
    found = {}
    for dockerfile in [REPO_ROOT / "Dockerfile", *sorted(REPO_ROOT.glob("deploy/*/Dockerfile"))]:
        for image in re.findall(r"^FROM\s+(\S+)", dockerfile.read_text(), re.M):
            found[image] = str(dockerfile.relative_to(REPO_ROOT))
    for name, (_, image, built) in _compose_images().items():
        if not built:
            found[image] = f"docker-compose.yml service {name}"
    return found


def test_every_image_is_pinned_by_digest_or_made_here_from_its_recorded_inputs() -> None:
    images = _images_module()
    lock = images.read_lock()
    references = _image_references()
    assert {"debian:bookworm-slim", "postgres:15.19-bookworm", "redis:7.0.15-bookworm"} <= set(references)
    for written, where in references.items():
        reference, _, digest = written.partition("@")
        entry = images.find(lock, reference)
        if digest:
            assert entry.digest == digest, f"{where}: {written} is not images.lock's digest {entry.digest}"
            continue
        assert entry.made_here, f"{where}: {written} has no digest and is not made here (images.lock)"
        assert images.compute_inputs(entry, lock) == entry.inputs, (
            f"{entry.folder} changed since images.lock recorded it: run `make lock-images`"
        )
    assert {entry.reference for entry in lock} == {ref.partition("@")[0] for ref in references}, (
        "images.lock lists an image nothing uses"
    )
    # stack.sh makes the local ones from those very folders, labelled with the recorded inputs.
    stack = (REPO_ROOT / "scripts/stack.sh").read_text()
    assert 'bash "$root/deploy/debian/rootfs.sh"' in stack
    assert '--change "LABEL org.hubflow.inputs=$inputs"' in stack
    assert 'docker build --label "org.hubflow.inputs=$inputs"' in stack
    for entry in lock:
        if entry.made_here and entry.folder != "deploy/debian":
            assert f"{entry.reference} {entry.local_tag} {entry.folder}" in stack


def test_a_changed_build_folder_or_a_bad_line_no_longer_matches_the_record(
    tmp_path: Path, monkeypatch
) -> None:
    import shutil

    images = _images_module()
    for folder in ("deploy/debian", "deploy/postgres", "deploy/redis"):
        shutil.copytree(REPO_ROOT / folder, tmp_path / folder)
    shutil.copy(REPO_ROOT / "images.lock", tmp_path / "images.lock")
    monkeypatch.setattr(images, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(images, "LOCK", tmp_path / "images.lock")
    assert images.recorded_inputs("hubflow-postgres:15-bookworm") == images.recorded_inputs(
        "postgres:15.19-bookworm"
    )
    # The base's recipe is an input of the images built FROM it.
    rootfs = tmp_path / "deploy/debian/rootfs.sh"
    rootfs.write_text(rootfs.read_text().replace("--variant=minbase", "--variant=buildd"))
    for name in ("debian:bookworm-slim", "hubflow-postgres:15-bookworm"):
        with pytest.raises(SystemExit, match=r"changed since images.lock recorded them.*make lock-images"):
            images.recorded_inputs(name)
    changed = {"debian:bookworm-slim", "postgres:15.19-bookworm", "redis:7.0.15-bookworm"}
    assert set(images.lock(with_digests=False)) == changed
    assert images.recorded_inputs("hubflow-postgres:15-bookworm").startswith("sha256:")
    (tmp_path / "images.lock").write_text("debian:bookworm-slim sha256:abc - - -\n")
    with pytest.raises(ValueError, match=r"images.lock:1: 'sha256:abc' is not sha256:<64 hex digits>"):
        images.read_lock(tmp_path / "images.lock")
