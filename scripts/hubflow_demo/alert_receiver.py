"""The demo's stand-in for a Slack incoming webhook, printing each alert as it arrives."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from rich.markup import escape

from hubflow_demo.progress import console, say


class AlertReceiver:
    """The demo's stand-in for a Slack incoming webhook: an HTTP server in a thread of the demo that
    prints each message as it arrives and keeps them for the summary."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        messages = self.messages

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                try:
                    text = str(json.loads(body).get("text", ""))
                except ValueError:
                    text = body.decode("utf-8", "replace")
                messages.append(text)
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.end_headers()
                self.wfile.write(b"ok")
                say("alert received by the demo's webhook receiver:", "magenta")
                for line in text.splitlines():
                    console.print(f"           [magenta]| {escape(line)}[/]")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/services/T000/B000/hubflow-demo"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
