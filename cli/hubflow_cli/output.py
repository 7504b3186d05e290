"""Everything the ``hubflow`` command prints has its secrets masked, whatever produced it.

The command prints text it does not own: a job's spark-submit command line with the registry's
``--conf`` values, the exception and outcome from a job's ``status.json``, the last lines of a driver
log, a pipeline module's own prints while ``hubflow check`` imports it, messages of storage and SDK
errors. Rather than trusting each of those places, :func:`masked_output` replaces ``sys.stdout`` and
``sys.stderr`` for the command's whole run with streams that mask every line
(:func:`hubflow.redaction.redact`: the grammar the status page and the driver log use) before it
reaches the terminal, and also every known secret value wherever it stands (:func:`mask_values`) - the
environment's secret-named variables from the start, and the variables a job's config names in its
``*_env`` keys once a command knows the job (:func:`mask_job_variables`).

Output is masked a whole line at a time (a secret split across two ``write`` calls is still seen
whole); a partial line goes out masked when the stream is flushed or closed.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TextIO

from hubflow.invocation import config_variables
from hubflow.redaction import redact, secret_values

#: Secret values masked wherever they stand in the output (the grammar masks the rest).
_KNOWN: set[str] = set()
#: A line longer than this goes out (masked) before its end is seen.
MAX_PENDING = 64 * 1024


def mask_values(values: Iterable[str]) -> None:
    """Mask each of ``values`` wherever it appears in the output from now on."""
    _KNOWN.update(value for value in values if value)


def mask_job_variables(config_path: str | os.PathLike[str]) -> None:
    """Mask the values of the environment variables the job config names (``connection_string_env``
    and every other ``*_env`` key): the secrets a run hands to the driver."""
    mask_values(secret_values(os.environ, config_variables(Path(config_path))))


class MaskedStream(io.TextIOBase):
    """A text stream that writes to ``target`` only masked lines."""

    def __init__(self, target: TextIO) -> None:
        super().__init__()
        self.target = target
        self._pending = ""

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.target, "encoding", "utf-8")

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return getattr(self.target, "errors", None)

    def isatty(self) -> bool:
        return self.target.isatty()

    def fileno(self) -> int:
        return self.target.fileno()

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self._pending += text
        if "\n" in self._pending:
            complete, _, self._pending = self._pending.rpartition("\n")
            self._emit(complete + "\n")
        if len(self._pending) > MAX_PENDING:
            self._emit(self._pending)
            self._pending = ""
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self._emit(self._pending)
            self._pending = ""
        self.target.flush()

    def close(self) -> None:
        self.flush()
        super().close()

    def _emit(self, text: str) -> None:
        self.target.write(redact(text, _KNOWN))


@contextlib.contextmanager
def masked_output() -> Iterator[None]:
    """Run the block with ``sys.stdout`` and ``sys.stderr`` masked; the environment's secret-named
    variables (``*_PASSWORD``, ``*_TOKEN``, ``*_CONNECTION_STRING``...) are masked from the start."""
    mask_values(secret_values(os.environ))
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = MaskedStream(saved[0]), MaskedStream(saved[1])
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        sys.stdout, sys.stderr = saved
