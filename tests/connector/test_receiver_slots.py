"""Receiver slots are host-wide: held across processes, and freed by the kernel when one dies."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from pyspark_eventhubs.errors import EventHubsReadError
from pyspark_eventhubs.options import parse_options
from pyspark_eventhubs.receiver_slots import ReceiverSlot

CONN = "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=r;SharedAccessKey=k;EntityPath=slots"


def test_a_slot_held_by_another_process_is_freed_when_that_process_dies() -> None:
    # Exclusive receivers: one slot per partition and consumer group.
    options = {"eventhubs.connectionString": CONN, "eventhubs.useExclusiveReceiver": "true"}
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import sys, time
                from pyspark_eventhubs.options import parse_options
                from pyspark_eventhubs.receiver_slots import ReceiverSlot
                slot = ReceiverSlot.acquire(parse_options({options!r}), "7", 10)
                print("held", flush=True)
                time.sleep(600)
                """
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(EventHubsReadError, match=r"all 1 receiver with eventhubs\.useExclusiveReceiver"):
            ReceiverSlot.acquire(parse_options(options), "7", 0.3)
        other_partition = ReceiverSlot.acquire(parse_options(options), "8", 0.3)
        other_partition.release()
    finally:
        holder.kill()
        holder.wait()
    slot = ReceiverSlot.acquire(parse_options(options), "7", 5)  # the kernel dropped the dead one's lock
    slot.release()
    slot.release()  # twice is harmless
