"""How much of the emulator one client may hold, and for how long: the bounds every listener applies.

Read at use time (``limits.MIN_IDLE_TIMEOUT_MS``), so a test may lower one for a run. Why each value:

* ``MIN_IDLE_TIMEOUT_MS`` (5,000 ms): the smallest ``idle-time-out`` a client's ``open`` may ask
  for; less is raised to it (the emulator sends empty frames at half of it, one 8-byte frame per
  2.5 s at most). 5,000 ms is the service's minimum (azure-amqp's ``MinimumHeartBeatIntervalMs``,
  below which the service refuses the open with ``amqp:not-allowed``), so no client that works
  against the service is affected.
"""

from __future__ import annotations

MIN_IDLE_TIMEOUT_MS = 5_000
