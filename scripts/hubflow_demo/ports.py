"""The demo's ports: the default one when it is free, else a free one (and a note saying so)."""

from __future__ import annotations

import socket


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def pick_port(wanted: int, what: str, notes: list[str]) -> int:
    """``wanted`` when free, else a free port (and a note saying so)."""
    if port_free(wanted):
        return wanted
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    notes.append(f"port {wanted} ({what}) is taken on this machine; using {port} instead")
    return port
