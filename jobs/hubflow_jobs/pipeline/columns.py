"""The column names of the pipeline API: what a pipeline function sets and what a source adds."""

#: The column a pipeline sets (non-null: why) on rows that belong in the sink's quarantine.
QUARANTINE_REASON = "_quarantine_reason"
#: The column of a json or csv files source holding a record that does not parse (null otherwise).
RAW_RECORD = "_raw_record"
#: The column of a files source naming the file each record came from.
SOURCE_FILE = "_source_file"
#: A column a sink's ``quarantine_columns`` may name without the function setting it: the id of the
#: micro-batch that quarantined the row (null for rows a backfill wrote), filled in by hubflow.
BATCH_ID = "batch_id"
#: What a quarantine may call :data:`SOURCE_FILE` instead (hubflow's own quarantines do): a backfill
#: finds a quarantine's rows of an interval by whichever of the two it keeps.
QUARANTINE_SOURCE_FILE = "source_file"
