"""Notifiers of hubflow alerts: the registry's ``alerts.notifiers`` turned into Airflow notifiers."""
