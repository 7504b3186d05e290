"""The Airflow plugin of the streaming status page (loaded by Airflow's plugin manager).

It mounts the status page's FastAPI app (``hubflow_plugins.status_page``) on the API server under
``/hubflow`` and adds "Streaming status" to the Airflow UI's navigation (an external view shown
inside the UI). The page asks for the Airflow login like the rest of the UI. Set
``HUBFLOW_STATUS_PAGE_PUBLIC=true`` only where the API server is not reachable by others.
"""

from __future__ import annotations

import os

from airflow.plugins_manager import AirflowPlugin

from hubflow_plugins.status_page.status_app import create_app

#: Where the API server mounts the page; the external view points at it.
URL_PREFIX = "/hubflow"


class HubflowStatusPlugin(AirflowPlugin):
    """Streaming status page: job health, last batch, input rate and lag charts."""

    name = "hubflow_status"
    fastapi_apps = [
        {
            "app": create_app(
                require_login=os.environ.get("HUBFLOW_STATUS_PAGE_PUBLIC", "").lower() != "true"
            ),
            "url_prefix": URL_PREFIX,
            "name": "hubflow streaming status",
        }
    ]
    external_views = [
        {
            "name": "Streaming status",
            "href": f"{URL_PREFIX}/",
            "destination": "nav",
            "category": "browse",
            "url_route": "hubflow-status",
        }
    ]
