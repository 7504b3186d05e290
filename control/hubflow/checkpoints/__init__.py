"""Reading the files Spark and Delta write (never editing them): a checkpoint's logs, a file sink's
log, a Delta table's log, the inspector's verdict over them, and checkpoint backups."""
