"""Test harness pieces that start real components (Spark cluster, Airflow metadata DB)."""
