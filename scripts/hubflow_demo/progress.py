"""The demo's narration (each step with the seconds since it began) and its step deadlines."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.markup import escape

from hubflow_demo.settings import DEADLINES, DEMO

console = Console(highlight=False, width=None if sys.stdout.isatty() else 120)
T0 = time.monotonic()


def say(message: str, style: str | None = None) -> None:
    """One step of the demo, with the seconds since it began."""
    text = f"[{time.monotonic() - T0:5.0f} s] {escape(message)}"
    console.print(f"[{style}]{text}[/]" if style else text)


class DemoFailed(SystemExit):
    """A step did not happen; the message says which and where to look."""

    def __init__(self, message: str) -> None:
        super().__init__(f"demo: {message}; logs in {DEMO / 'logs'} and {DEMO / 'data' / 'airflow' / 'logs'}")


def wait_for(check: Callable[[], Any], step: str, interval: float = 1.0) -> Any:
    """Poll ``check`` until it returns something true, and return that; a DemoFailed naming
    ``step`` after its deadline (:data:`DEADLINES`)."""
    seconds = DEADLINES[step]
    deadline = time.monotonic() + seconds
    while True:
        try:
            found = check()
            if found:
                return found
        except (OSError, ValueError):
            pass
        if time.monotonic() >= deadline:
            raise DemoFailed(f"step {step!r} did not happen within {seconds} s")
        time.sleep(interval)
