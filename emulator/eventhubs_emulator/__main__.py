"""Command line: ``python -m eventhubs_emulator --config Config.json [--port 5672] ...``.

Exit codes: 0 after a clean stop (Ctrl-C / SIGTERM), 1 when the server cannot start (e.g. the port is
in use), 2 for an invalid command line or config file.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from .admin import TOKEN_ENV, token_problem
from .config import DEFAULT_KEY, TIERS, ConfigError, load_config
from .server import Emulator, PortInUseError
from .stop_signals import StopSignals
from .tls import TlsSetupError


def build_parser() -> argparse.ArgumentParser:
    """The CLI's argument parser."""
    parser = argparse.ArgumentParser(
        prog="python -m eventhubs_emulator",
        description="Azure Event Hubs emulator speaking AMQP 1.0 (for the azure-eventhub SDK, no Docker).",
    )
    parser.add_argument("--config", required=True, help="Config.json in the official emulator's format")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=5672, help="AMQP port (default 5672; 0 picks a free one)")
    parser.add_argument("--data-dir", default=None, help="keep events here across restarts (default: memory)")
    parser.add_argument("--admin-port", type=int, default=None, help="admin/health HTTP port (0 = free port)")
    parser.add_argument(
        "--admin-host",
        default="127.0.0.1",
        help="address the admin API binds (default 127.0.0.1; beyond loopback it needs --admin-token)",
    )
    parser.add_argument(
        "--admin-token",
        default=None,
        help=f"bearer token every admin request but GET /health must carry (default: ${TOKEN_ENV})",
    )
    parser.add_argument(
        "--websocket-port",
        type=int,
        default=None,
        help="extra port for AMQP over WebSockets (0 = free port; overrides EmulatorExtras.WebSocketPort). "
        "The AMQP port serves WebSockets as well",
    )
    parser.add_argument(
        "--tls-port",
        type=int,
        default=None,
        help="extra port for AMQPS and WSS (0 = free port; overrides EmulatorExtras.TlsPort); "
        "needs --tls-dir",
    )
    parser.add_argument(
        "--tls-dir",
        default=None,
        help="folder of the TLS port's CA (ca.pem, which clients trust) and certificate, made there on "
        "first use (overrides EmulatorExtras.TlsDir)",
    )
    parser.add_argument(
        "--kafka-port",
        type=int,
        default=None,
        help="port of the Kafka endpoint (SASL PLAIN, user $ConnectionString, password the connection "
        "string; 0 = free port; overrides EmulatorExtras.KafkaPort)",
    )
    parser.add_argument(
        "--kafka-tls-port",
        type=int,
        default=None,
        help="port of the Kafka endpoint over TLS (SASL_SSL, as the service's 9093; 0 = free port; "
        "overrides EmulatorExtras.KafkaTlsPort); needs --tls-dir",
    )
    parser.add_argument(
        "--entra-id-issuer-dir",
        default=None,
        help="folder of a local Entra ID token issuer (python -m eventhubs_emulator.token_issuer) whose "
        "JWTs $cbs accepts, besides SAS tokens; its keys are made there on first use "
        "(overrides EmulatorExtras.EntraIdIssuerDir)",
    )
    parser.add_argument(
        "--tier",
        type=_tier,
        default=None,
        help="the namespace tier to play where the service differs by tier: Kafka compression (gzip) is "
        "taken on Premium and Dedicated only (default Standard; overrides EmulatorExtras.Tier)",
    )
    parser.add_argument("--log-level", default="WARNING", help="logging level (default WARNING)")
    return parser


def _tier(text: str) -> str:
    """A tier name as TIERS spells it, whatever the case the user typed."""
    for tier in TIERS:
        if tier.lower() == text.strip().lower():
            return tier
    raise argparse.ArgumentTypeError(f"{text!r} is not a tier: use one of {', '.join(TIERS)}")


