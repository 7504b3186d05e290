"""What the local Entra ID knows and how it answers: registered clients, resources (audiences), and
the service's error shapes.

A :class:`Directory` holds the tenant's registered clients (:class:`RegisteredClient`: a service
principal with a client secret, a workload identity with a federated subject, or a user-assigned
managed identity) and the resources tokens may be asked for. :meth:`Directory.authenticate` checks a
token request's client credential the way Entra ID does and answers a refusal in Entra ID's JSON
(``error``, ``error_description`` starting with the AADSTS code, ``error_codes``) - the body
azure-identity and MSAL show the user. Nothing here serves HTTP (``server.py`` does).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

#: The resources a token may be asked for unless the issuer is told otherwise (compared without a
#: trailing ``/``): Event Hubs and Storage.
DEFAULT_AUDIENCES = ("https://eventhubs.azure.net", "https://storage.azure.com")
#: The client id of the system-assigned managed identity (a request naming no client id gets it).
SYSTEM_IDENTITY = "emulator-managed-identity"
#: The assertion type of a client assertion (RFC 7523), which azure-identity and hadoop-azure send.
JWT_BEARER = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"


class ClientsFileError(ValueError):
    """The registered-clients file cannot be used; the message names the file, the entry and the fix."""


@dataclass(frozen=True)
class RegisteredClient:
    """One application of the tenant: exactly one of ``client_secret`` (a service principal),
    ``federated_subject`` (a workload identity: the service account's ``sub``), ``managed``
    (a user-assigned managed identity, asked for by client id on the managed-identity endpoints)."""

    client_id: str
    client_secret: str | None = field(default=None, repr=False)
    federated_subject: str | None = None
    managed: bool = False


def load_clients(path: str | Path) -> list[RegisteredClient]:
    """The clients in a JSON file: ``{"clients": [{"client_id": ..., "client_secret": ...},
    {"client_id": ..., "federated_subject": ...}, {"client_id": ..., "managed": true}]}``."""
    where = str(path)
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ClientsFileError(f"cannot read the clients file {where!r}: {exc.strerror}") from None
    except ValueError:
        raise ClientsFileError(f"the clients file {where!r} is not valid JSON") from None
    entries = document.get("clients") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise ClientsFileError(f'the clients file {where!r} must be {{"clients": [ ... ]}}')
    return [_client(entry, where, index) for index, entry in enumerate(entries)]


def _client(entry: Any, where: str, index: int) -> RegisteredClient:
    known = {"client_id", "client_secret", "federated_subject", "managed"}
    if not isinstance(entry, dict) or not isinstance(entry.get("client_id"), str) or not entry["client_id"]:
        raise ClientsFileError(f"{where}: clients[{index}] needs a non-empty string client_id")
    unknown = sorted(set(entry) - known)
    if unknown:
        raise ClientsFileError(
            f"{where}: clients[{index}] ({entry['client_id']}) has unknown keys {unknown}; "
            f"use {sorted(known)}"
        )
    kinds = [k for k in ("client_secret", "federated_subject", "managed") if entry.get(k)]
    if len(kinds) != 1:
        raise ClientsFileError(
            f"{where}: clients[{index}] ({entry['client_id']}) needs exactly one of client_secret, "
            f"federated_subject or managed: true (it has {kinds or 'none'})"
        )
    return RegisteredClient(
        client_id=entry["client_id"],
        client_secret=entry.get("client_secret") or None,
        federated_subject=entry.get("federated_subject") or None,
        managed=bool(entry.get("managed")),
    )


def entra_error(status: int, error: str, code: int, message: str) -> tuple[int, dict[str, Any]]:
    """A refusal as Entra ID words it (the ``error_description`` carries the AADSTS code)."""
    trace, correlation = str(uuid.uuid4()), str(uuid.uuid4())
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    return status, {
        "error": error,
        "error_description": (
            f"AADSTS{code}: {message} Trace ID: {trace} Correlation ID: {correlation} Timestamp: {now}"
        ),
        "error_codes": [code],
        "timestamp": now,
        "trace_id": trace,
        "correlation_id": correlation,
    }


@dataclass
class Directory:
    """The tenant: its id, registered clients and the resources tokens are issued for."""

    tenant_id: str
    clients: dict[str, RegisteredClient]
    audiences: tuple[str, ...] = DEFAULT_AUDIENCES

    def resource_error(self, resource: str) -> tuple[int, dict[str, Any]] | None:
        """Entra ID's refusal of a resource the tenant does not know, or None."""
        if resource.rstrip("/") in {a.rstrip("/") for a in self.audiences}:
            return None
        return entra_error(
            400,
            "invalid_resource",
            500011,
            f"The resource principal named {resource} was not found in the tenant named "
            f"{self.tenant_id}. This can happen if the application has not been installed by the "
            "administrator of the tenant or consented to by any user in the tenant.",
        )

    def tenant_error(self, tenant: str) -> tuple[int, dict[str, Any]] | None:
        """Entra ID's refusal of a tenant other than this one, or None."""
        if tenant == self.tenant_id:
            return None
        return entra_error(
            400,
            "invalid_tenant",
            90002,
            f"Tenant '{tenant}' not found. Check to make sure you have the correct tenant ID and are "
            "signing into the correct cloud.",
        )

    def managed_identity(self, client_id: str | None) -> str | None:
        """The managed identity a managed-identity request names (its client id), or None if unknown."""
        if not client_id:
            return SYSTEM_IDENTITY
        if client_id == SYSTEM_IDENTITY:
            return client_id
        client = self.clients.get(client_id)
        return client_id if client is not None and client.managed else None

    def authenticate(
        self, form: dict[str, str], check_assertion: Any
    ) -> tuple[RegisteredClient | None, tuple[int, dict[str, Any]] | None]:
        """The client a ``client_credentials`` request proves it is, or Entra ID's refusal.

        ``check_assertion(assertion, client)`` returns None for a valid federated token of the
        client's subject, else the refusal.
        """
        if form.get("grant_type") != "client_credentials":
            return None, entra_error(
                400,
                "unsupported_grant_type",
                70003,
                f"The app requested an unsupported grant type '{form.get('grant_type', '')}'; "
                "this authority serves client_credentials.",
            )
        client_id = form.get("client_id", "")
        client = self.clients.get(client_id)
        if client is None or client.managed:
            return None, entra_error(
                400,
                "unauthorized_client",
                700016,
                f"Application with identifier '{client_id}' was not found in the directory "
                f"'{self.tenant_id}'. This can happen if the application has not been installed by "
                "the administrator of the tenant or consented to by any user in the tenant. You may "
                "have sent your authentication request to the wrong tenant.",
            )
        secret, assertion = form.get("client_secret"), form.get("client_assertion")
        if secret:
            if client.client_secret is None or not _same(secret, client.client_secret):
                return None, entra_error(
                    401,
                    "invalid_client",
                    7000215,
                    "Invalid client secret provided. Ensure the secret being sent in the request is "
                    f"the client secret value, not the client secret ID, for a secret added to app "
                    f"'{client_id}'.",
                )
            return client, None
        if assertion:
            if form.get("client_assertion_type") != JWT_BEARER:
                return None, entra_error(
                    400,
                    "invalid_request",
                    50027,
                    f"Invalid client_assertion_type; expected {JWT_BEARER}.",
                )
            refusal = check_assertion(assertion, client)
            return (None, refusal) if refusal else (client, None)
        return None, entra_error(
            401,
            "invalid_client",
            7000218,
            "The request body must contain the following parameter: 'client_assertion' or 'client_secret'.",
        )


def _same(given: str, expected: str) -> bool:
    import hmac

    return hmac.compare_digest(given.encode(), expected.encode())
