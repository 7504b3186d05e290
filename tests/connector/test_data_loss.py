"""Data loss decided on the driver, without a broker: the ledger that clamps starts and reports."""

from __future__ import annotations

import pytest

from pyspark_eventhubs.data_loss import DataLossLedger
from pyspark_eventhubs.errors import EventHubsDataLossError
from pyspark_eventhubs.options import parse_options

CONN = "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=r;SharedAccessKey=k;EntityPath=hub1"


def test_fail_on_data_loss_names_every_partition_and_range() -> None:
    ledger = DataLossLedger(parse_options({"eventhubs.connectionString": CONN}))
    assert ledger.clamp({"0": 5, "1": 7}, {"0": 5, "1": 2}) == {"0": 5, "1": 7}  # nothing lost
    with pytest.raises(EventHubsDataLossError) as info:
        ledger.clamp({"0": 5, "1": 7, "2": 0}, {"0": 9, "1": 2, "2": 30})
    message = str(info.value)
    assert "partition 0: events with sequence numbers [5, 9)" in message
    assert "partition 2: events with sequence numbers [0, 30)" in message
    assert "partition 1" not in message and "failOnDataLoss=false" in message


def test_lenient_ledger_moves_starts_up_and_reports_each_loss_once() -> None:
    ledger = DataLossLedger(parse_options({"eventhubs.connectionString": CONN, "failOnDataLoss": "false"}))
    assert ledger.report() is None
    assert ledger.clamp({"0": 5, "1": 7}, {"0": 9, "1": 2}) == {"0": 9, "1": 7}
    assert ledger.clamp({"0": 5}, {"0": 9}) == {"0": 9}  # partitions() sees the same start again
    # A batch planned before a restart whose range [20, 25) expired entirely (earliest is 40).
    assert ledger.clamp({"0": 20}, {"0": 40}, end={"0": 25}) == {"0": 40}
    assert ledger.report() == {"0": {"events": 4 + 5, "lastLostRange": [20, 25]}}
