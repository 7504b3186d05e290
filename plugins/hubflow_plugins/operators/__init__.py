"""Airflow operators that run, supervise and clean up after registered jobs (thin: the core does the work)."""
