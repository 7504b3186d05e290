"""The locked JVM jars are installed exactly, agree with pyspark and delta-spark, and Delta works.

``scripts/jvm_deps.py`` installs ``jvm-deps.lock`` into pyspark's jars folder; these tests read the
jars themselves (their Maven metadata), not the lock's claims about them.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import re
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pyspark
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


def _jvm_deps() -> ModuleType:
    spec = importlib.util.spec_from_file_location("jvm_deps", REPO_ROOT / "scripts" / "jvm_deps.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["jvm_deps"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


jvm_deps = _jvm_deps()
JARS = Path(pyspark.__file__).parent / "jars"


def _manifest_version(jar: Path) -> str:
    with zipfile.ZipFile(jar) as archive:
        manifest = archive.read("META-INF/MANIFEST.MF").decode()
    return re.search(r"^Implementation-Version: (\S+)", manifest, re.M).group(1)


def test_installed_jars_are_exactly_the_locked_ones() -> None:
    lock = jvm_deps.read_lock()
    assert lock.pyspark_version == pyspark.__version__
    assert jvm_deps.check() == []
    installed = set((JARS / jvm_deps.MANIFEST).read_text().split())
    assert installed == {jar.file_name for jar in lock.jars}
    for jar in lock.jars:
        assert hashlib.sha256((JARS / jar.file_name).read_bytes()).hexdigest() == jar.sha256


def test_delta_jar_matches_the_lock_and_the_delta_python_package() -> None:
    # The lock tool refused to lock a delta-spark whose pom names another Spark than pyspark's;
    # the Delta session test below proves this pyspark runs it.
    lock = {jar.artifact: jar for jar in jvm_deps.read_lock().jars}
    delta = lock["delta-spark_2.13"]
    assert _manifest_version(JARS / delta.file_name) == delta.version
    assert delta.version == importlib.metadata.version("delta-spark")
    assert lock["delta-storage"].version == delta.version


def test_hadoop_azure_matches_the_hadoop_that_pyspark_ships() -> None:
    lock = {jar.artifact: jar for jar in jvm_deps.read_lock().jars}
    shipped = [p.name for p in JARS.glob("hadoop-client-api-*.jar")]
    assert len(shipped) == 1
    hadoop_version = re.match(r"hadoop-client-api-(.+)\.jar", shipped[0]).group(1)
    assert lock["hadoop-azure"].version == hadoop_version


def test_a_damaged_download_is_refused_and_nothing_is_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = jvm_deps.LockedJar("org.example", "tiny", "1.0", hashlib.sha256(b"right bytes").hexdigest())
    repo = tmp_path / "repo"
    folder = repo / "org" / "example" / "tiny" / "1.0"
    folder.mkdir(parents=True)
    (folder / good.file_name).write_bytes(b"wrong bytes")
    lock_file = tmp_path / "jvm-deps.lock"
    lock_file.write_text(f"# pyspark {pyspark.__version__}\n{good.coordinates} sha256:{good.sha256}\n")
    target = tmp_path / "jars"
    target.mkdir()
    monkeypatch.setenv("HUBFLOW_JAR_CACHE", str(tmp_path / "cache"))

    with pytest.raises(jvm_deps.JvmDepsError, match=r"org\.example:tiny:1\.0 .* has SHA-256"):
        jvm_deps.install(lock_file, target, repo=repo.as_uri())
    assert list(target.iterdir()) == []

    (folder / good.file_name).write_bytes(b"right bytes")
    assert jvm_deps.install(lock_file, target, repo=repo.as_uri()) == ["tiny-1.0.jar"]
    assert (target / "tiny-1.0.jar").read_bytes() == b"right bytes"


def test_a_lock_for_another_pyspark_is_refused(tmp_path: Path) -> None:
    lock_file = tmp_path / "jvm-deps.lock"
    lock_file.write_text("# pyspark 3.5.0\n")
    with pytest.raises(jvm_deps.JvmDepsError, match=r"compiled for pyspark 3\.5\.0.*make lock-jvm"):
        jvm_deps.install(lock_file, tmp_path)


def test_local_sessions_read_and_write_delta_tables(spark, tmp_path: Path) -> None:
    table = str(tmp_path / "table")
    spark.range(5).write.format("delta").save(table)
    spark.range(5, 8).write.format("delta").mode("append").save(table)
    assert sorted(r.id for r in spark.read.format("delta").load(table).collect()) == list(range(8))
    history = spark.sql(f"DESCRIBE HISTORY delta.`{table}`").collect()
    assert [row.version for row in history] == [1, 0]


def test_the_kafka_lock_is_installed_in_its_own_folder_and_nothing_of_it_in_pyspark() -> None:
    """jvm-deps-kafka.lock (Apache Kafka for tests/kafka) is a standalone classpath: its folder holds
    exactly its jars, checked by SHA-256, and pyspark's jars folder none of them."""
    kafka_lock = REPO_ROOT / "jvm-deps-kafka.lock"
    lock = jvm_deps.read_lock(kafka_lock)
    assert lock.folder == "tests/support/kafka/libs" and lock.pyspark_version is None
    assert {"kafka_2.13", "kafka-tools", "kafka-clients"} <= {jar.artifact for jar in lock.jars}
    assert jvm_deps.check(kafka_lock) == []
    assert set((lock.jars_dir() / jvm_deps.MANIFEST).read_text().split()) == {j.file_name for j in lock.jars}
    assert not [p.name for p in JARS.glob("kafka_2.13-*.jar")], "the broker is never on Spark's classpath"


def test_a_folder_lock_installs_into_its_folder_without_pyspark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jar = jvm_deps.LockedJar("org.example", "tiny", "1.0", hashlib.sha256(b"tiny").hexdigest())
    repo = tmp_path / "repo" / "org" / "example" / "tiny" / "1.0"
    repo.mkdir(parents=True)
    (repo / jar.file_name).write_bytes(b"tiny")
    lock_file = tmp_path / "jvm-deps-x.lock"
    lock_file.write_text(f"# folder {tmp_path / 'libs'}\n{jar.coordinates} sha256:{jar.sha256}\n")
    monkeypatch.setenv("HUBFLOW_JAR_CACHE", str(tmp_path / "cache"))
    assert jvm_deps.install(lock_file, repo=(tmp_path / "repo").as_uri()) == ["tiny-1.0.jar"]
    assert (tmp_path / "libs" / "tiny-1.0.jar").read_bytes() == b"tiny"
    assert jvm_deps.check(lock_file) == []
    (tmp_path / "libs" / "tiny-1.0.jar").write_bytes(b"damaged")
    assert jvm_deps.check(lock_file) == [
        f"{jar.coordinates}: {tmp_path / 'libs' / 'tiny-1.0.jar'} does not have the locked SHA-256"
    ]
