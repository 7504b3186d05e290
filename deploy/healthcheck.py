"""Health checks of the docker-compose services, cheap enough to run every few seconds on 2 cores.

``airflow jobs check`` and ``celery inspect ping`` through Airflow's Celery app import all of
Airflow (seconds of CPU per check, every interval, in every container); these checks ask the same
questions with only psycopg2 or Celery imported:

    python healthcheck.py job TriggererJob       a running job of that type on this host has
                                                 heartbeaten within 60 s (what `airflow jobs check
                                                 --job-type ... --hostname $HOSTNAME` asks)
    python healthcheck.py celery                 the Celery worker celery@$HOSTNAME answers a ping
    python healthcheck.py wait-tcp HOST PORT S   waits up to S seconds until HOST:PORT accepts
                                                 connections (a one-shot readiness gate)

Exit 0 when healthy; otherwise 1 with the reason on stderr (``docker inspect`` shows it).
"""

from __future__ import annotations

import os
import socket
import sys
import time
from urllib.parse import unquote, urlsplit


def _database_url() -> str:
    url = os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    return url.replace("postgresql+psycopg2://", "postgresql://", 1)


def check_job(job_type: str, threshold_seconds: float = 60.0) -> str | None:
    """None when a running ``job_type`` on this host heartbeat recently; else the reason."""
    import psycopg2

    parts = urlsplit(_database_url())
    connection = psycopg2.connect(
        host=parts.hostname,
        port=parts.port or 5432,
        user=unquote(parts.username or ""),
        password=unquote(parts.password or ""),
        dbname=parts.path.lstrip("/"),
        connect_timeout=5,
    )
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT extract(epoch FROM now() - max(latest_heartbeat)) FROM job "
                "WHERE job_type = %s AND hostname = %s AND state = 'running'",
                (job_type, socket.getfqdn()),
            )
            (age,) = cursor.fetchone()
    finally:
        connection.close()
    if age is None:
        return f"no running {job_type} on {socket.getfqdn()}"
    if age > threshold_seconds:
        return f"{job_type} on {socket.getfqdn()} last heartbeat {age:.0f} s ago"
    return None


def check_celery() -> str | None:
    """None when this host's Celery worker answers a ping through the broker; else the reason."""
    from celery import Celery

    name = f"celery@{socket.gethostname()}"
    app = Celery(broker=os.environ["AIRFLOW__CELERY__BROKER_URL"])
    try:
        replies = app.control.ping(destination=[name], timeout=10)
    finally:
        app.close()
    if not any(name in reply for reply in replies):
        return f"{name} did not answer a ping within 10 s"
    return None


def wait_tcp(host: str, port: int, seconds: float) -> str | None:
    """None once ``host:port`` accepts a connection; the reason after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection((host, port), timeout=3).close()
            print(f"{host}:{port} accepts connections")
            return None
        except OSError as exc:
            if time.monotonic() >= deadline:
                return f"{host}:{port} did not accept connections within {seconds:.0f} s: {exc}"
            time.sleep(2)


def main(argv: list[str]) -> int:
    if argv[:1] == ["job"] and len(argv) == 2:
        problem = check_job(argv[1])
    elif argv == ["celery"]:
        problem = check_celery()
    elif argv[:1] == ["wait-tcp"] and len(argv) == 4:
        problem = wait_tcp(argv[1], int(argv[2]), float(argv[3]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    if problem:
        print(problem, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
