"""SIGINT and SIGTERM for the command-line servers (the emulator, the token issuer): a clean stop.

The handlers only append to a list, which takes no lock: a Python signal handler runs on the main
thread between two bytecodes, possibly while that thread holds the lock a ``threading.Event`` would
take to set itself, which hangs the process on SIGTERM (Python's signal docs warn of it).
"""

from __future__ import annotations

import signal
import time

#: How often the main thread looks for a signal while the servers run on their own threads.
POLL_SECONDS = 0.1


class StopSignals:
    """Installed at construction (on the main thread), before the server says it is ready: a
    SIGTERM sent once the ready lines are read always stops it cleanly."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.received: list[int] = []
        for signum in self.SIGNALS:
            signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.received.append(signum)

    def wait(self) -> int:
        """Block until SIGINT or SIGTERM arrives; the signal's number."""
        while not self.received:
            time.sleep(POLL_SECONDS)
        return self.received[0]
