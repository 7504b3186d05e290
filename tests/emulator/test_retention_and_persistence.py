"""Retention (age and count), truncate, growing partitions, and persistence across restarts."""

from __future__ import annotations

import pytest
from azure.eventhub import EventData, EventHubProducerClient

from eventhubs_emulator import Emulator, EmulatorConfig
from tests.support.emulator import start_test_emulator
from tests.support.processes import wait_until

from .conftest import receive, send

pytestmark = pytest.mark.integration


def _props(conn: str, pid: str) -> dict:
    with EventHubProducerClient.from_connection_string(conn) as producer:
        return producer.get_partition_properties(pid)


def test_count_retention_advances_beginning_sequence_number():
    with start_test_emulator(hub1=1, retention_event_count=5) as emu:
        conn = emu.connection_string("hub1")
        send(conn, [f"r{i}" for i in range(12)], partition_id="0")
        emu.apply_retention()
        props = _props(conn, "0")
        assert props["beginning_sequence_number"] == 7
        assert props["last_enqueued_sequence_number"] == 11
        events = receive(conn, "0", expected=5, starting_position=0, inclusive=True, settle=0.3)
    assert [e.sequence_number for e in events] == [7, 8, 9, 10, 11]


def test_age_retention_empties_the_partition():
    cfg = EmulatorConfig.single_hub("hub1", partition_count=1, retention_minutes=0.01)  # 0.6 s
    with Emulator(cfg) as emu:
        conn = emu.connection_string("hub1")
        send(conn, ["a", "b", "c"], partition_id="0")
        # The emulator applies retention by itself every second; nothing here asks it to.
        wait_until(lambda: _props(conn, "0")["is_empty"], 30, "age retention to empty the partition")
        props = _props(conn, "0")
        assert props["beginning_sequence_number"] == 3
        assert props["last_enqueued_sequence_number"] == 2
        assert receive(conn, "0", expected=1, timeout=1.5) == []
        send(conn, ["d"], partition_id="0")
        # Numbering goes on after the emptied partition. Read from the properties, not by receiving
        # "d": on a busy machine "d" can be 0.6 s old, and gone, before a receiver gets to it.
        assert _props(conn, "0")["last_enqueued_sequence_number"] == 3


def test_truncate_drops_events_before_a_sequence_number(emulator):
    conn = emulator.connection_string("hub1")
    send(conn, [f"t{i}" for i in range(10)], partition_id="1")
    assert emulator.truncate("hub1", partition="1", before_sequence_number=4) == 4
    assert _props(conn, "1")["beginning_sequence_number"] == 4
    events = receive(conn, "1", expected=6, starting_position=0, inclusive=True, settle=0.3)
    assert [e.body_as_str() for e in events] == [f"t{i}" for i in range(4, 10)]


def test_add_partitions_at_run_time(emulator):
    conn = emulator.connection_string("hub1")
    assert emulator.add_partitions("hub1", 5) == ["0", "1", "2", "3", "4"]
    with EventHubProducerClient.from_connection_string(conn) as producer:
        assert producer.get_partition_ids() == ["0", "1", "2", "3", "4"]
        producer.send_event(EventData("in-new-partition"), partition_id="4")
    assert [e.body_as_str() for e in receive(conn, "4", expected=1)] == ["in-new-partition"]
    with pytest.raises(ValueError, match="only grow"):
        emulator.add_partitions("hub1", 2)


def test_events_survive_a_restart(tmp_path):
    with start_test_emulator(tmp_path, persist=True, hub1=2) as emu:
        conn = emu.connection_string("hub1")
        with EventHubProducerClient.from_connection_string(conn) as producer:
            for pid, bodies in (("0", [f"p{i}" for i in range(20)]), ("1", ["other"])):
                batch = producer.create_batch(partition_id=pid)
                for body in bodies:
                    batch.add(EventData(body))
                producer.send_batch(batch)
        # accepted events are already in the log file (flushed before the accepted disposition)
        assert (tmp_path / "eventhubs-data" / "hub1" / "0.log").read_bytes().count(b"p19") == 1
        before = receive(conn, "0", expected=20)
        emu.truncate("hub1", "0", before_sequence_number=2)
        emu.add_partitions("hub1", 3)
    with start_test_emulator(tmp_path, persist=True, hub1=2) as emu:
        conn = emu.connection_string("hub1")
        with EventHubProducerClient.from_connection_string(conn) as producer:
            props = producer.get_partition_properties("0")
            assert producer.get_partition_ids() == ["0", "1", "2"]
        assert props["beginning_sequence_number"] == 2
        assert props["last_enqueued_sequence_number"] == 19
        after = receive(conn, "0", expected=18, starting_position="-1", settle=0.3)
        assert [(e.sequence_number, e.offset, e.body_as_str()) for e in after] == [
            (e.sequence_number, e.offset, e.body_as_str()) for e in before[2:]
        ]
        send(conn, ["new"], partition_id="0")
        newest = receive(conn, "0", expected=1, starting_position=19)
        assert [(e.sequence_number, e.body_as_str()) for e in newest] == [(20, "new")]
        assert int(newest[0].offset) > int(after[-1].offset)


def test_torn_last_record_is_dropped_on_start(tmp_path):
    with start_test_emulator(tmp_path, persist=True, hub1=1) as emu:
        send(emu.connection_string("hub1"), ["a", "b"], partition_id="0")
    log_file = tmp_path / "eventhubs-data" / "hub1" / "0.log"
    data = log_file.read_bytes()
    log_file.write_bytes(data[:-3])  # a crash in the middle of the last write
    with start_test_emulator(tmp_path, persist=True, hub1=1) as emu:
        assert emu.partition_info("hub1", "0")["last_enqueued_sequence_number"] == 0
        conn = emu.connection_string("hub1")
        send(conn, ["c"], partition_id="0")
        events = receive(conn, "0", expected=2)
    assert [(e.sequence_number, e.body_as_str()) for e in events] == [(0, "a"), (1, "c")]
