"""Every hubflow DAG for Airflow, generated from the job registry ``dags/registry.yaml``.

Add a job by adding an entry to the registry; this file does not change.
"""

from hubflow.registry import load_registry
from hubflow_plugins.dag_factory import build_dags

globals().update(build_dags(load_registry()))
