"""Airflow sensors over a job's checkpoint."""
