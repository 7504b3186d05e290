"""An embedded Azure Event Hubs emulator speaking AMQP 1.0 to the unmodified azure-eventhub SDK."""
