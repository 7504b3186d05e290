"""Which process wrote a document (status.json, the lease), and whether it still runs: judged here only.

A pid means something only in its *process space*: the host name, the pid namespace
(``/proc/self/ns/pid``: containers scaled from one compose service may share a host name, each with
its own pids) and the kernel's boot id (pids start over after a reboot). Within one space a pid is
reused once its process exits, so a process is its pid **and** its start time (field 22 of
``/proc/<pid>/stat``, clock ticks since boot). A document carries both (:func:`this_process`,
:func:`process_fields`); :func:`is_running` says True/False only in the writer's own space and None
("cannot judge from here": another space, or a document of an older hubflow without these fields),
and :func:`signal_process` signals only a process it verified. Linux only; elsewhere every judgement
is None (the lease's expiry decides). Imports neither Spark nor Airflow.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
from typing import Any

#: The fields of a document that name its writer's process space.
SPACE_KEYS = ("host", "pid_namespace", "boot_id")
#: The suffix of the field holding the start time of the process in field ``<key>``.
START_SUFFIX = "_start_ticks"


def this_host() -> str:
    """The host name written into status.json and the lease (shown in messages; part of the space)."""
    return socket.gethostname()


def this_space() -> dict[str, str | None]:
    """This process's space: host name, pid namespace, boot id (None where /proc cannot tell)."""
    return {"host": this_host(), "pid_namespace": _pid_namespace(), "boot_id": _boot_id()}


def start_ticks(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot); None when none runs or /proc is absent."""
    stat = _stat_fields(pid)
    if stat is None or len(stat) < 20:
        return None
    with contextlib.suppress(ValueError):
        return int(stat[19])
    return None


def process_fields(pid: int | None, key: str = "pid") -> dict[str, Any]:
    """``{key: pid, key_start_ticks: ...}`` for process ``pid`` of this space (e.g. a child)."""
    return {key: pid, key + START_SUFFIX: None if pid is None else start_ticks(pid)}


def this_process() -> dict[str, Any]:
    """The identity fields of this process: pid, its start time and its space."""
    return {**process_fields(os.getpid()), **this_space()}


def same_process_space(document: dict[str, Any]) -> bool | None:
    """Whether ``document`` was written in this process space; None when either side lacks a field."""
    here = this_space()
    if any(here[key] is None or document.get(key) is None for key in SPACE_KEYS):
        return None
    return all(document.get(key) == here[key] for key in SPACE_KEYS)


def is_running(document: dict[str, Any], key: str = "pid") -> bool | None:
    """Whether the process ``document`` names in ``key`` runs: in the writer's space, True iff a
    process with that pid and that start time runs (a zombie does not); elsewhere None."""
    pid, started = document.get(key), document.get(key + START_SUFFIX)
    if not isinstance(pid, int) or not isinstance(started, int) or not same_process_space(document):
        return None
    stat = _stat_fields(pid)
    if stat is None or len(stat) < 20 or stat[0] == "Z":
        return False
    return stat[19] == str(started)


def why_not_running(document: dict[str, Any], key: str = "pid") -> str:
    """Why :func:`is_running` is False, for messages: the pid is gone, or another process has it."""
    pid = document.get(key)
    if isinstance(pid, int) and start_ticks(pid) is not None:
        return f"pid {pid} on this host is another process now (the one that wrote it has exited)"
    return f"pid {pid} is not running on this host"


def why_cannot_judge(document: dict[str, Any]) -> str:
    """Why :func:`is_running` is None, for messages: another host, another space, or an old document."""
    if document.get("host") != this_host():
        return f"it runs on host {document.get('host')}, not this one"
    if None in this_space().values():
        return "this host cannot tell its process spaces apart (no /proc)"
    if same_process_space(document) is None:
        return "its document does not say which process space it ran in (an older hubflow wrote it)"
    return f"host {document.get('host')} here is another process space (another pid namespace or boot)"


def signal_process(document: dict[str, Any], sig: signal.Signals, key: str = "pid") -> bool:
    """Send ``sig`` to the process ``document`` names in ``key`` only if :func:`is_running` verifies
    it; whether it was sent. A pidfd is opened before the check, so a pid reused in between is
    never signalled."""
    pid = document.get(key)
    if not isinstance(pid, int) or same_process_space(document) is not True:
        return False
    try:
        handle: int | None = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    except (AttributeError, OSError):
        handle = None  # no pidfd here: check, then kill (a pid reused in between is unlikely)
    try:
        if is_running(document, key) is not True:
            return False
        if handle is None:
            os.kill(pid, sig)
        else:
            signal.pidfd_send_signal(handle, sig)
        return True
    except ProcessLookupError:
        return False
    finally:
        if handle is not None:
            os.close(handle)


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first), or None.

    The name is in parentheses and may itself hold spaces and ``)``; no later field does, so the
    split is at the *last* ``)``.
    """
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return None
    _, closing, rest = text.rpartition(")")
    return rest.split() if closing else None


def _pid_namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def _boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            return handle.read().strip() or None
    except OSError:
        return None


def same_writer(first: dict[str, Any], second: dict[str, Any]) -> bool:
    """Whether two documents name the same process: same pid and host, and the same start time and
    space where both say (a document of an older hubflow has neither)."""
    if (first.get("pid"), first.get("host")) != (second.get("pid"), second.get("host")):
        return False
    for key in ("pid" + START_SUFFIX, *SPACE_KEYS):
        if None not in (first.get(key), second.get(key)) and first[key] != second[key]:
            return False
    return True
