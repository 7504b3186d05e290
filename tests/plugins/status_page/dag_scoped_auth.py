"""An Airflow auth manager with per-DAG read grants, for the status page's permission tests.

Airflow's Simple auth manager gives every role read access to every DAG; FAB (not installed here)
and Keycloak grant DAGs one by one. This one is the Simple auth manager (its users, passwords and
token login) but for the users named in ``HUBFLOW_TEST_DAG_GRANTS`` (JSON ``{user: {"read": [dag
ids], "logs": [dag ids]}}``), who may read only the DAGs in ``read`` and the task logs of those in
``logs``, and change nothing. Airflow loads it through ``[core] auth_manager``, as it would any.
"""

from __future__ import annotations

import json
import os
from typing import Any

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager


class DagScopedAuthManager(SimpleAuthManager):
    def is_authorized_dag(
        self, *, method: Any, user: Any, access_entity: Any = None, details: Any = None
    ) -> bool:
        grants = json.loads(os.environ.get("HUBFLOW_TEST_DAG_GRANTS", "{}")).get(user.get_name())
        if grants is None:
            return super().is_authorized_dag(
                method=method, user=user, access_entity=access_entity, details=details
            )
        dag_id = details.id if details is not None else None
        key = "logs" if access_entity == DagAccessEntity.TASK_LOGS else "read"
        return method == "GET" and dag_id in grants.get(key, [])
