"""The status page's FastAPI app: one HTML page and two JSON endpoints.

Mounted by the Airflow plugin (``plugins/hubflow_status_plugin.py``) under ``/hubflow``:

* ``GET /hubflow/``                 the page: a table of registered jobs and, per job, charts of the
                                   input rate and the lag over the last batches (plain SVG drawn by
                                   ``static/status_page.js``; no CDN, works offline), and for a
                                   streaming job a link to its own on-call DAG in Airflow's UI.
* ``GET /hubflow/api/jobs``         every job's snapshot (see ``job_snapshots.job_snapshot``).
* ``GET /hubflow/api/jobs/{name}``  one job's snapshot with its ``history`` (chart points).
* ``GET /hubflow/api/jobs/{name}/driver-log``  the end of the job's ``driver.log`` (plain text,
                                   secrets masked), wherever its status folder is.
* ``GET /hubflow/static/...``       the page's script and style sheet.

Airflow does not protect plugin apps by itself; with ``require_login=True`` (what the plugin uses)
every route asks for the Airflow login, read from the ``Authorization: Bearer`` header or the UI's
session cookie, through Airflow's own ``get_user`` dependency, and shows a job only to a user who may
read its DAG, its driver log only to one who may read that DAG's task logs (``job_access``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse
from fastapi.staticfiles import StaticFiles

from hubflow.progress.history import OffsetsCache, ProgressSamples
from hubflow_plugins.status_page.job_access import AirflowDagAccess, EveryoneSeesAll, JobAccess

HERE = Path(__file__).resolve().parent
#: How often the page fetches fresh data, in seconds.
REFRESH_SECONDS = 10
#: How much of the end of a driver log the page serves.
DRIVER_LOG_TAIL_BYTES = 512 * 1024


async def _airflow_user(request: Request) -> None:
    """Refuse the request unless it carries a valid Airflow login (header token or UI cookie);
    keep what the user may see in ``request.state.job_access``."""
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi.security import HTTPAuthorizationCredentials

    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    credentials = HTTPAuthorizationCredentials(scheme=scheme, credentials=token) if token else None
    request.state.job_access = AirflowDagAccess(await get_user(request, None, credentials))


def _access(request: Request) -> JobAccess:
    """What this request's user may see (everything when the app asks no login)."""
    return getattr(request.state, "job_access", None) or EveryoneSeesAll()


def create_app(registry_path: Path | None = None, *, require_login: bool = False) -> FastAPI:
    """The status page app.

    Args:
        registry_path: the job registry to list (default: ``HUBFLOW_REGISTRY`` or
            ``dags/registry.yaml``), read again on every request so new jobs show up at once.
        require_login: ask for an Airflow login on every route (the plugin sets it; tests that
            serve the app outside Airflow leave it off).
    """
    dependencies = [Depends(_airflow_user)] if require_login else []
    app = FastAPI(
        title="hubflow streaming status",
        description="Health, last batch, input rate and lag of every registered hubflow job.",
        dependencies=dependencies,
    )
    samples = ProgressSamples()
    offsets_cache = OffsetsCache()
    app.state.samples = samples
    app.state.offsets_cache = offsets_cache
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")

    def registered_jobs() -> list[Any]:
        from hubflow.progress.job_snapshots import load_jobs, redact
        from hubflow.registry import RegistryError

        try:
            return load_jobs(registry_path)
        except RegistryError as exc:
            raise HTTPException(status_code=500, detail=redact(str(exc))) from None

    def jobs(request: Request) -> list[Any]:
        """The registered jobs this request's user may read, in registry order."""
        return _access(request).readable(registered_jobs())

    @app.get("/api/jobs")
    def list_jobs(request: Request) -> JSONResponse:
        """The snapshot of every job the user may read, in registry order."""
        from hubflow.progress.job_snapshots import job_snapshot

        return JSONResponse(
            {"jobs": [job_snapshot(job, samples, use_storage=_use_job_storage) for job in jobs(request)]}
        )

    def registered(request: Request, name: str, *, logs: bool = False) -> Any:
        """The job ``name``, when registered (else 404) and the user may read it (else 403)."""
        job = next((job for job in registered_jobs() if job.name == name), None)
        if job is None:
            raise HTTPException(status_code=404, detail=f"no registered job named {name!r}")
        refusal = _access(request).refusal(job, logs=logs)
        if refusal is not None:
            raise HTTPException(status_code=403, detail=refusal)
        return job

    @app.get("/api/jobs/{name}")
    def get_job(request: Request, name: str) -> JSONResponse:
        """One job's snapshot with its chart points (``history``)."""
        from hubflow.progress.job_snapshots import job_snapshot

        job = registered(request, name)
        return JSONResponse(
            job_snapshot(
                job, samples, with_history=True, offsets_cache=offsets_cache, use_storage=_use_job_storage
            )
        )

    @app.get("/api/jobs/{name}/driver-log")
    def get_driver_log(request: Request, name: str) -> PlainTextResponse:
        """The end of the job's driver log, read from its status folder (local or remote)."""
        from hubflow.progress.job_snapshots import driver_log_tail, redact

        job = registered(request, name, logs=True)
        try:
            text = driver_log_tail(job, DRIVER_LOG_TAIL_BYTES, use_storage=_use_job_storage)
        except Exception as exc:
            raise HTTPException(
                status_code=502, detail=f"cannot read the driver log: {redact(str(exc))}"
            ) from None
        if text is None:
            raise HTTPException(status_code=404, detail=f"job {name} has no driver.log in its status folder")
        return PlainTextResponse(text)

    @app.get("/", response_class=HTMLResponse)
    def page(request: Request) -> HTMLResponse:
        """The status page, rendered with the current snapshots; the script refreshes it."""
        from hubflow.progress.job_snapshots import job_snapshot

        snapshots = [
            job_snapshot(
                job, samples, with_history=True, offsets_cache=offsets_cache, use_storage=_use_job_storage
            )
            for job in jobs(request)
        ]
        base = request.scope.get("root_path", "").rstrip("/")
        html = _render(
            "status.html",
            jobs=snapshots,
            base=base,
            airflow_ui=airflow_ui_root(base),
            refresh_seconds=REFRESH_SECONDS,
            initial_json=_script_json({"jobs": snapshots}),
        )
        return HTMLResponse(html)

    return app


def airflow_ui_root(base: str) -> str:
    """The address of Airflow's UI, from where the page is mounted (``base``: ``<Airflow>/hubflow``):
    a streaming job's on-call link goes to ``<Airflow>/dags/<job>__oncall``, that job's own DAG,
    whose Trigger form runs the actions its on-call roles may run (docs/operations.md, "Per-job
    access"). Served on its own (``base`` empty), the links are relative to the host."""
    return base.rsplit("/", 1)[0] if base else ""


def _use_job_storage(job: Any) -> None:
    """Read the job's storage through its ``storage_conn_id`` connection (the hook imports Airflow)."""
    if getattr(job, "storage_conn_id", None):
        from hubflow_plugins.hooks.azure_storage import use_job_storage

        use_job_storage(job)


def _render(template: str, **context: Any) -> str:
    import jinja2

    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=jinja2.select_autoescape(["html"]),
        undefined=jinja2.StrictUndefined,
    )
    return environment.get_template(template).render(**context)


def _script_json(value: Any) -> str:
    """JSON safe to embed in ``<script type="application/json">`` (no ``</script>`` break-out)."""
    text = json.dumps(value, default=str)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
