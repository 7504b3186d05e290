"""An embedded Azure Event Hubs emulator speaking AMQP 1.0 to the unmodified azure-eventhub SDK.

Usage::

    from eventhubs_emulator import Emulator, EmulatorConfig
    with Emulator(EmulatorConfig.single_hub("hub1", partition_count=4)) as emu:
        conn_str = emu.connection_string("hub1")
"""

from .config import ConfigError, EmulatorConfig, HubConfig, load_config, parse_config
from .server import Emulator, Faults, PortInUseError

__all__ = [
    "ConfigError",
    "Emulator",
    "EmulatorConfig",
    "Faults",
    "HubConfig",
    "PortInUseError",
    "load_config",
    "parse_config",
]
