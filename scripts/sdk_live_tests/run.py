"""Run Microsoft's own live tests of azure-eventhub, unmodified, against the emulator (`make live-tests`).

The tests come from the sdist of the release requirements.lock pins (``sdist.lock``: its PyPI URL and
SHA-256; fetched once into .venv-livetests/sdist/, checked on every run). They run as the SDK's
maintainers run them against Azure, in .venv-livetests (scripts/livetests_env.sh), with the
environment their conftest.py reads pointed at what this process serves on free loopback ports:

- the emulator, with a TLS port (the SDK's credential clients insist on TLS and trust certifi's
  bundle only, so the run adds the emulator's CA to that venv's certifi bundle) and a random SAS key.
  The SDK always goes to port 5671 (AMQPS) and 443 (WSS) of the namespace's host, which the tests
  name without a port: so the run picks a free loopback address (127.x.y.z, any of which is this
  machine), which is the "namespace" and which its certificate names, with the emulator's TLS port on
  its 5671 and ``forward.Forwarder`` from its 443 (root only; without it the WebSocket cases fail);
- the emulator's local token issuer (Entra ID) with one service principal, which the stand-in
  ``devtools_testutils`` (shim/, azure-sdk-tools is not on PyPI) hands out as ``get_credential()``;
- ``arm.FakeArm``, the three Resource Manager calls the fixtures make (a hub per test, the keys).

Usage: ``python scripts/sdk_live_tests/run.py sync|async [pytest arguments]``. Prints the counts and
exits with pytest's code; the JUnit XML and the log are kept in the printed run folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import random
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
VENV = ROOT / ".venv-livetests"
AMQPS_PORT, WSS_PORT = 5671, 443  # where the SDK connects, whatever the test says
SUITES = {"sync": "tests/livetest/synctests", "async": "tests/livetest/asynctests"}
#: Per-test limit: a test that waits on an answer the emulator never gives fails instead of hanging.
TEST_TIMEOUT_SECONDS = 600
#: What a client may carry over from the machine into the tests' identity: cleared for the run.
IDENTITY_VARIABLES = (
    "AZURE_CLIENT_ID",
    "AZURE_CLIENT_SECRET",
    "AZURE_TENANT_ID",
    "AZURE_AUTHORITY_HOST",
    "AZURE_FEDERATED_TOKEN_FILE",
    "IDENTITY_ENDPOINT",
    "IDENTITY_HEADER",
    "MSI_ENDPOINT",
    "AZURE_STORAGE_ACCOUNT",
    "AZURE_SUBSCRIPTION_ID",
    "RECORD_AMQP_PROXY",
    "USE_FAULTINJECTOR",
)

sys.path.insert(0, str(ROOT / "emulator"))
sys.path.insert(0, str(HERE))


def free_loopback_address(attempts: int = 50) -> str:
    """A random 127.x.y.z whose AMQPS and WSS ports are free (Linux routes all of 127/8 to loopback)."""
    rng = random.SystemRandom()
    for _ in range(attempts):
        host = f"127.{rng.randrange(1, 255)}.{rng.randrange(0, 256)}.{rng.randrange(1, 255)}"
        try:
            for port in (AMQPS_PORT, WSS_PORT):
                socket.create_server((host, port)).close()
        except PermissionError:
            return host  # 443 needs root: the WebSocket cases will say so
        except OSError:
            continue
        return host
    raise SystemExit(f"no 127.x.y.z address with ports {AMQPS_PORT} and {WSS_PORT} free in {attempts} tries")


def locked_sdist() -> tuple[str, str]:
    """The (URL, SHA-256) in sdist.lock."""
    lines = [x for x in (HERE / "sdist.lock").read_text().splitlines() if x.strip() and not x.startswith("#")]
    url, digest = lines[0].split()
    return url, digest


def fetch_sdist() -> Path:
    """The locked sdist, downloaded once into the venv's cache; its SHA-256 checked every time."""
    url, digest = locked_sdist()
    target = VENV / "sdist" / url.rsplit("/", 1)[1]
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".part")
        with urllib.request.urlopen(url, timeout=120) as answer, partial.open("wb") as out:
            shutil.copyfileobj(answer, out)
        partial.replace(target)
    actual = hashlib.sha256(target.read_bytes()).hexdigest()
    if actual != digest:
        target.unlink()
        raise SystemExit(f"{target.name}: SHA-256 {actual} is not sdist.lock's {digest}; removed, run again")
    return target


def unpack_tests(sdist: Path, into: Path) -> Path:
    """The sdist's top folder (with tests/) unpacked under ``into``."""
    with tarfile.open(sdist) as archive:
        members = [m for m in archive.getmembers() if "/tests/" in m.name or m.name.endswith("/tests")]
        archive.extractall(into, members=members, filter="data")
    return into / sdist.name.removesuffix(".tar.gz")


