"""The streaming status page: a FastAPI app the Airflow plugin mounts under ``/hubflow``.

``status_app.create_app()`` builds it on the control plane's progress code:
``hubflow.progress.job_snapshots`` reads each registered job's verdict, status and last batch;
``hubflow.progress.history`` turns what the jobs leave behind into chart points. The plugin
class itself lives in ``plugins/hubflow_status_plugin.py`` (the file Airflow's plugin manager loads).
"""
