"""The real ``hubflow`` command prints no secret, wherever the secret comes from (issue #50 item 4):

* the registry's ``spark_conf`` (the spark-submit command line that ``run`` and ``backfill`` print);
* the environment: a variable the job's config names in a ``*_env`` key (here the pipeline's
  ``params.partner_token_env``) and a variable whose name says secret (``ORDERS_API_TOKEN``), both
  written bare, with no key a grammar could see;
* a job's ``status.json`` (its exception, printed by ``run`` and ``status``);
* the driver log (its last lines, printed by ``run`` and ``backfill`` after a failure), and what a
  pipeline module prints while ``hubflow check`` imports it.

Each secret is distinct, so a failure names where the leak came from.
"""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from hubflow.registry import load_registry
from hubflow.status import StatusFolder
from hubflow_cli.output import MaskedStream
from tests.cli.helpers import add_pipeline, hubflow, output, write_registry

CONF_KEY = "confKEY1x9Zq7Lm"
CONF_URL_PASSWORD = "confURLpw5Tn2Hx"
PARTNER_TOKEN = "partnerTOK3n8Vb"
API_TOKEN = "apiTOKEN4w6Rj1"
LOGGED_PASSWORD = "logPASSw0rd7Kc"
BEARER = "bearerT0k3nQw9Ez"
STATUS_KEY = "statusKEY2m5Pd"
SECRETS = {
    "registry spark_conf account key": CONF_KEY,
    "registry spark_conf URL password": CONF_URL_PASSWORD,
    "variable named by the config's *_env key": PARTNER_TOKEN,
    "secret-named variable": API_TOKEN,
    "password the pipeline prints": LOGGED_PASSWORD,
    "bearer token in the exception": BEARER,
    "account key in status.json": STATUS_KEY,
}
ENV = {"ORDERS_PARTNER": PARTNER_TOKEN, "ORDERS_API_TOKEN": API_TOKEN}

#: A pipeline that prints a secret when it is imported (by ``hubflow check`` and by the driver) and
#: whose function fails with an exception holding secrets, as a partner API's client might.
LEAKY_MODULE = f"""
import os
import sys

from pydantic import BaseModel

print(
    f"orders partner client: password={LOGGED_PASSWORD} token {{os.environ.get('ORDERS_PARTNER')}} "
    f"api {{os.environ.get('ORDERS_API_TOKEN')}}",
    file=sys.stderr,
    flush=True,
)


class Params(BaseModel):
    threshold: float
    partner_token_env: str


def transform(orders, params: Params):
    token = os.environ[params.partner_token_env]
    raise ConnectionError(
        f"partner API refused token {{token}} (api {{os.environ['ORDERS_API_TOKEN']}}); "
        "Authorization: Bearer {BEARER}"
    )
"""


def leaks(result: Any) -> list[str]:
    """Where each secret found in the command's output came from."""
    text = output(result)
    return [where for where, secret in SECRETS.items() if secret in text]


def leaky_job(tmp_path: Path, *, streaming: bool = False, **config: Any) -> tuple[Path, Path]:
    """The registry (with secrets in its ``spark_conf``) and pipelines folder of the job ``orders``."""
    if streaming:
        config["trigger"] = {"processingTime": "5 seconds"}
    entry = add_pipeline(
        tmp_path,
        "orders",
        LEAKY_MODULE,
        params={"threshold": 5, "partner_token_env": "ORDERS_PARTNER"},
        spark_conf={"spark.ui.enabled": False, "spark.sql.shuffle.partitions": 2},
        **config,
    )
    entry["spark_conf"] = {
        "spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net": CONF_KEY,
        "spark.hubflow.cache.url": f"redis://:{CONF_URL_PASSWORD}@cache:6379/0",
    }
    if streaming:
        entry.update(mode="streaming", schedule=None)
    return write_registry(tmp_path / "registry.yaml", [entry]), tmp_path / "pipelines"


def test_check_and_status_print_no_secret(tmp_path: Path) -> None:
    registry, pipelines = leaky_job(tmp_path)
    # A status.json as a driver that masks nothing wrote it (an older version, or text from the JVM).
    folder = StatusFolder(load_registry(registry).job("orders").paths.status_dir)
    folder.write_json(
        "status.json",
        {
            "job": "orders",
            "state": "failed",
            "started_at": datetime.now(UTC).isoformat(),
            "heartbeat": datetime.now(UTC).isoformat(),
            "exception": f"ConnectionError: token {PARTNER_TOKEN} refused; extras account_key={STATUS_KEY}",
        },
    )

    check = hubflow("check", "--registry", registry, pipelines=pipelines, env=ENV)
    assert check.returncode == 0, output(check)
    assert "orders partner client: password=*** token *** api ***" in output(check)

    status = hubflow("status", "orders", "--registry", registry, pipelines=pipelines, env=ENV)
    assert status.returncode == 0, output(status)
    assert "ConnectionError: token *** refused; extras account_key=***" in status.stdout, output(status)
    as_json = hubflow("status", "orders", "--json", "--registry", registry, pipelines=pipelines, env=ENV)
    assert as_json.returncode == 0, output(as_json)
    assert (
        json.loads(as_json.stdout)[0]["exception"]
        == "ConnectionError: token *** refused; extras account_key=***"
    )

    for result in (check, status, as_json):
        assert not leaks(result), f"{leaks(result)} leaked:\n{output(result)}"