def main(argv: list[str] | None = None) -> int:
    """Run the emulator until interrupted; return the exit code."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"eventhubs-emulator: invalid config: {exc}", file=sys.stderr)
        return 2
    if args.websocket_port is not None:
        if not 0 <= args.websocket_port <= 65535:
            print(
                "eventhubs-emulator: --websocket-port must be a port number 0-65535 "
                f"(got {args.websocket_port})",
                file=sys.stderr,
            )
            return 2
        config.websocket_port = args.websocket_port
    if args.tls_port is not None:
        if not 0 <= args.tls_port <= 65535:
            print(
                f"eventhubs-emulator: --tls-port must be a port number 0-65535 (got {args.tls_port})",
                file=sys.stderr,
            )
            return 2
        config.tls_port = args.tls_port
    if args.tls_dir is not None:
        config.tls_dir = args.tls_dir
    if args.tier is not None:
        config.tier = args.tier
    if args.kafka_port is not None:
        if not 0 <= args.kafka_port <= 65535:
            print(
                f"eventhubs-emulator: --kafka-port must be a port number 0-65535 (got {args.kafka_port})",
                file=sys.stderr,
            )
            return 2
        config.kafka_port = args.kafka_port
    if args.kafka_tls_port is not None:
        if not 0 <= args.kafka_tls_port <= 65535:
            print(
                "eventhubs-emulator: --kafka-tls-port must be a port number 0-65535 "
                f"(got {args.kafka_tls_port})",
                file=sys.stderr,
            )
            return 2
        config.kafka_tls_port = args.kafka_tls_port
    if config.tls_port is not None and not config.tls_dir:
        print(
            "eventhubs-emulator: --tls-port needs --tls-dir (where its CA and certificate are kept)",
            file=sys.stderr,
        )
        return 2
    if config.kafka_tls_port is not None and not config.tls_dir:
        print(
            "eventhubs-emulator: --kafka-tls-port needs --tls-dir (where its CA and certificate are kept)",
            file=sys.stderr,
        )
        return 2
    if args.entra_id_issuer_dir is not None:
        config.entra_id_issuer_dir = args.entra_id_issuer_dir
    if config.entra_id_issuer_dir:
        from .management import issuer_trust
        from .token_issuer import IssuerSetupError

        try:
            trusted = issuer_trust(config.entra_id_issuer_dir)
        except IssuerSetupError as exc:
            print(f"eventhubs-emulator: cannot use the Entra ID issuer: {exc}", file=sys.stderr)
            return 2
        print(
            f"Entra ID: accepting tokens of {trusted.issuer} (from {config.entra_id_issuer_dir})", flush=True
        )
    admin_token = args.admin_token or os.environ.get(TOKEN_ENV) or None
    problem = token_problem(args.admin_host, admin_token) if args.admin_port is not None else None
    if problem:
        print(f"eventhubs-emulator: {problem}", file=sys.stderr)
        return 2
    emulator = Emulator(
        config,
        host=args.host,
        port=args.port,
        data_dir=args.data_dir,
        admin_port=args.admin_port,
        admin_host=args.admin_host,
        admin_token=admin_token,
    )
    try:
        emulator.start()
    except PortInUseError as exc:
        print(f"eventhubs-emulator: cannot start: {exc.strerror}", file=sys.stderr)
        return 1
    except TlsSetupError as exc:
        print(f"eventhubs-emulator: cannot start the TLS port: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(
            f"eventhubs-emulator: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return 1
    stop = StopSignals()  # before the ready lines: a SIGTERM after them is a clean stop
    print(f"Event Hubs emulator listening on {args.host}:{emulator.port} (AMQP, no TLS)", flush=True)
    ws_ports = [emulator.port] + ([emulator.websocket_port] if emulator.websocket_port is not None else [])
    print(
        "AMQP over WebSockets: "
        + ", ".join(f"ws://{args.host}:{p}/$servicebus/websocket" for p in ws_ports)
        + f" (SDK: transport_type=TransportType.AmqpOverWebsocket, "
        f"custom_endpoint_address={emulator.websocket_endpoint()!r})",
        flush=True,
    )
    if emulator.tls_port is not None:
        print(
            f"AMQPS and WSS: {args.host}:{emulator.tls_port}, trusting {emulator.ca_certificate} (SDK: "
            f"custom_endpoint_address='sb://localhost:{emulator.tls_port}', "
            f"connection_verify={str(emulator.ca_certificate)!r}; no UseDevelopmentEmulator)",
            flush=True,
        )
    if emulator.kafka_bootstrap is not None:
        print(
            f"Kafka: bootstrap servers {emulator.kafka_bootstrap} (security.protocol=SASL_PLAINTEXT, "
            "sasl.mechanism=PLAIN, user $ConnectionString, password: the namespace connection string)",
            flush=True,
        )
    if emulator.kafka_tls_bootstrap is not None:
        print(
            f"Kafka over TLS: bootstrap servers {emulator.kafka_tls_bootstrap} (security.protocol=SASL_SSL, "
            f"trusting {emulator.ca_certificate}, sasl.mechanism=PLAIN, user $ConnectionString, password: "
            "the namespace connection string)",
            flush=True,
        )
    if emulator.admin_url:
        print(f"Admin API: {emulator.admin_url} (GET /health)", flush=True)
    host = emulator.client_host()
    for hub in config.hubs:
        print(f"{hub.name}: {config.printable_connection_string(host, emulator.port, hub.name)}", flush=True)
    if config.key != DEFAULT_KEY:
        print(f"(SharedAccessKey: the one in {args.config}, not printed)", flush=True)

    stop.wait()
    emulator.stop()
    print("Event Hubs emulator stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
