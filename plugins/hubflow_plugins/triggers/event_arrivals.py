"""Event-driven runs: a watcher over a job's hub that announces new events as asset events.

Runs in the triggerer, as the watcher of a ``schedule: events`` job's asset (``<job>__events``):
every poll it asks the hub for each partition's last enqueued sequence number (one management
request per partition, on one client kept open across polls, in a thread: never in the triggerer's
event loop) and compares it with the job's committed
checkpoint and with what it announced last (kept in Airflow's asset state store, so a triggerer
restart does not announce the same events again). New events give one trigger event, which
Airflow turns into an asset event that queues the job's run; any number of arrivals before that
run starts make one run.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from hubflow.event_schedule import (
    EXTRA_HUB,
    EXTRA_JOB,
    EXTRA_NEW_EVENTS,
    EXTRA_PARTITIONS,
    new_arrivals,
)
from pyspark_eventhubs import DEFAULT_CONSUMER_GROUP

#: The asset state store key of the last announcement's positions.
ANNOUNCED_KEY = "announced"


class EventHubsArrivalTrigger(BaseEventTrigger):
    """Fires each time the hub of job ``job_name`` holds events the job has neither committed nor
    been told of.

    :param job_name: the registered job; its checkpoint is read from its config when the watcher
        starts (the registry is not read at DAG parse time).
    :param eventhubs_conn_id: the Airflow connection holding the hub's connection string.
    :param poll_interval: seconds between two questions to the hub.
    :param consumer_group: the consumer group the client opens with (management requests do not
        depend on it; it names the reader to the service).
    """

    def __init__(
        self,
        job_name: str,
        eventhubs_conn_id: str,
        poll_interval: float = 30.0,
        consumer_group: str = DEFAULT_CONSUMER_GROUP,
    ) -> None:
        super().__init__()
        self.job_name = job_name
        self.eventhubs_conn_id = eventhubs_conn_id
        self.poll_interval = float(poll_interval)
        self.consumer_group = consumer_group

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "hubflow_plugins.triggers.event_arrivals.EventHubsArrivalTrigger",
            {
                "job_name": self.job_name,
                "eventhubs_conn_id": self.eventhubs_conn_id,
                "poll_interval": self.poll_interval,
                "consumer_group": self.consumer_group,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        announced: dict[str, int] = await self._load_announced()
        hub_reader = _HubReader(self.job_name, self.eventhubs_conn_id, self.consumer_group)
        try:
            while True:
                try:
                    # The SDK's calls and the checkpoint's files block: in a thread, never in the
                    # triggerer's event loop, which every other trigger shares.
                    hub, latest, committed = await asyncio.to_thread(hub_reader.read)
                except Exception as exc:  # the registry, the connection or the hub: say so, ask again
                    self.log.warning(
                        "job %s: cannot tell whether new events arrived (Airflow connection %r): %s; asking "
                        "again in %g s",
                        self.job_name,
                        self.eventhubs_conn_id,
                        str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
                        self.poll_interval,
                    )
                    await asyncio.to_thread(hub_reader.close)
                else:
                    arrivals = new_arrivals(latest, committed, announced)
                    if arrivals:
                        count = sum(end - first for first, end in arrivals.values())
                        self.log.info(
                            "job %s: %d new events on hub %s: %s", self.job_name, count, hub, arrivals
                        )
                        yield TriggerEvent(
                            {
                                EXTRA_JOB: self.job_name,
                                EXTRA_HUB: hub,
                                EXTRA_NEW_EVENTS: count,
                                EXTRA_PARTITIONS: {p: list(span) for p, span in arrivals.items()},
                            }
                        )
                        announced = {**announced, **{p: end for p, (_, end) in arrivals.items()}}
                        await self._save_announced(announced)
                await asyncio.sleep(self.poll_interval)
        finally:
            await asyncio.to_thread(hub_reader.close)

    def _store(self) -> Any:
        """Airflow's state store of the watched asset; absent where no triggerer runs the trigger."""
        return getattr(self, "asset_state_store", None)

    async def _load_announced(self) -> dict[str, int]:
        store = self._store()
        stored = await store.aget(ANNOUNCED_KEY) if store is not None else None
        return {str(p): int(n) for p, n in (stored or {}).items()}

    async def _save_announced(self, announced: dict[str, int]) -> None:
        store = self._store()
        if store is not None:
            await store.aset(ANNOUNCED_KEY, announced)


class _HubReader:
    """What one poll reads: the hub's next sequence numbers and the job's committed ones. Keeps one
    client (and so one management link) open across polls; blocking, called in a thread."""

    def __init__(self, job_name: str, conn_id: str, consumer_group: str) -> None:
        self.job_name, self.conn_id, self.consumer_group = job_name, conn_id, consumer_group
        self.checkpoint: str | None = None
        self.client: Any = None

    def read(self) -> tuple[str, dict[str, int], dict[str, int]]:
        from pyspark_eventhubs.positions import latest_sequence_number

        if self.checkpoint is None:
            from hubflow.registry import load_registry

            self.checkpoint = load_registry().job(self.job_name).paths.checkpoint_location
        if self.client is None:
            from azure.eventhub import EventHubConsumerClient

            from hubflow_plugins.hooks.eventhubs import EventHubsHook

            secret = EventHubsHook(self.conn_id).connection_string()
            self.client = EventHubConsumerClient.from_connection_string(
                secret, consumer_group=self.consumer_group
            )
        hub = self.client.eventhub_name
        latest = {
            p: latest_sequence_number(self.client.get_partition_properties(p))
            for p in self.client.get_partition_ids()
        }
        return hub, latest, _committed(self.checkpoint, hub)

    def close(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            try:
                client.close()
            except Exception:  # closing a broken client; the next poll opens a new one
                pass


def _committed(checkpoint: str, hub: str) -> dict[str, int]:
    """The end of the job's newest committed batch per partition of ``hub`` (empty before its first)."""
    from hubflow.checkpoints.inspector import inspect_checkpoint
    from hubflow.supervision.health import committed_sequence_numbers

    report = inspect_checkpoint(checkpoint, stalled_after=timedelta(days=1))
    return committed_sequence_numbers(report.to_dict(), hub)
