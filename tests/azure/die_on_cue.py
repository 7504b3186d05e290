"""Test helper: make this process SIGKILL itself at the N-th point of its Blob operations.

The storage is the real Blob API (Azurite); only the moment of death is arranged. A point is the
moment just before or just after one call of :class:`~hubflow.storage.blob_api.BlobObjects`
``copy``, ``create`` or ``delete`` (the operations that change storage). Code running in several
threads has other operations in flight when the process dies.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

from hubflow.storage.blob_api import BlobObjects

OPERATIONS = ("copy", "create", "delete")


def die_at(after: int, only: str | None = None) -> None:
    """SIGKILL this process at the ``after``-th point reached (only points named ``only``, e.g.
    ``"after-copy"``, when given)."""
    lock = threading.Lock()
    count = [0]

    def reached(point: str) -> None:
        if only is not None and point != only:
            return
        with lock:
            count[0] += 1
            if count[0] >= after:
                os.kill(os.getpid(), signal.SIGKILL)

    for name in OPERATIONS:
        original = getattr(BlobObjects, name)

        def operation(
            self: BlobObjects, *args: Any, _name: str = name, _original: Any = original, **kw: Any
        ) -> Any:
            reached(f"before-{_name}")
            result = _original(self, *args, **kw)
            reached(f"after-{_name}")
            return result

        setattr(BlobObjects, name, operation)
