"""What the latency benchmarks measure the same way: Spark's per-batch durations of the batches in a
window, percentiles, a process's CPU time (``connector_latency.py``, ``hub_to_hub_latency.py``)."""

from __future__ import annotations

import statistics
from datetime import datetime
from typing import Any

# Spark's per-batch phases (``durationMs``) the latency benchmarks report.
DURATIONS = ("latestOffset", "walCommit", "addBatch", "commitOffsets", "triggerExecution")


def epoch_ms(iso: str) -> float:
    """Milliseconds since the epoch of a progress ``timestamp`` (ISO 8601, ``Z``)."""
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000


def percentile(sorted_values: list[float], q: float) -> float:
    """The ``q`` (0-1) quantile of sorted values, nearest rank."""
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


def measured_batches(progress: list[Any], from_ms: float) -> list[Any]:
    """The batches with rows that started at or after ``from_ms`` (epoch ms)."""
    return [p for p in progress if p["numInputRows"] > 0 and epoch_ms(p["timestamp"]) >= from_ms]


def median_durations(batches: list[Any], keys: tuple[str, ...] = DURATIONS) -> dict[str, float]:
    """The median ``durationMs`` of each of ``keys`` over ``batches`` (0 where a batch lacks one)."""
    return {key: statistics.median(p["durationMs"].get(key, 0) for p in batches) for key in keys}


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    import psutil

    times = psutil.Process(pid).cpu_times()
    return times.user + times.system
