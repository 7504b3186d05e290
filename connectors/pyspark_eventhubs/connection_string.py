"""An Event Hubs connection string (``Endpoint=sb://<namespace>/;SharedAccessKeyName=...;...``), parsed.

The one place hubflow reads a connection string: the connector's options, its clients, the jobs'
configs (Kafka endpoint included) and the Airflow hook all ask this type which namespace, which hub
and whether there is a key. A string without a key (``Endpoint=sb://<namespace>/;EntityPath=<hub>``)
is an Entra ID connection's, which hubflow accepts; ``azure.eventhub.parse_connection_string``
refuses those (and empty values, and repeated keys), so it is not used here. Keys are matched
case-insensitively, values keep their case and any ``=`` inside them; a key given twice keeps its
last value. Errors never echo the string: it holds a secret.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from urllib.parse import urlsplit

#: The keys of a connection string, lower-cased as :attr:`EventHubsConnectionString.fields` holds them.
ENDPOINT = "endpoint"
ENTITY_PATH = "entitypath"
SHARED_ACCESS_KEY_NAME = "sharedaccesskeyname"
SHARED_ACCESS_KEY = "sharedaccesskey"
SHARED_ACCESS_SIGNATURE = "sharedaccesssignature"
USE_DEVELOPMENT_EMULATOR = "usedevelopmentemulator"


class ConnectionStringError(ValueError):
    """A connection string is malformed; the message says what is wrong, never the value."""


def namespace_from_endpoint(endpoint: str) -> str:
    """The host (and port) of an ``sb://host[:port]/`` endpoint, or the input if it has none."""
    host = endpoint.split("://", 1)[-1]
    return host.strip("/").split("/", 1)[0]


@dataclass(frozen=True)
class EventHubsConnectionString:
    """The ``Key=Value`` fields of one connection string, keys lower-cased. ``repr`` shows no value."""

    fields: Mapping[str, str] = field(repr=False)

    @classmethod
    def parse(cls, text: str, *, skip_malformed: bool = False) -> EventHubsConnectionString:
        """Split ``text`` into its fields; blank segments (``;;``, a trailing ``;``) are ignored.

        A segment without ``=`` raises :class:`ConnectionStringError` naming its position, unless
        ``skip_malformed``: callers that only look (is there a key? which hub?) and leave judging
        the string to the connector or the service skip such segments.
        """
        fields: dict[str, str] = {}
        for number, segment in enumerate(text.split(";"), start=1):
            if not segment.strip():
                continue
            key, sep, value = segment.partition("=")
            if not sep:
                if skip_malformed:
                    continue
                raise ConnectionStringError(
                    f"connection string segment {number} has no '=': expected 'Key=Value' pairs "
                    "separated by ';' (value not shown)"
                )
            fields[key.strip().lower()] = value.strip()
        return cls(MappingProxyType(fields))

    @property
    def endpoint(self) -> str | None:
        """``Endpoint`` (``sb://<namespace>/``), or None when the string has none."""
        return self.fields.get(ENDPOINT)

    @property
    def namespace(self) -> str | None:
        """The endpoint's host and port as written (``myns.servicebus.windows.net``, ``localhost:5672``)."""
        return None if self.endpoint is None else namespace_from_endpoint(self.endpoint)

    @property
    def host(self) -> str | None:
        """The endpoint's host name alone, lower-cased, no port; None without a usable endpoint."""
        return urlsplit(self.endpoint or "").hostname

    @property
    def entity_path(self) -> str | None:
        """``EntityPath``: the hub, or None when the string names none (the option or extra does)."""
        return self.fields.get(ENTITY_PATH)

    @property
    def key_name(self) -> str | None:
        """``SharedAccessKeyName``: the SAS policy, or None."""
        return self.fields.get(SHARED_ACCESS_KEY_NAME)

    @property
    def key(self) -> str | None:
        """``SharedAccessKey``: the SAS key (a secret), or None."""
        return self.fields.get(SHARED_ACCESS_KEY)

    @property
    def signature(self) -> str | None:
        """``SharedAccessSignature``: a SAS token (a secret), or None."""
        return self.fields.get(SHARED_ACCESS_SIGNATURE)

    @property
    def has_key(self) -> bool:
        """Whether the string carries a SAS key or token; one without is an Entra ID connection's."""
        return self.key is not None or self.signature is not None

    @property
    def uses_development_emulator(self) -> bool:
        """``UseDevelopmentEmulator=true``: the string is the local emulator's."""
        return self.fields.get(USE_DEVELOPMENT_EMULATOR, "").lower() == "true"
