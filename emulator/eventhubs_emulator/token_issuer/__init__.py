"""A local Entra ID (Azure AD) token issuer: real RS256 JWTs, asked for through real credential flows.

It stands in for Entra ID and Azure's managed-identity endpoints so the unmodified azure-identity,
MSAL and hadoop-azure token providers get tokens locally, which the emulator (``$cbs``) and Azurite
(``--oauth basic``) accept: App Service's and IMDS's managed-identity endpoints, and an authority
(OIDC discovery, the v2 and v1 token endpoints) for service principals (client secret) and workload
identities (a federated token in ``AZURE_FEDERATED_TOKEN_FILE``). See ``server.py`` for the endpoints,
``authority.py`` for registered clients and refusals, ``keys.py`` for the keys and their folder.

Run it alone with ``python -m eventhubs_emulator.token_issuer --dir <folder> [--clients FILE]
[--https] [--lifetime 3600]``. Needs ``cryptography`` and ``PyJWT`` (``pip install
eventhubs-emulator[entra]``).
"""

from __future__ import annotations

from .authority import ClientsFileError, RegisteredClient, load_clients
from .keys import (
    DEFAULT_LIFETIME,
    EVENTHUBS_AUDIENCE,
    FAULTS,
    FEDERATION_AUDIENCE,
    FEDERATION_ISSUER,
    IssuerKeys,
    IssuerSetupError,
    IssuerTrust,
    ensure_issuer_keys,
    federated_token,
    load_trust,
)
from .server import API_VERSION, IMDS_API_VERSION, IMDS_PATH, TOKEN_PATH, TokenIssuer

__all__ = [
    "API_VERSION",
    "DEFAULT_LIFETIME",
    "EVENTHUBS_AUDIENCE",
    "FAULTS",
    "FEDERATION_AUDIENCE",
    "FEDERATION_ISSUER",
    "IMDS_API_VERSION",
    "IMDS_PATH",
    "TOKEN_PATH",
    "ClientsFileError",
    "IssuerKeys",
    "IssuerSetupError",
    "IssuerTrust",
    "RegisteredClient",
    "TokenIssuer",
    "ensure_issuer_keys",
    "federated_token",
    "load_clients",
    "load_trust",
]
