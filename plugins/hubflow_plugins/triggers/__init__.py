"""Airflow triggers (run in the triggerer; small and serializable)."""
