"""Hand alert messages (:mod:`hubflow.alerts`) to Airflow notifiers.

Each entry of a job's ``alerts.notifiers`` becomes a real ``BaseNotifier`` per message: the SMTP
provider's ``SmtpNotifier``, the Slack provider's ``SlackWebhookNotifier``, or any class named by
``custom.notifier`` (``module:Class``, built with ``custom.params`` plus ``subject`` and ``text``).
Their ``notify`` is called directly, not the notifier's ``__call__``: that would render the
message as a Jinja template, and a message quotes text hubflow does not control (an exception).
"""

from __future__ import annotations

import html
import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from hubflow.alerts import AlertMessage
from hubflow.registry import AlertNotifier


def build_notifier(config: AlertNotifier, message: AlertMessage) -> Any:
    """The notifier ``config`` describes, carrying ``message``."""
    if config.smtp is not None:
        from airflow.providers.smtp.notifications.smtp import SmtpNotifier

        smtp = config.smtp
        return SmtpNotifier(
            to=list(smtp.to),
            cc=list(smtp.cc) or None,
            from_email=smtp.from_email,
            smtp_conn_id=smtp.smtp_conn_id,
            subject=message.subject,
            html_content=email_html(message),
        )
    if config.slack_webhook is not None:
        from airflow.providers.slack.notifications.slack_webhook import SlackWebhookNotifier

        return SlackWebhookNotifier(
            slack_webhook_conn_id=config.slack_webhook.slack_webhook_conn_id,
            text=slack_text(message),
            unfurl_links=False,
            unfurl_media=False,
        )
    assert config.custom is not None
    module_name, _, class_name = config.custom.notifier.partition(":")
    notifier_class = getattr(importlib.import_module(module_name), class_name)
    return notifier_class(**config.custom.params, subject=message.subject, text=message.text)


def email_html(message: AlertMessage) -> str:
    """The message as an e-mail body: the plain text, escaped, and the status page as a link."""
    body = f"<pre>{html.escape(message.text)}</pre>"
    if message.link:
        link = html.escape(message.link, quote=True)
        body += f'<p><a href="{link}">Status page of {html.escape(message.job)}</a></p>'
    return body


def slack_text(message: AlertMessage) -> str:
    """The message as Slack mrkdwn: subject in bold, the rest as sent, ``&<>`` escaped as Slack asks."""

    def escape(text: str) -> str:
        return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")

    text = f"*{escape(message.subject)}*\n{escape(message.text)}"
    if message.link:
        text += f"\n<{message.link}|status page>"
    return text


@dataclass(frozen=True)
class Delivery:
    """One message to one notifier: delivered, or the error (text, for the task log)."""

    message: AlertMessage
    notifier: str
    error: str | None = None


def send_alerts(
    messages: Sequence[AlertMessage],
    notifiers: Sequence[AlertNotifier],
    context: Any,
    log: Callable[..., Any] | None = None,
) -> list[Delivery]:
    """Send every message to every notifier; a notifier that fails does not stop the others."""
    deliveries = []
    for message in messages:
        for index, config in enumerate(notifiers):
            label = f"notifiers[{index}] ({config.kind})"
            try:
                build_notifier(config, message).notify(context)
            except Exception as exc:  # a receiver down must not stop the others or the supervisor
                deliveries.append(Delivery(message, label, f"{type(exc).__name__}: {exc}"))
                if log:
                    log("alert %s of job %s not sent to %s: %s", message.kind, message.job, label, exc)
                continue
            deliveries.append(Delivery(message, label))
            if log:
                log("alert %s %s of job %s sent to %s", message.kind, message.status, message.job, label)
    return deliveries
