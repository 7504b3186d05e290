"""``python -m eventhubs_emulator.token_issuer``: run the local Entra ID until interrupted.

Prints where clients find it (the first three lines are the issuer and App Service's managed-identity
variables; the header's secret is named by its file, never printed). Client secrets come from the
``--clients`` file, never from the command line.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..stop_signals import StopSignals
from .authority import DEFAULT_AUDIENCES, ClientsFileError, RegisteredClient, load_clients
from .keys import DEFAULT_LIFETIME, IDENTITY_HEADER_FILE, IssuerSetupError
from .server import TokenIssuer


def main(argv: list[str] | None = None) -> int:
    """Run the issuer until SIGINT/SIGTERM."""
    parser = argparse.ArgumentParser(
        prog="python -m eventhubs_emulator.token_issuer",
        description="Local Entra ID for the emulator and Azurite: managed-identity endpoints (App Service, "
        "IMDS) and an authority for service principals and workload identities.",
    )
    parser.add_argument("--dir", required=True, help="folder of the issuer's keys (made on first use)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port (default 0: a free one)")
    parser.add_argument(
        "--lifetime", type=float, default=DEFAULT_LIFETIME, help="token lifetime in seconds (default 3600)"
    )
    parser.add_argument(
        "--clients",
        help='JSON file of registered clients: {"clients": [{"client_id": ..., "client_secret": ...}, '
        '{"client_id": ..., "federated_subject": ...}, {"client_id": ..., "managed": true}]}',
    )
    parser.add_argument(
        "--audience",
        action="append",
        help=f"a resource tokens may be asked for (repeat; default {' and '.join(DEFAULT_AUDIENCES)})",
    )
    parser.add_argument(
        "--https",
        action="store_true",
        help="serve HTTPS with the emulator's CA (made in --tls-dir; MSAL needs an https authority)",
    )
    parser.add_argument("--tls-dir", help="folder of the CA and server certificate (default: <dir>/tls)")
    args = parser.parse_args(argv)
    if args.lifetime < 10:
        print("token-issuer: --lifetime must be at least 10 seconds", file=sys.stderr)
        return 2
    clients: list[RegisteredClient] = []
    try:
        if args.clients:
            clients = load_clients(args.clients)
        tls_dir = (args.tls_dir or str(Path(args.dir) / "tls")) if args.https else None
        issuer = TokenIssuer(
            args.dir,
            host=args.host,
            port=args.port,
            lifetime=args.lifetime,
            clients=clients,
            audiences=args.audience,
            tls_dir=tls_dir,
        ).start()
    except (IssuerSetupError, ClientsFileError) as exc:
        print(f"token-issuer: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(
            f"token-issuer: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr
        )
        return 1
    header_file = Path(args.dir) / IDENTITY_HEADER_FILE
    stop = StopSignals()  # before the ready lines: a SIGTERM after them is a clean stop
    print(f"Token issuer {issuer.keys.issuer} listening on {issuer.url}", flush=True)
    print(f"export IDENTITY_ENDPOINT={issuer.url}", flush=True)
    print(f'export IDENTITY_HEADER="$(cat {header_file})"', flush=True)
    print(f"Emulator: --entra-id-issuer-dir {args.dir}", flush=True)
    authority = f"AZURE_AUTHORITY_HOST={issuer.base_url} AZURE_TENANT_ID={issuer.tenant_id}"
    print(f"Authority: export {authority}", flush=True)
    print(f"IMDS: export AZURE_POD_IDENTITY_AUTHORITY_HOST={issuer.base_url}", flush=True)
    print(f"hadoop-azure: fs.azure.account.oauth2.msi.endpoint={issuer.imds_endpoint}", flush=True)
    if tls_dir:
        print(f"CA: export REQUESTS_CA_BUNDLE={Path(tls_dir) / 'ca.pem'}", flush=True)
    print(f"Registered clients: {', '.join(c.client_id for c in clients) or 'none'}", flush=True)
    stop.wait()
    issuer.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
