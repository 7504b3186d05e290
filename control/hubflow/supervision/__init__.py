"""Supervising a job: the supervisor's decisions (:mod:`.supervisor`), health verdicts
(:mod:`.health`), how a run ended (:mod:`.job_exit`), starting a detached driver
(:mod:`.detached_process`) and waiting for Airflow's API (:mod:`.airflow_readiness`)."""
