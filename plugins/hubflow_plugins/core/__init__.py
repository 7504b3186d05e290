"""hubflow's Airflow-free core: checkpoints, archive, checkpoint backups, health, job control, rewind.

Nothing in this package imports Airflow (``tests/plugins/core/test_airflow_free.py`` proves it with
``airflow`` made unimportable), so every module works from a shell, a test or a Spark driver as
well as from the hooks, operators and sensors beside it. What a job and its supervisors share - the
status folder's files, the job states, the lease and the STOP/KILL/HOLD markers - is imported from
the jobs runtime (``hubflow_jobs.status``), never copied.
"""
