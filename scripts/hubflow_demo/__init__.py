"""What ``scripts/demo.py`` (``make demo``, ``make demo-stop``) is made of, one job a module.

:mod:`.settings` (where it lives, its names and deadlines), :mod:`.progress` (its narration and step
deadlines), :mod:`.ports`, :mod:`.processes` and :mod:`.stop` (what it starts and stops),
:mod:`.sample_data` (the hub's events, landing files, connection file), :mod:`.job_configs` (the
demo's registry), :mod:`.airflow_start` (Airflow's environment), :mod:`.alert_receiver` (a Slack
stand-in), :mod:`.airflow_api` (its REST API), :mod:`.lake` and :mod:`.summary` (the tables read
back).
"""
