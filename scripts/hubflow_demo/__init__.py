"""What ``scripts/demo.py`` (``make demo``, ``make demo-stop``) is made of, one job a module.

:mod:`.run` runs the steps in order: :mod:`.stack_start` (the emulator and ``airflow standalone``),
:mod:`.sample_data` (the hub's events, landing files, connection file), :mod:`.airflow_start`
(Airflow's environment, readiness, the demo's DAGs unpaused), :mod:`.supervised_stream` (the kill,
the supervisor's backoff and restart, the restart-loop alert), :mod:`.dag_runs` (the scheduled and
Asset-triggered runs), :mod:`.summary` (every table read back, where to look) and :mod:`.stop`.
Beside them: :mod:`.settings` (where it lives, its names and deadlines), :mod:`.progress` (its
narration and step deadlines), :mod:`.ports`, :mod:`.processes`, :mod:`.job_configs` (the demo's
registry), :mod:`.alert_receiver` (a Slack stand-in), :mod:`.airflow_api` and :mod:`.lake`.
"""
