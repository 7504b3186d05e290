"""A stream's throughput with Entra ID (Azure AD) tokens against the same stream with a SAS key.

One emulator process (``python -m eventhubs_emulator``) with a TLS port that trusts a local token
issuer (``eventhubs_emulator.token_issuer``, in this process: a thread serving App Service's
managed-identity endpoint). Hub ``bench`` holds ``--events`` events in each of 2 partitions
(``--size``-byte bodies). Each repetition runs the same ``availableNow`` stream twice, each from a
fresh checkpoint into the ``noop`` sink, ``maxEventsPerTrigger`` = ``--per-trigger``, both through
the TLS port (``eventhubs.customEndpointAddress`` + ``eventhubs.connectionVerify``):

* **SAS**: ``eventhubs.connectionString`` with the namespace key;
* **Entra ID**: ``eventhubs.useAadAuth=true``, ``DefaultAzureCredential`` through the issuer's
  managed-identity variables (in the driver and in the source's Python workers), tokens of
  ``--lifetime`` seconds, so they are renewed during the run (the issuer counts the tokens it hands
  out; the run must outlive one lifetime for the comparison to include renewals).

The two sides alternate which goes first; a warm-up pair runs before (not timed). Printed: each
side's events/s (the batches' input rows / query wall time) as median (min-max), the per-repetition ratio
Entra ID / SAS, and the tokens issued per Entra ID run.

Usage: ``.venv/bin/python bench/entra_id_throughput.py [--events 500000] [--size 100]
[--per-trigger 25000] [--lifetime 35] [--reps 3]``
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import connector_spark, spread

from eventhubs_emulator import EmulatorConfig
from eventhubs_emulator.launcher import start_emulator_process
from eventhubs_emulator.token_issuer import TokenIssuer
from pyspark_eventhubs import EventPosition
from pyspark_eventhubs.registration import registered_environment

PARTITIONS = 2


def free_port() -> int:
    """A port free now (the emulator binds it a moment later)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def fill(conn: str, events: int, size: int) -> None:
    """Send ``events`` events to each partition in full batches."""
    from azure.eventhub import EventData, EventHubProducerClient

    body = b"x" * size
    with EventHubProducerClient.from_connection_string(conn) as producer:
        for partition in map(str, range(PARTITIONS)):
            sent = 0
            while sent < events:
                batch = producer.create_batch(partition_id=partition)
                while sent < events:
                    try:
                        batch.add(EventData(body))
                    except ValueError:
                        break
                    sent += 1
                producer.send_batch(batch)


def stream(spark: Any, options: dict[str, str], checkpoint: Path, expected: int) -> float:
    """events/s of one availableNow run over the whole backlog into noop (rows: the batches' input)."""
    df = spark.readStream.format("eventhubs").options(**options).load().select("body", "sequenceNumber")
    started = time.perf_counter()
    query = (
        df.writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    if query.exception():
        raise RuntimeError(f"the stream failed: {query.exception()}")
    rows = sum(int(p["numInputRows"]) for p in query.recentProgress)
    if rows != expected:
        raise RuntimeError(f"the stream read {rows} events, expected {expected}")
    return rows / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=500_000, help="events per partition")
    parser.add_argument("--size", type=int, default=100, help="body bytes")
    parser.add_argument("--per-trigger", type=int, default=25_000, help="maxEventsPerTrigger")
    parser.add_argument("--lifetime", type=float, default=35.0, help="token lifetime, s (>= 34)")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="entra-bench-") as tmp:
        work = Path(tmp)
        issuer = TokenIssuer(work / "issuer", lifetime=args.lifetime).start()
        tls_port = free_port()
        config = EmulatorConfig.many_hubs(
            {"bench": PARTITIONS},
            tls_port=tls_port,
            tls_dir=str(work / "tls"),
            entra_id_issuer_dir=str(work / "issuer"),
        )
        emulator = start_emulator_process(config, work)
        try:
            fill(emulator.connection_strings["bench"], args.events, args.size)
            total = args.events * PARTITIONS
            common = {
                "eventhubs.customEndpointAddress": f"sb://localhost:{tls_port}",
                "eventhubs.connectionVerify": str(work / "tls" / "ca.pem"),
                "eventhubs.startingPosition": EventPosition.start_of_stream().to_json(),
                "maxEventsPerTrigger": str(args.per_trigger),
            }
            sides = {
                "SAS": {
                    **common,
                    "eventhubs.connectionString": config.connection_string(
                        "localhost", tls_port, "bench"
                    ).replace(";UseDevelopmentEmulator=true", ""),
                },
                "Entra ID": {
                    **common,
                    "eventhubs.useAadAuth": "true",
                    "eventhubs.fullyQualifiedNamespace": "localhost",
                    "eventhubs.name": "bench",
                },
            }
            spark = connector_spark("local[2]")
            shared = registered_environment(spark, "eventhubs")
            for name, value in issuer.environment().items():
                os.environ[name] = value
                shared.put(name, value)
            print(
                f"{total:,} events of {args.size} B in {PARTITIONS} partitions, maxEventsPerTrigger "
                f"{args.per_trigger:,}, tokens of {args.lifetime:.0f} s, {args.reps} repetitions",
                flush=True,
            )
            runs = 0

            def run(side: str) -> tuple[float, int]:
                nonlocal runs
                runs += 1
                before = issuer.tokens_issued
                rate = stream(spark, sides[side], work / f"ckpt-{runs}", total)
                return rate, issuer.tokens_issued - before

            for side in sides:  # warm-up: Spark, Python workers, first connections
                run(side)
            rates: dict[str, list[float]] = {side: [] for side in sides}
            tokens: list[int] = []
            for rep in range(args.reps):
                order = list(sides) if rep % 2 == 0 else list(reversed(sides))
                for side in order:
                    rate, issued = run(side)
                    rates[side].append(rate)
                    if side == "Entra ID":
                        tokens.append(issued)
                    print(f"rep {rep + 1} {side}: {rate:,.0f} events/s ({issued} tokens issued)", flush=True)
            ratios = [a / s for a, s in zip(rates["Entra ID"], rates["SAS"], strict=True)]
            print(f"SAS events/s:      {spread(rates['SAS'])}")
            print(f"Entra ID events/s: {spread(rates['Entra ID'])}")
            print(
                f"Entra ID / SAS:    {spread(ratios, '{:.2f}')} (per repetition: "
                + ", ".join(f"{r:.2f}" for r in ratios)
                + ")"
            )
            print(f"tokens issued per Entra ID run: {statistics.median(tokens):.0f} (min {min(tokens)})")
            spark.stop()
        finally:
            emulator.stop()
            issuer.stop()


if __name__ == "__main__":
    main()