def test_output_is_masked_a_whole_line_at_a_time() -> None:
    """A secret written in pieces (``print(a, b)`` writes each) is seen whole: lines are masked when
    complete, a partial line when flushed."""
    target = io.StringIO()
    stream = MaskedStream(target)
    stream.write("conn: SharedAccessKey=abc")
    stream.write("def;EntityPath=hub\nnext: password=")
    assert target.getvalue() == "conn: SharedAccessKey=***;EntityPath=hub\n"
    stream.write("hunter22")
    stream.flush()
    assert target.getvalue() == "conn: SharedAccessKey=***;EntityPath=hub\nnext: password=***"


def test_oncall_prints_no_secret(tmp_path: Path) -> None:
    """An on-call stop whose reason quotes a secret: the hold and the audit line it prints are masked
    (the reason's bare token only by the command, which knows the job's ``*_env`` variables)."""
    registry, pipelines = leaky_job(tmp_path, streaming=True)
    reason = f"partner rotated token {PARTNER_TOKEN}; old account_key={STATUS_KEY}"

    stop = hubflow(
        "oncall", "orders", "stop", "--reason", reason, "--registry", registry, pipelines=pipelines, env=ENV
    )

    assert stop.returncode == 0, output(stop)
    assert "partner rotated token ***; old account_key=***" in stop.stdout, output(stop)
    assert not leaks(stop), f"{leaks(stop)} leaked:\n{output(stop)}"


@pytest.mark.integration
def test_backfill_prints_no_secret_from_its_command_line_or_log(tmp_path: Path) -> None:
    """A backfill the driver refuses (a files pipeline without ``interval_folder``): spark-submit runs
    (its command line is printed) and exits 2, so the log's last lines are printed too."""
    registry, pipelines = leaky_job(tmp_path)

    backfill = hubflow(
        "backfill",
        "orders",
        "--start",
        "2026-11-25T10:00:00Z",
        "--end",
        "2026-11-25T11:00:00Z",
        "--registry",
        registry,
        pipelines=pipelines,
        env=ENV,
        timeout=300,
    )

    assert backfill.returncode == 2, output(backfill)
    assert "--conf spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net=***" in backfill.stdout
    assert "--conf spark.hubflow.cache.url=redis://:***@cache:6379/0" in backfill.stdout
    assert "the last lines of" in backfill.stdout, output(backfill)
    assert "orders partner client: password=*** token *** api ***" in backfill.stdout, output(backfill)
    assert not leaks(backfill), f"{leaks(backfill)} leaked:\n{output(backfill)}"
    log = (tmp_path / "status" / "orders" / "backfill.log").read_text()
    assert PARTNER_TOKEN in log, "the secret did reach the log: the command masked it"


@pytest.mark.integration
def test_run_prints_no_secret_from_its_command_line_status_or_log(tmp_path: Path) -> None:
    """A run whose pipeline fails: the command line, the progress line's error (status.json), the
    reason (status.json's outcome) and the driver log's last lines are all printed, all masked."""
    registry, pipelines = leaky_job(tmp_path)

    run = hubflow(
        "run",
        "orders",
        "--once",
        "--every",
        "1",
        "--registry",
        registry,
        pipelines=pipelines,
        env=ENV,
        timeout=540,
    )

    assert run.returncode == 1, output(run)
    assert "--conf spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net=***" in run.stdout
    reason = [line for line in run.stdout.splitlines() if line.startswith("reason: ")]
    assert reason and "partner API refused token *** (api ***); Authorization: Bearer ***" in reason[0], (
        output(run)
    )
    tail = run.stdout.partition("--- the last lines of")[2]
    assert "ConnectionError: partner API refused token *** (api ***)" in tail, output(run)
    assert not leaks(run), f"{leaks(run)} leaked:\n{output(run)}"
    log = (tmp_path / "status" / "orders" / "driver.log").read_text()
    assert PARTNER_TOKEN in log, "the secret did reach the log: the command masked it"
