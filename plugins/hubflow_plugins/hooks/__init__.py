"""Airflow hooks: each owns the I/O with one outside system through an Airflow connection."""
