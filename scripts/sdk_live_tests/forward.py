"""A TCP forwarder: the SDK's WebSocket transport goes to port 443 of the namespace's host (no way to
name another port without a custom endpoint, which the unmodified tests do not pass), so the live-test
run forwards ``host:443`` to the emulator's TLS port, which serves WSS beside AMQPS."""

from __future__ import annotations

import socket
import threading


class Forwarder:
    """Accepts on ``(host, port)`` and copies bytes both ways to ``target``, a thread per direction."""

    def __init__(self, host: str, port: int, target: tuple[str, int]) -> None:
        self.target = target
        self._listener = socket.create_server((host, port))
        self._thread = threading.Thread(target=self._accept, name="forwarder", daemon=True)

    def start(self) -> Forwarder:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed by stop()
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_copy, args=(a, b), daemon=True).start()


def _copy(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for s in (source, sink):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
