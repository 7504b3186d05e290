"""Secrets stay out of plans, progress, checkpoints and errors; bad options fail at query start."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pyspark_eventhubs import protect_secrets
from tests.support.query_attempts import run_query, wait_available_now

from .conftest import Hub

pytestmark = pytest.mark.integration

KEY = "SAS_KEY_VALUE"  # the emulator's key, as in Microsoft's emulator docs


def _all_text(root: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in root.rglob("*") if p.is_file())


def test_key_never_appears_in_plans_progress_or_checkpoint(
    eh_spark: Any, hub: Hub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert KEY in hub.connection_string
    hub.send_per_partition({"0": 3, "1": 2})
    df = (
        eh_spark.readStream.format("eventhubs")
        .options(**hub.options(**{"eventhubs.startingPosition": '{"offset": "-1"}'}))
        .load()
    )
    df.explain(True)

    def start() -> Any:
        return (
            df.writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )

    query = run_query(start, lambda q: wait_available_now(q, 120))
    query.explain(True)
    shown = [
        capsys.readouterr().out,
        df._jdf.queryExecution().toString(),
        # What the SQL tab and the event log render for the micro-batches.
        query._jsq.streamingQuery().lastExecution().toString(),
        json.dumps([p.json for p in query.recentProgress]),
        str(query.status),
        _all_text(tmp_path / "ckpt"),
    ]
    assert sum(json.loads(p)["numInputRows"] for p in json.loads(shown[3])) == 5
    assert "eventhubs.connectionString=*********(redacted)" in shown[0]
    for text in shown:
        assert KEY not in text


def test_signature_connection_string_needs_protect_secrets(eh_spark: Any, hub: Hub) -> None:
    sas = hub.connection_string.replace("SharedAccessKeyName=RootManageSharedAccessKey;", "").replace(
        f"SharedAccessKey={KEY}", "SharedAccessSignature=SharedAccessSignature sr=a&sig=Zq9Sig&se=1&skn=x"
    )

    def plan() -> str:
        df = eh_spark.readStream.format("eventhubs").option("eventhubs.connectionString", sas).load()
        return df._jdf.queryExecution().toString()

    assert "Zq9Sig" in plan()  # Spark's default redaction does not match this form
    protect_secrets(eh_spark)
    try:
        assert "Zq9Sig" not in plan()
    finally:
        eh_spark.conf.unset("spark.sql.redaction.options.regex")


def test_broker_errors_name_namespace_and_hub_never_the_key(eh_spark: Any, hub: Hub) -> None:
    missing = hub.connection_string.replace("EntityPath=hub1", "EntityPath=nohub")
    with pytest.raises(Exception) as info:
        eh_spark.read.format("eventhubs").option("eventhubs.connectionString", missing).load().collect()
    message = str(info.value)
    namespace = hub.connection_string.split("sb://", 1)[1].split(";", 1)[0]
    assert f"{namespace}/nohub" in message
    assert KEY not in message


BAD_OPTIONS = [
    ("eventhubs.startingPosition", '{"seqNo": "x"}', "eventhubs.startingPosition"),
    ("eventhubs.startingPositions", "[]", "eventhubs.startingPositions"),
    ("maxEventsPerTrigger", "0", "maxEventsPerTrigger"),
    ("eventhubs.receiverTimeout", "sixty", "eventhubs.receiverTimeout"),
    ("eventhubs.prefetchCount", "9000", "eventhubs.prefetchCount"),
    ("failOnDataLoss", "sometimes", "failOnDataLoss"),
    ("eventhubs.consumergroupp", "cg", "eventhubs.consumergroupp"),
]


@pytest.mark.parametrize(("key", "value", "named"), BAD_OPTIONS)
def test_bad_option_fails_at_query_start_naming_it(eh_spark: Any, key: str, value: str, named: str) -> None:
    conn = f"Endpoint=sb://127.0.0.1:1/;SharedAccessKeyName=R;SharedAccessKey={KEY};EntityPath=h"
    for reader in (eh_spark.readStream, eh_spark.read):
        with pytest.raises(Exception) as info:
            reader.format("eventhubs").option("eventhubs.connectionString", conn).option(key, value).load()
        message = str(info.value)
        assert named.lower() in message.lower()
        assert KEY not in message
