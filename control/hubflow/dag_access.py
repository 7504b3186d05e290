"""Who may read and act on a job: the registry's ``access:`` and the DAG permissions it becomes.

A job's entry may name Airflow roles (``access: {read: [...], act: [...]}``); every DAG of the job
(its ``__supervisor`` or ``__available_now`` DAG and its ``__oncall`` DAG) then carries the same
``access_control``, so Airflow's DAG-level permissions decide who sees the job's runs and logs and
who may trigger its on-call actions and backfills. An auth manager with per-DAG roles enforces it:
the FAB provider syncs ``access_control`` into its roles when the DAG processor serializes a DAG
(and at ``airflow sync-perm --include-dags``). The names below are FAB's resource and action names
(``airflow.providers.fab.www.security.permissions``). Pure data: no Airflow import here.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

#: FAB's resource of a DAG itself (read: see it, its tasks' state and logs; edit: trigger it,
#: pause it, clear and mark its tasks).
DAGS = "DAGs"
#: FAB's resource of a DAG's runs (read: list them; create: trigger a run, a backfill's runs).
DAG_RUNS = "DAG Runs"
#: What a role named under ``read`` gets on each DAG of the job.
READ_PERMISSIONS: dict[str, frozenset[str]] = {
    DAGS: frozenset({"can_read"}),
    DAG_RUNS: frozenset({"can_read"}),
}
#: What a role named under ``act`` gets on each DAG of the job: read, and trigger (a run is created
#: by a user who may edit the DAG and create its runs).
ACT_PERMISSIONS: dict[str, frozenset[str]] = {
    DAGS: frozenset({"can_read", "can_edit"}),
    DAG_RUNS: frozenset({"can_read", "can_create"}),
}


class AccessRoles(BaseModel):
    """The registry's ``access:`` of one job: Airflow roles that may read it, and that may act on it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    read: list[str] = Field(
        default_factory=list,
        description="roles that may see the job's DAGs, their runs and task logs",
    )
    act: list[str] = Field(
        default_factory=list,
        description="roles that may also trigger the job's DAGs (its on-call actions, its backfills)",
    )

    @model_validator(mode="after")
    def _roles_named(self) -> AccessRoles:
        for key in ("read", "act"):
            blank = [role for role in getattr(self, key) if not role.strip()]
            if blank:
                raise ValueError(f"{key} names an empty role ({blank[0]!r}); write the Airflow role's name")
        if not self.read and not self.act:
            raise ValueError(
                "names no role; list Airflow roles under read and/or act, or remove access: "
                "(then the auth manager's defaults apply)"
            )
        return self


def access_control(access: AccessRoles | None) -> dict[str, dict[str, set[str]]] | None:
    """The ``access_control`` of every DAG of a job with ``access``: role -> resource -> actions.

    None (no ``access:``) leaves the DAGs to the auth manager's defaults. A role named under both
    ``read`` and ``act`` gets the act permissions.
    """
    if access is None:
        return None
    control: dict[str, dict[str, set[str]]] = {}
    for roles, permissions in ((access.read, READ_PERMISSIONS), (access.act, ACT_PERMISSIONS)):
        for role in roles:
            granted = control.setdefault(role, {})
            for resource, actions in permissions.items():
                granted.setdefault(resource, set()).update(actions)
    return control
