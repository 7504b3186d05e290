"""The Event Hubs arrival trigger (``schedule: events``) against the emulator and a real checkpoint:
it announces the events the job has neither committed nor been told of, each once, and a connection
it cannot use is said in the log while it keeps asking (no crash of the watcher)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from hubflow.registry import load_registry
from hubflow_plugins.triggers.event_arrivals import EventHubsArrivalTrigger
from tests.dags.helpers import landing_job, write_registry
from tests.jobs.helpers import EmulatedHub
from tests.support.emulator import start_test_emulator

pytestmark = pytest.mark.integration
POLL = 0.2


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    with start_test_emulator(tmp_path, arrivals=2) as emulator:
        conn = emulator.connection_string("arrivals")
        monkeypatch.setenv(
            "AIRFLOW_CONN_HUB_ARRIVALS", json.dumps({"conn_type": "generic", "password": conn})
        )
        yield EmulatedHub("arrivals", conn, 2)


def _registered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, conn_id: str) -> str:
    """Register the job ``arrivals`` (schedule: events) and return its checkpoint folder."""
    entry = {**landing_job(tmp_path, "arrivals", schedule="events(1 second)"), "eventhubs_conn_id": conn_id}
    registry = write_registry(tmp_path, [entry])
    monkeypatch.setenv("HUBFLOW_REGISTRY", str(registry))
    return load_registry(registry).job("arrivals").paths.checkpoint_location


def _commit_all(spark, hub: EmulatedHub, checkpoint: str) -> None:
    """What the job's run does to its checkpoint: read the hub availableNow and commit."""
    from pyspark_eventhubs import DefaultSource, EventPosition, register_data_source

    register_data_source(spark, DefaultSource)
    earliest = EventPosition.start_of_stream().to_json()
    options = {"eventhubs.connectionString": hub.connection_string, "eventhubs.startingPosition": earliest}
    query = (
        spark.readStream.format("eventhubs")
        .options(**options)
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert not query.isActive and query.exception() is None


def test_new_events_are_announced_once_and_what_the_job_committed_never(
    spark, hub: EmulatedHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkpoint = _registered(tmp_path, monkeypatch, "hub_arrivals")
    trigger = EventHubsArrivalTrigger(
        **EventHubsArrivalTrigger("arrivals", "hub_arrivals", POLL).serialize()[1]
    )

    async def scenario() -> tuple[list[dict], list[dict]]:
        events: asyncio.Queue = asyncio.Queue()

        async def watch() -> None:
            async for event in trigger.run():
                await events.put(event.payload)

        task = asyncio.ensure_future(watch())
        try:
            await asyncio.sleep(5 * POLL)
            assert events.empty(), "an empty hub: nothing to announce"
            await asyncio.to_thread(hub.send_numbered, 0, 4)
            first = await _announcements(events, 4)
            await asyncio.sleep(5 * POLL)
            assert events.empty(), "the same events are not announced twice"
            await asyncio.to_thread(hub.send_numbered, 4, 2)
            return first, await _announcements(events, 2)
        finally:
            task.cancel()

    first, second = asyncio.run(scenario())
    # The sender fills one partition after the other, so a poll may see them in two announcements;
    # either way each event is in exactly one.
    assert {payload["job"] for payload in first + second} == {"arrivals"}
    assert {payload["hub"] for payload in first + second} == {"arrivals"}
    assert _spans(first) == {"0": [(0, 2)], "1": [(0, 2)]}
    assert _spans(second) == {"0": [(2, 3)], "1": [(2, 3)]}

    # The job ran and committed everything: a watcher started afresh (no announcement known)
    # announces only what arrives after.
    _commit_all(spark, hub, checkpoint)
    restarted = EventHubsArrivalTrigger("arrivals", "hub_arrivals", POLL)

    async def after_commit() -> dict:
        agen = restarted.run()
        pending = await _silent(agen, 5 * POLL, "everything on the hub is committed: nothing to announce")
        await asyncio.to_thread(hub.send_numbered, 6, 1)
        event = await asyncio.wait_for(pending, 60)
        await agen.aclose()
        return event.payload

    payload = asyncio.run(after_commit())
    assert payload["new_events"] == 1 and payload["partitions"] == {"0": [3, 4]}


async def _silent(agen: Any, seconds: float, why: str) -> asyncio.Future:
    """The trigger's next event, pending: asserted not to have come within ``seconds``."""
    pending = asyncio.ensure_future(agen.__anext__())
    await asyncio.sleep(seconds)
    assert not pending.done(), why
    return pending


async def _announcements(events: asyncio.Queue, count: int) -> list[dict]:
    """The announcements that together cover ``count`` new events (more than ``count`` fails)."""
    payloads: list[dict] = []
    while sum(payload["new_events"] for payload in payloads) < count:
        payloads.append(await asyncio.wait_for(events.get(), 60))
    assert sum(payload["new_events"] for payload in payloads) == count, payloads
    return payloads


def _spans(payloads: list[dict]) -> dict[str, list[tuple[int, int]]]:
    """Per partition, the announced ranges merged where one ends where the next begins."""
    spans: dict[str, list[tuple[int, int]]] = {}
    for payload in payloads:
        for partition, (first, end) in payload["partitions"].items():
            merged = spans.setdefault(partition, [])
            if merged and merged[-1][1] == first:
                merged[-1] = (merged[-1][0], end)
            else:
                merged.append((first, end))
    return spans


def test_a_connection_it_cannot_use_is_named_in_the_log_and_the_watcher_keeps_asking(
    hub: EmulatedHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    _registered(tmp_path, monkeypatch, "hub_missing")
    monkeypatch.setenv(
        "AIRFLOW_CONN_HUB_MISSING", json.dumps({"conn_type": "generic", "password": "not-a-string"})
    )
    trigger = EventHubsArrivalTrigger("arrivals", "hub_missing", POLL)
    logged = ""

    def warnings_in(text: str) -> list[str]:
        return [line for line in text.splitlines() if "cannot tell whether new events arrived" in line]

    async def scenario() -> None:
        nonlocal logged
        pending = await _silent(
            trigger.run(), 10 * POLL, "a bad connection ends nothing: the watcher asks again"
        )
        # Said at every poll: wait for a second time (a poll on a loaded machine takes its time),
        # the watcher still asking meanwhile.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while len(warnings_in(logged)) < 2 and loop.time() < deadline and not pending.done():
            await asyncio.sleep(POLL)
            captured = capsys.readouterr()
            logged += captured.out + captured.err
        assert not pending.done(), "a bad connection ends nothing: the watcher asks again"
        pending.cancel()
        await asyncio.gather(pending, return_exceptions=True)

    asyncio.run(scenario())
    captured = capsys.readouterr()
    logged += captured.out + captured.err
    warnings = warnings_in(logged)
    assert len(warnings) >= 2, f"said at every poll until it is fixed; within 60 s it said: {warnings}"
    assert "'hub_missing'" in warnings[0] and "password field" in warnings[0], warnings[0]
    assert "not-a-string" not in logged
