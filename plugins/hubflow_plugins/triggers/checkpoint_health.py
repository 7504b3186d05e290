"""Deferrable checkpoint health: the triggerer polls the checkpoint instead of a worker slot."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent


class CheckpointHealthTrigger(BaseTrigger):
    """Fires once the checkpoint's verdict is acceptable or failing (see ``hubflow_plugins.core.health``).

    The event payload is ``HealthResult.to_dict()``; the sensor turns a failing one into a failure.
    """

    def __init__(
        self,
        checkpoint: str,
        stalled_after_seconds: float,
        accept: list[str],
        fail_on: list[str],
        poke_interval: float = 30.0,
    ) -> None:
        super().__init__()
        self.checkpoint = checkpoint
        self.stalled_after_seconds = stalled_after_seconds
        self.accept = list(accept)
        self.fail_on = list(fail_on)
        self.poke_interval = poke_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "hubflow_plugins.triggers.checkpoint_health.CheckpointHealthTrigger",
            {
                "checkpoint": self.checkpoint,
                "stalled_after_seconds": self.stalled_after_seconds,
                "accept": self.accept,
                "fail_on": self.fail_on,
                "poke_interval": self.poke_interval,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from hubflow_plugins.core.health import check_health

        while True:
            result = await asyncio.to_thread(
                check_health,
                self.checkpoint,
                stalled_after=timedelta(seconds=self.stalled_after_seconds),
                accept=tuple(self.accept),
                fail_on=tuple(self.fail_on),
            )
            if result.done or result.failed:
                yield TriggerEvent(result.to_dict())
                return
            self.log.info(
                "checkpoint %s: %s (%s); checking again", self.checkpoint, result.verdict, result.reason
            )
            await asyncio.sleep(self.poke_interval)
