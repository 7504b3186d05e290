"""A job's progress over time: batches, rows and lag from its history and checkpoint
(:mod:`.history`), and the per-job snapshot the status page and ``hubflow status`` show
(:mod:`.job_snapshots`)."""