@contextlib.contextmanager
def trusted(ca: Path) -> Iterator[Path]:
    """The emulator's CA in the live venv's certifi bundle while the run lasts (the SDK trusts that
    bundle only); under a lock, added and removed by itself, so runs side by side keep their own.
    Yields the bundle (``SSL_CERT_FILE`` for aiohttp, which azure.identity.aio uses, reads the
    system's default)."""
    where = subprocess.run(
        [str(VENV / "bin/python"), "-c", "import certifi; print(certifi.where())"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    bundle = Path(where)
    entry = b"\n# the hubflow emulator's CA (make live-tests)\n" + ca.read_bytes()
    with (VENV / ".certifi.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        bundle.write_bytes(bundle.read_bytes() + entry)
    try:
        yield bundle
    finally:
        with (VENV / ".certifi.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            bundle.write_bytes(bundle.read_bytes().replace(entry, b""))


def counts(junit: Path) -> dict[str, int]:
    """passed / failed / skipped from pytest's JUnit XML (errors counted as failed)."""
    suite = ET.parse(junit).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    assert suite is not None
    total, failed = int(suite.get("tests", 0)), int(suite.get("failures", 0)) + int(suite.get("errors", 0))
    skipped = int(suite.get("skipped", 0))
    return {"passed": total - failed - skipped, "failed": failed, "skipped": skipped}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in SUITES:
        print(f"usage: run.py {'|'.join(SUITES)} [pytest arguments]", file=sys.stderr)
        return 2
    suite, extra = argv[0], argv[1:]
    from arm import FakeArm
    from forward import Forwarder

    from eventhubs_emulator import Emulator, EmulatorConfig
    from eventhubs_emulator.token_issuer import RegisteredClient, TokenIssuer

    run_dir = Path(tempfile.mkdtemp(prefix=f"hubflow-livetests-{suite}-"))
    sdk = unpack_tests(fetch_sdist(), run_dir)
    tls_dir, issuer_dir = run_dir / "tls", run_dir / "token-issuer"
    client = RegisteredClient("hubflow-live-tests", client_secret=secrets.token_urlsafe(24))
    host = free_loopback_address()
    # The emulator first: it makes the CA and certificate (naming ``host``) the others serve too.
    config = EmulatorConfig.many_hubs(
        {"placeholder": 1},
        key=secrets.token_urlsafe(32),
        tls_port=AMQPS_PORT,
        tls_dir=str(tls_dir),
        entra_id_issuer_dir=str(issuer_dir),
    )
    emulator = Emulator(config, host=host, port=0).start()
    issuer = arm = forwarder = None
    stack = contextlib.ExitStack()
    try:
        try:
            forwarder = Forwarder(host, WSS_PORT, (host, AMQPS_PORT)).start()
        except OSError as error:
            print(f"hubflow: cannot listen on {host}:{WSS_PORT} ({error}): the WebSocket cases will fail")
        arm = FakeArm(emulator, str(tls_dir), f"sb://{host}").start()
        audiences = ("https://eventhubs.azure.net", "https://storage.azure.com", arm.url)
        issuer = TokenIssuer(issuer_dir, clients=[client], audiences=audiences, tls_dir=tls_dir).start()
        ca = tls_dir / "ca.pem"
        bundle = stack.enter_context(trusted(ca))
        env = {k: v for k, v in os.environ.items() if k not in IDENTITY_VARIABLES}
        env.update(
            {
                "PYTHONPATH": str(HERE / "shim"),
                "PYTHONUNBUFFERED": "1",  # the log shows each test as it ends
                "AZURE_SUBSCRIPTION_ID": str(uuid.uuid4()),
                "EVENTHUB_RESOURCE_GROUP": "hubflow-live-tests",
                "EVENTHUB_RESOURCE_MANAGER_URL": arm.url,
                # conftest.py's hostname is namespace + suffix
                "EVENT_HUB_NAMESPACE": host,
                "EVENT_HUB_ENDPOINT_SUFFIX": "",
                "AZURE_TENANT_ID": issuer.tenant_id,
                "AZURE_CLIENT_ID": client.client_id,
                "AZURE_CLIENT_SECRET": client.client_secret or "",
                "AZURE_AUTHORITY_HOST": issuer.base_url,
                "REQUESTS_CA_BUNDLE": str(ca),
                "SSL_CERT_FILE": str(bundle),
            }
        )
        junit = run_dir / "junit.xml"
        command = [
            str(VENV / "bin/python"),
            "-m",
            "pytest",
            SUITES[suite],
            "-p",
            "no:cacheprovider",
            "-v",
            "-rfE",
            f"--timeout={TEST_TIMEOUT_SECONDS}",
            f"--junitxml={junit}",
            *extra,
        ]
        print(f"hubflow: running azure-eventhub's {suite} live tests in {sdk} (log: {run_dir}/pytest.log)")
        with (run_dir / "pytest.log").open("w") as log:
            code = subprocess.run(command, cwd=sdk, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
        tail = (run_dir / "pytest.log").read_text(errors="replace").splitlines()
        summary = [x for x in tail if x.startswith(("FAILED", "ERROR")) or re.search(r" in [0-9.]+s", x)]
        print("\n".join(summary))
        if junit.exists():
            c = counts(junit)
            print(
                f"hubflow: {suite} live tests: {c['passed']} passed, {c['failed']} failed, "
                f"{c['skipped']} skipped ({arm.hubs_made} hubs made); run folder {run_dir}"
            )
        return code
    finally:
        stack.close()
        for server in (arm, issuer, forwarder, emulator):
            if server is not None:
                server.stop()


def _stop(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)  # subprocess.run kills pytest on the way out; the servers stop


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _stop)
    sys.exit(main(sys.argv[1:]))
