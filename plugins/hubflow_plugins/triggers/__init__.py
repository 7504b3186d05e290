"""Airflow triggers (run in the triggerer; small and serializable).

``CheckpointHealthTrigger`` is also importable from here: a trigger deferred before the provider
layout was serialized as ``hubflow_plugins.triggers.CheckpointHealthTrigger``, and the triggerer
must still load it after an upgrade.
"""

from hubflow_plugins.triggers.checkpoint_health import CheckpointHealthTrigger

__all__ = ["CheckpointHealthTrigger"]
