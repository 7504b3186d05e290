"""Airflow operators that run, supervise and clean up after registered jobs (thin: the control plane
does the work).
"""
