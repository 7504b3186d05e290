"""How much of the emulator one client may hold, and for how long: the bounds every listener applies.

Read at use time (``limits.HANDSHAKE_TIMEOUT``), so a test may lower one for a run. Why each value:

* ``HANDSHAKE_TIMEOUT`` (60 s): from a connection's accept to the end of its handshake, whatever the
  stage - the TLS handshake, the WebSocket upgrade, the protocol headers and SASL, the client's AMQP
  ``open``; on the Kafka port, until SaslAuthenticate has succeeded. 60 s is what the service's AMQP
  stack gives a new transport (azure-amqp's ``AmqpConstants.DefaultTimeout``, used by its transport
  listener for the header, TLS and SASL) and asyncio's own TLS default; a client on this machine
  needs milliseconds, so only a client that connected and stalled is cut off.
* ``MIN_IDLE_TIMEOUT_MS`` (5,000 ms): the smallest ``idle-time-out`` a client's ``open`` may ask
  for; less is raised to it (the emulator sends empty frames at half of it, one 8-byte frame per
  2.5 s at most). 5,000 ms is the service's minimum (azure-amqp's ``MinimumHeartBeatIntervalMs``,
  below which the service refuses the open with ``amqp:not-allowed``), so no client that works
  against the service is affected.
* ``SEND_HIGH_WATER`` (4 MiB): unsent bytes above which a connection stops producing (consumer links
  pause, no more client frames are read) until the client has read some.
* ``SEND_BUFFER_LIMIT`` (16 MiB): unsent bytes past which the connection is dropped at once; nothing
  the emulator does should reach it (it stops at the high-water mark), it is the guard of last resort.
* ``SEND_STALL_TIMEOUT`` (60 s): how long a connection may wait on its send buffer without the client
  reading any of it before it is dropped (a client that asks for deliveries and never reads them).
  A client that reads slowly is not affected: any progress starts the wait again
  (:func:`wait_until_read`). 60 s is the SDK's own send and operation time-out; hubflow's connector
  closes a cached receiver after 30 s without use (``receiver_cache.IDLE_SECONDS``), before this.
* ``PUMP_ROUND_BYTES`` (1 MiB): what a consumer link writes in one go before it looks at the send
  buffer again, so that large events cannot overshoot the high-water mark by thousands of events.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

HANDSHAKE_TIMEOUT = 60.0
MIN_IDLE_TIMEOUT_MS = 5_000
SEND_HIGH_WATER = 4 * 1024 * 1024
SEND_BUFFER_LIMIT = 16 * 1024 * 1024
SEND_STALL_TIMEOUT = 60.0
PUMP_ROUND_BYTES = 1024 * 1024


async def wait_until_read(writer: Any) -> bool:
    """``await writer.drain()`` (an asyncio StreamWriter, or anything with its ``drain`` and
    ``transport``), giving up when the client has read nothing of the send buffer for
    ``SEND_STALL_TIMEOUT`` seconds: False then (the caller drops the connection), True once drained."""
    transport = writer.transport
    unsent = _unsent(transport)
    while True:
        try:
            await asyncio.wait_for(writer.drain(), SEND_STALL_TIMEOUT)
            return True
        except TimeoutError:
            now = _unsent(transport)
            if now >= unsent:
                return False
            unsent = now  # it reads, slowly: wait again


def _unsent(transport: Any) -> int:
    """Bytes written and not yet taken by the client: the transport's buffer, plus (on Linux) what
    the kernel still holds in the socket's send queue - the kernel asks for more only once a third
    of a send buffer of megabytes is free, so the transport's buffer alone moves in steps of seconds
    for a client that reads slowly."""
    if transport is None:
        return 0
    unsent = transport.get_write_buffer_size()
    sock = transport.get_extra_info("socket")
    if sock is not None and _OUTQ is not None:
        try:
            unsent += struct.unpack("i", fcntl.ioctl(sock.fileno(), _OUTQ, b"\0\0\0\0"))[0]
        except OSError:
            pass
    return unsent


try:  # Linux: SIOCOUTQ (the same number as TIOCOUTQ), unsent bytes in a TCP socket's send queue
    import fcntl
    import struct
    import termios

    _OUTQ: int | None = termios.TIOCOUTQ if sys.platform.startswith("linux") else None
except ImportError:  # Windows
    _OUTQ = None
