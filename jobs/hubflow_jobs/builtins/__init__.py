"""hubflow's built-in jobs, written as pipelines on the public API (:mod:`hubflow_jobs.pipeline`).

Each module is what a user would write: a function over DataFrames and, for the configs written
before pipelines existed, a config model that reads the old keys (:mod:`.legacy_config`). A
registry entry names a built-in by its old name (``application: eventhubs_to_lake``);
:mod:`hubflow.applications` maps the name to the function and the model.
"""
