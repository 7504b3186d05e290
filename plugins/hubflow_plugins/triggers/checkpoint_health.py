"""Deferrable checkpoint health: the triggerer makes the sensor's judgment instead of a worker slot."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from hubflow.registry import MIN_HEARTBEAT_TIMEOUT
from hubflow.supervision.health import HealthCheck
from pyspark_eventhubs import DEFAULT_CONSUMER_GROUP


class CheckpointHealthTrigger(BaseTrigger):
    """Fires once the job's health is acceptable or failing: the same judgment as the sensor's poke
    (:func:`hubflow.supervision.health.judge`: idle, hold and lag included).

    The event payload is ``HealthResult.to_dict()``; the sensor turns a failing one into a failure.
    The first five arguments are those of triggers deferred before the judgment moved here (a
    checkpoint-only check), so such a trigger still loads after an upgrade.
    """

    def __init__(
        self,
        checkpoint: str,
        stalled_after_seconds: float,
        accept: list[str],
        fail_on: list[str],
        poke_interval: float = 30.0,
        *,
        status_dir: str | None = None,
        heartbeat_timeout_seconds: float = MIN_HEARTBEAT_TIMEOUT.total_seconds(),
        streaming: bool = False,
        allow_idle: bool = False,
        skip_when_held: bool = False,
        max_lag_events: int | None = None,
        eventhubs_conn_id: str | None = None,
        consumer_group: str = DEFAULT_CONSUMER_GROUP,
        storage_conn_id: str | None = None,
    ) -> None:
        super().__init__()
        self.check = HealthCheck(
            checkpoint=checkpoint,
            stalled_after_seconds=float(stalled_after_seconds),
            accept=tuple(accept),
            fail_on=tuple(fail_on),
            status_dir=status_dir,
            heartbeat_timeout_seconds=float(heartbeat_timeout_seconds),
            streaming=streaming,
            allow_idle=allow_idle,
            skip_when_held=skip_when_held,
            max_lag_events=max_lag_events,
        )
        self.poke_interval = float(poke_interval)
        self.eventhubs_conn_id = eventhubs_conn_id
        self.consumer_group = consumer_group
        self.storage_conn_id = storage_conn_id

    @property
    def stalled_after_seconds(self) -> float:
        return self.check.stalled_after_seconds

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "hubflow_plugins.triggers.checkpoint_health.CheckpointHealthTrigger",
            {
                **self.check.to_dict(),
                "poke_interval": self.poke_interval,
                "eventhubs_conn_id": self.eventhubs_conn_id,
                "consumer_group": self.consumer_group,
                "storage_conn_id": self.storage_conn_id,
            },
        )

    def _judge(self) -> Any:
        from hubflow.supervision.health import judge

        if self.storage_conn_id:  # the checkpoint and status folder are read through it
            from hubflow.storage.azure import use_access
            from hubflow_plugins.hooks.azure_storage import AzureStorageHook

            use_access(AzureStorageHook(self.storage_conn_id).access())
        latest = None
        if self.check.max_lag_events is not None and self.eventhubs_conn_id:
            from hubflow_plugins.hooks.eventhubs import EventHubsHook

            latest = EventHubsHook(self.eventhubs_conn_id).latest_sequence_numbers(self.consumer_group)
        return judge(self.check, latest)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            result = await asyncio.to_thread(self._judge)
            if result.done or result.failed:
                yield TriggerEvent(result.to_dict())
                return
            self.log.info(
                "checkpoint %s: %s (%s); checking again", self.check.checkpoint, result.verdict, result.reason
            )
            await asyncio.sleep(self.poke_interval)
