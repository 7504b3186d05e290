"""hubflow's control plane: everything that knows a job without running Spark or Airflow.

Its layers, each a package or module:

* :mod:`.registry` - the job registry (``dags/registry.yaml``) and each entry's paths;
  :mod:`.invocation` - the one spark-submit command line of a job.
* :mod:`.status` - the contract between a job and its supervisors: the status folder, job states,
  lease, liveness, exit codes.
* :mod:`.storage` - documents and objects on local disk, fsspec and Azure Blob.
* :mod:`.checkpoints` - reading what Spark and Delta write: checkpoint logs, the file sink's log,
  the Delta log, the inspector's verdict, checkpoint backups.
* :mod:`.supervision` - what a supervisor decides (start, restart, back off), health verdicts,
  how a run ended, starting a detached driver.
* :mod:`.operations` - what on-call does to a job: stop/hold/start, rewind, archive, the audit trail.
* :mod:`.progress` - batches, rows and lag over time; the status page's job snapshots.
* :mod:`.alerts`, :mod:`.lake_assets`, :mod:`.event_schedule` - alert decisions, the lake tables
  as assets, the ``schedule: events`` grammar.

Imports neither Airflow nor Spark (tests/control/test_import_rules.py): the Spark driver side
(``hubflow_jobs``), the Airflow side (``hubflow_plugins``) and the ``hubflow`` command import it.
"""
