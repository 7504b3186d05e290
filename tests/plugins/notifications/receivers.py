"""Real receivers on loopback for the alert tests: an SMTP server (aiosmtpd) and an HTTP server standing
in for a Slack incoming webhook (http.server in a thread). Both keep what they received."""

from __future__ import annotations

import json
import socket
import threading
from email import message_from_bytes, policy
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from aiosmtpd.controller import Controller


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class SmtpInbox:
    """Every mail the SMTP server accepted: (recipients, subject, body text)."""

    def __init__(self) -> None:
        self.mails: list[dict[str, Any]] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        mail = message_from_bytes(envelope.content, policy=policy.default)
        body = mail.get_body(preferencelist=("html", "plain"))
        self.mails.append(
            {
                "to": list(envelope.rcpt_tos),
                "from": envelope.mail_from,
                "subject": str(mail["subject"]),
                "body": body.get_content() if body is not None else "",
                "raw": envelope.content.decode("utf-8", "replace"),
            }
        )
        return "250 OK"


class SmtpServer:
    """aiosmtpd on 127.0.0.1 (a thread of its own); ``connection`` is the Airflow connection to it."""

    def __init__(self) -> None:
        self.inbox = SmtpInbox()
        self.port = free_port()
        self.controller = Controller(self.inbox, hostname="127.0.0.1", port=self.port)

    def __enter__(self) -> SmtpServer:
        self.controller.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.controller.stop()

    @property
    def connection(self) -> str:
        extra = {"disable_ssl": True, "disable_tls": True, "from_email": "hubflow@example.com", "timeout": 5}
        return json.dumps({"conn_type": "smtp", "host": "127.0.0.1", "port": self.port, "extra": extra})


class WebhookServer:
    """An HTTP server answering ``ok`` to every POST, as Slack's incoming webhooks do."""

    def __init__(self) -> None:
        self.posts: list[dict[str, Any]] = []
        posts = self.posts

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                posts.append({"path": self.path, "body": json.loads(self.rfile.read(length) or b"{}")})
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> WebhookServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)

    @property
    def connection(self) -> str:
        url = f"http://127.0.0.1:{self.server.server_address[1]}/services/T000/B000/XXXX"
        return json.dumps({"conn_type": "slackwebhook", "password": url})
