"""The Event Hubs AMQP wire names the connector reads and sends, in one place.

Event Hubs puts an event's broker-assigned fields into its message annotations under ``x-opt-*``
symbols, and answers runtime-information requests on the ``$management`` node with a map of
fixed keys. Every connector module spells these names through this module (as ``azure-eventhub``
keeps its own in ``_constants.py``), so a change to one is made once. The emulator is the service
side and keeps its own copy (``eventhubs_emulator/messages.py``): it must not import the client.
"""

from __future__ import annotations

# Message annotations the broker sets on every event (symbols, compared as bytes).
SEQUENCE_NUMBER = b"x-opt-sequence-number"
OFFSET = b"x-opt-offset"
ENQUEUED_TIME = b"x-opt-enqueued-time"
PARTITION_KEY = b"x-opt-partition-key"
PUBLISHER = b"x-opt-publisher"

#: Annotations that have a column of their own in the source schema (left out of systemProperties).
OWN_COLUMN_ANNOTATIONS = frozenset((OFFSET, SEQUENCE_NUMBER, ENQUEUED_TIME))

# The management node and its request/response vocabulary.
MANAGEMENT_NODE = "$management"
READ_OPERATION = "READ"
HUB_TYPE = "com.microsoft:eventhub"
PARTITION_TYPE = "com.microsoft:partition"
STATUS_CODE = b"status-code"
STATUS_DESCRIPTION = b"status-description"
# Application properties of a request.
NAME = "name"
PARTITION = "partition"
SECURITY_TOKEN = "security_token"
# Keys of a response's map.
PARTITION_IDS = "partition_ids"
BEGIN_SEQUENCE_NUMBER = "begin_sequence_number"
LAST_ENQUEUED_SEQUENCE_NUMBER = "last_enqueued_sequence_number"
LAST_ENQUEUED_TIME_UTC = "last_enqueued_time_utc"
IS_PARTITION_EMPTY = "is_partition_empty"
