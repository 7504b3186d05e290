"""The two names azure-eventhub's live-test conftest.py imports from ``devtools_testutils``.

``devtools_testutils`` belongs to Microsoft's azure-sdk-tools, which is not published on PyPI, so
hubflow carries this stand-in, written for it (not copied): a service principal credential from
the environment (the path azure-sdk-tools takes with ``AZURE_CLIENT_ID``/``AZURE_CLIENT_SECRET``/
``AZURE_TENANT_ID`` set), here against the emulator's local token issuer, and the region override.
"""

from __future__ import annotations

import os
from typing import Any


def get_region_override(default: str = "westus") -> str:
    """The region the tests would create resources in (``RESOURCE_REGION``, else ``default``)."""
    return os.environ.get("RESOURCE_REGION") or default


def get_credential(is_async: bool = False, **kwargs: Any) -> Any:
    """A ``ClientSecretCredential`` (sync or async) for the service principal in the environment.

    ``AZURE_AUTHORITY_HOST`` names the local token issuer, which MSAL's instance discovery cannot
    vouch for, hence ``disable_instance_discovery``.
    """
    if is_async:
        from azure.identity.aio import ClientSecretCredential
    else:
        from azure.identity import ClientSecretCredential
    return ClientSecretCredential(
        os.environ["AZURE_TENANT_ID"],
        os.environ["AZURE_CLIENT_ID"],
        os.environ["AZURE_CLIENT_SECRET"],
        authority=os.environ["AZURE_AUTHORITY_HOST"],
        disable_instance_discovery=True,
        **kwargs,
    )
