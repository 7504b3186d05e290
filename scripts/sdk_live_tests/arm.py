"""A stand-in for the few Azure Resource Manager calls of azure-eventhub's live-test fixtures.

Microsoft's tests/conftest.py makes an event hub per test with azure-mgmt-eventhub
(``event_hubs.create_or_update``), reads the namespace's key (``namespaces.list_keys``) and deletes
the hub afterwards, against ``EVENTHUB_RESOURCE_MANAGER_URL``. This serves those three over HTTPS
(the emulator's certificate) and applies them to a running emulator, so the fixtures run unmodified.
It wants a bearer token on every request, as ARM does; it does not check its signature (the
emulator's $cbs checks the same tokens on the AMQP side).
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from eventhubs_emulator import Emulator
from eventhubs_emulator.tls import ensure_certificates

_NAMESPACE = (
    r"/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\.EventHub/namespaces/(?P<ns>[^/]+)"
)
_HUB = re.compile(_NAMESPACE + r"/eventhubs/(?P<hub>[^/?]+)$", re.IGNORECASE)
_KEYS = re.compile(_NAMESPACE + r"/authorizationRules/(?P<rule>[^/]+)/listKeys$", re.IGNORECASE)


class FakeArm:
    """ARM's Event Hubs calls on ``https://localhost:<port>/``, creating and deleting hubs in ``emulator``.

    ``endpoint`` is the namespace's ``sb://`` address the returned connection string names.
    """

    def __init__(self, emulator: Emulator, tls_dir: str, endpoint: str) -> None:
        self.emulator = emulator
        self.endpoint = endpoint
        self.hubs_made = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        context = ensure_certificates(tls_dir).server_context()
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-arm", daemon=True)

    @property
    def url(self) -> str:
        """The resource manager's base URL (``EVENTHUB_RESOURCE_MANAGER_URL``)."""
        return f"https://localhost:{self._server.server_address[1]}/"

    def start(self) -> FakeArm:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def answer(self, method: str, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
        """The status and JSON body ARM gives for ``method path``."""
        path = path.split("?", 1)[0]
        hub = _HUB.match(path)
        if hub and method == "PUT":
            properties = json.loads(body or b"{}").get("properties", {})
            count = int(properties.get("partitionCount") or 4)
            self.emulator.add_hub(hub["hub"], count)
            self.hubs_made += 1
            return 200, {
                "id": path,
                "name": hub["hub"],
                "type": "Microsoft.EventHub/namespaces/eventhubs",
                "properties": {
                    "partitionCount": count,
                    "partitionIds": [str(i) for i in range(count)],
                    "status": "Active",
                },
            }
        if hub and method == "DELETE":
            return (200 if self.emulator.remove_hub(hub["hub"]) else 204), {}
        keys = _KEYS.match(path)
        if keys and method == "POST":
            config = self.emulator.config
            connection = f"Endpoint={self.endpoint}/;SharedAccessKeyName={config.key_name};"
            connection += f"SharedAccessKey={config.key}"
            return 200, {
                "primaryConnectionString": connection,
                "secondaryConnectionString": connection,
                "primaryKey": config.key,
                "secondaryKey": config.key,
                "keyName": config.key_name,
            }
        return 404, {"error": {"code": "NotFound", "message": f"{method} {path} is not served here"}}


def _handler(arm: FakeArm) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _reply(self, method: str) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if not (self.headers.get("Authorization") or "").startswith("Bearer "):
                status, answer = 401, {"error": {"code": "AuthenticationFailed", "message": "no token"}}
            else:
                try:
                    status, answer = arm.answer(method, self.path, body)
                except Exception as error:  # a bad request: ARM's error shape, never a dropped socket
                    status, answer = 400, {"error": {"code": "BadRequest", "message": str(error)}}
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_PUT(self) -> None:
            self._reply("PUT")

        def do_POST(self) -> None:
            self._reply("POST")

        def do_DELETE(self) -> None:
            self._reply("DELETE")

        def do_GET(self) -> None:
            self._reply("GET")

        def log_message(self, *_: Any) -> None:
            pass

    return Handler
