"""The demo's job configs and registry: orders from landing files on a schedule, the supervised
bronze stream from the hub, silver by bronze's Asset (the shipped ones point at docker-compose
volumes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from hubflow_demo.settings import ALERTS_CONN, BRONZE, EVENTS, ORDERS, SILVER, SUPERVISION


def job_configs(data: Path) -> tuple[dict[str, Any], ...]:
    """The configs of the orders, bronze and silver jobs, everything under ``data``."""
    common = {
        "checkpoint_root": str(data / "checkpoints"),
        "status_root": str(data / "status"),
        "spark_conf": {"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"},
    }
    once = {"trigger": {"availableNow": True}, **common}
    orders = {
        "name": ORDERS,
        **once,
        "sources": {
            "landing": {
                "kind": "files",
                "path": str(data / "landing" / "orders"),
                "format": "json",
                "schema": "order_id BIGINT, customer STRING, amount DOUBLE, created_at TIMESTAMP",
                "max_files_per_trigger": 2,
                "archive_dir": str(data / "archive"),
            }
        },
        "params": {"required_columns": ["order_id"]},
        "sinks": {
            "lake": {
                "kind": "delta",
                "output_path": str(data / "lake" / "orders"),
                "quarantine_path": str(data / "quarantine"),
            }
        },
    }
    bronze = {
        "name": BRONZE,
        "trigger": {"processingTime": "2 seconds"},
        **common,
        "sources": {
            "events": {
                "kind": "eventhubs",
                "connection_string_env": "HUBFLOW_EVENTHUBS_CONNECTION_STRING",
                "starting_position": "earliest",
                "max_events_per_trigger": EVENTS,
            }
        },
        "sinks": {
            "bronze": {
                "kind": "delta",
                "output_path": str(data / "lake" / BRONZE),
                "partition_by": ["ingest_date"],
            }
        },
    }
    silver = {
        "name": SILVER,
        **once,
        "sources": {"bronze": {"kind": "delta", "path": str(data / "lake" / BRONZE)}},
        "params": {
            "body_schema": "device STRING, reading BIGINT, celsius DOUBLE",
            "required_fields": ["device"],
        },
        "sinks": {
            "silver": {
                "kind": "delta",
                "output_path": str(data / "lake" / SILVER),
                "quarantine_path": str(data / "quarantine_silver"),
            }
        },
    }
    return orders, bronze, silver


def registry_jobs(configs: Path) -> list[dict[str, Any]]:
    """The registry's entries for the jobs whose configs are in ``configs``."""
    return [
        {
            "name": ORDERS,
            "application": "files_to_lake",
            "config": str(configs / f"{ORDERS}.yaml"),
            "mode": "scheduled",
            "schedule": "@hourly",
            "archive": True,
            "archive_retention": "30 days",
        },
        {
            "name": BRONZE,
            "application": "eventhubs_to_lake",
            "config": str(configs / f"{BRONZE}.yaml"),
            "mode": "streaming",
            **SUPERVISION,
            "health_check": "poke",  # a healthy stream answers at the first poke: no triggerer round trip
            "eventhubs_conn_id": "eventhubs_default",
            "alerts": {"notifiers": [{"slack_webhook": {"slack_webhook_conn_id": ALERTS_CONN}}]},
        },
        {
            "name": SILVER,
            "application": "bronze_to_silver",
            "config": str(configs / f"{SILVER}.yaml"),
            "mode": "scheduled",
            "schedule": f"asset({BRONZE})",
        },
    ]


def write_jobs(data: Path) -> Path:
    """The demo's job configs and registry (the shipped ones point at docker-compose volumes)."""
    configs = data / "configs"
    configs.mkdir(parents=True, exist_ok=True)
    for config in job_configs(data):
        (configs / f"{config['name']}.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    jobs = registry_jobs(configs)
    registry = data / "registry.yaml"
    header = (
        "# The demo's registry (scripts/demo.py). telemetry_bronze's supervision is tight on purpose:\n"
        "# one kill within healthy_after shows the restart backoff and a restart-loop alert.\n"
    )
    registry.write_text(header + yaml.safe_dump({"jobs": jobs}, sort_keys=False))
    return registry
