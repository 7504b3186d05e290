"""Rewinding an Event Hubs job: a new checkpoint that starts at chosen positions. No Airflow import.

A rewind never edits a checkpoint. The job is stopped, its checkpoint is moved whole into the
backups folder (``checkpoint_backups.backup_checkpoint``), and a new checkpoint is written at the same
location holding a committed batch whose end offsets are the chosen positions. Spark then
resumes with the next batch from exactly there, and its batch ids keep counting up from the old
checkpoint's. That matters: Spark's file sink skips every batch id it has already committed in
its ``_spark_metadata`` log, so a plain fresh checkpoint (batch 0 again) would silently write
nothing until it caught up with the old ids. A query resuming after batch N > 0 also reads the
offsets of batch N - 1 (Spark refuses to start without them: "batch N-1 doesn't exist"), so the new
checkpoint holds that batch too, ending at the same positions. Stateful queries cannot be rewound
this way (their state would not match the positions); they get a clear refusal.

Delta sinks (:func:`check_delta_rewind`). A Delta sink recognises a replayed batch by the
application transaction it recorded for the query (appId = query id, version = batch id). Because
the seeded checkpoint keeps the query id and continues the batch ids, the sink writes every batch
after the rewind (nothing is skipped) and still skips a batch replayed after a crash. But the
events between the rewind positions and what the table already holds come as new batches: Delta
cannot tell them from new events, so they would land twice. A new checkpoint would fare no
better: a new query id has no transaction in the table, so nothing at all would be recognised. The
safe behaviour is therefore to refuse a rewind that goes back before what a Delta table already
holds, naming the partitions, and to point at the tool that repairs an interval without doubling
it: a backfill, which replaces the interval's rows in one transaction. A rewind forward (skipping
events) is allowed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from hubflow.checkpoints.spark_logs import join, list_batch_ids, read_text
from hubflow.storage.azure import url_to_fs
from hubflow.utc_times import utc_time

if TYPE_CHECKING:
    from hubflow.operations.job_control import JobControl, Liveness
    from hubflow.registry import RegisteredJob


#: The reason of the hold a rewind keeps on the job while it moves and seeds the checkpoint.
REWIND_HOLD_REASON = (
    "rewind in progress; if this hold stays, the rewind did not finish: read the on-call task's log, "
    "then start or rewind the job again with force and a reason"
)


class RewindError(ValueError):
    """The rewind request cannot be carried out; the message says what to change."""


def parse_sequence_numbers(text: str | dict[str, Any] | None) -> dict[str, int]:
    """``{"0": 120, "3": 5}`` (JSON text or a mapping) as partition id -> sequence number."""
    if text in (None, "", {}):
        return {}
    try:
        data = json.loads(text) if isinstance(text, str) else dict(text)
        numbers = {str(int(p)): int(n) for p, n in data.items()}
    except (ValueError, TypeError, AttributeError) as exc:
        raise RewindError(
            "sequence numbers must be a JSON object of partition id -> sequence number, "
            f'e.g. {{"0": 120}}: {exc}'
        ) from None
    negative = [p for p, n in numbers.items() if n < 0]
    if negative:
        raise RewindError(f"sequence numbers must be >= 0; partitions {negative} are negative")
    return numbers


def parse_enqueued_time(text: str | None) -> datetime | None:
    """An ISO-8601 time (UTC when it names no zone), or None."""
    if not text:
        return None
    moment = utc_time(str(text))
    if moment is None:
        raise RewindError(f"enqueued time {text!r} is not ISO-8601, e.g. 2026-11-22T10:00:00Z")
    return moment


def rewind_positions(
    partitions: list[str],
    *,
    sequence_numbers: dict[str, int] | None = None,
    at_enqueued_time: dict[str, int] | None = None,
    committed: dict[str, int] | None = None,
) -> dict[str, int]:
    """Per partition, the first sequence number the rewound job reads.

    Exactly one target: ``at_enqueued_time`` (every partition, already resolved to sequence numbers)
    or ``sequence_numbers`` (the named partitions; the others resume where the old checkpoint
    committed, so rewinding one partition replays only that one).
    """
    if (at_enqueued_time is None) == (not sequence_numbers):
        raise RewindError(
            "give exactly one rewind target: an enqueued time, or sequence numbers per partition"
        )
    if at_enqueued_time is not None:
        return {p: at_enqueued_time[p] for p in partitions}
    unknown = sorted(set(sequence_numbers or {}) - set(partitions))
    if unknown:
        raise RewindError(f"the hub has partitions {partitions}; there is no partition {unknown}")
    positions = {}
    for partition in partitions:
        seq = (sequence_numbers or {}).get(partition, (committed or {}).get(partition))
        if seq is None:
            raise RewindError(
                f"partition {partition} has no sequence number given and none committed in the old "
                "checkpoint; give one for every partition"
            )
        positions[partition] = seq
    return positions


def check_delta_rewind(positions: dict[str, int], written: dict[str, int], tables: list[str]) -> None:
    """Refuse a rewind that would replay into the Delta ``tables`` events they already hold.

    ``written``: per partition, the end sequence number of the newest batch the query planned -
    committed or not, since a batch the driver died in may already be in a table.
    """
    if not tables:
        return
    back = {
        p: (positions[p], written[p]) for p in sorted(positions, key=int) if positions[p] < written.get(p, 0)
    }
    if back:
        detail = ", ".join(f"partition {p}: {start} < {end}" for p, (start, end) in back.items())
        raise RewindError(
            f"the job writes the Delta table(s) {tables}, which already hold the events a rewind to "
            f"these positions would replay ({detail}); a Delta sink cannot tell replayed events from "
            "new ones, so they would be written twice. To re-ingest a time interval, run a backfill of "
            "it (it replaces the interval's rows in one transaction, see docs/operations.md); a rewind "
            "can only move a Delta job forward."
        )


def resolve_enqueued_time(connection_string: str, when: datetime) -> tuple[str, dict[str, int]]:
    """``(hub, {partition: first sequence number enqueued at or after when})``, asked of the hub."""
    from pyspark_eventhubs.hub_metadata import HubMetadata
    from pyspark_eventhubs.options import parse_options
    from pyspark_eventhubs.positions import EventPosition

    options = parse_options({"eventhubs.connectionString": connection_string})
    metadata = HubMetadata(options)
    try:
        bounds = metadata.bounds()
        position = EventPosition.from_enqueued_time(when)
        return options.eventhub_name, {p: metadata.resolve(position, b) for p, b in bounds.items()}
    finally:
        metadata.close()


def latest_positions(connection_string: str) -> tuple[str, dict[str, int]]:
    """``(hub, {partition: last enqueued sequence number + 1})``, asked of the hub with a connection
    string (``hubflow oncall``; the Airflow side asks through its Event Hubs hook)."""
    from pyspark_eventhubs.hub_metadata import HubMetadata
    from pyspark_eventhubs.options import parse_options

    options = parse_options({"eventhubs.connectionString": connection_string})
    metadata = HubMetadata(options)
    try:
        return options.eventhub_name, {p: b.latest for p, b in metadata.bounds().items()}
    finally:
        metadata.close()


def seed_checkpoint(backup: str, checkpoint: str, hub: str, positions: dict[str, int]) -> int:
    """Write a new checkpoint at ``checkpoint`` that resumes at ``positions``; return its batch id.

    The new checkpoint holds the old query id (``metadata``), and one batch - numbered like the
    backup's newest planned batch, so the next batch id is new to the sink - with the backup's
    pinned SQL confs and every other source's offsets, the Event Hubs source's replaced by
    ``{hub: positions}``, and a commit for it. Unless that batch is batch 0, the batch before it is
    written too, the same (offsets and commit): Spark reads the offsets of the batch before the
    newest when it resumes, and refuses to start without them.
    """
    # The connector owns its offset JSON; imported here (it imports pyspark) so that DAG parsing,
    # which imports the operators, never loads Spark.
    from pyspark_eventhubs.offsets import make_offset

    fs, old = url_to_fs(backup)
    _, new = url_to_fs(checkpoint)
    if fs.exists(new):
        raise RewindError(f"{checkpoint} exists: back the checkpoint up before seeding a new one")
    if fs.exists(join(old, "state")):
        raise RewindError(
            "the query keeps state (its checkpoint has state/): a rewind would pair old state with "
            "replayed input. Start a new checkpoint and output for it instead."
        )
    batches = list_batch_ids(fs, join(old, "offsets"))
    if not batches:
        raise RewindError(
            f"the backup {backup} has no offsets log: nothing to continue from; just start the job"
        )
    batch = batches[-1]
    lines = read_text(fs, join(old, "offsets", str(batch))).removesuffix("\n").split("\n")
    if lines[0].strip() != "v1":
        raise RewindError(f"offsets log format {lines[0].strip()!r} is not supported for a rewind (only v1)")
    replaced = 0
    for index in range(2, len(lines)):
        try:
            source = json.loads(lines[index])
        except ValueError:
            continue
        if isinstance(source, dict) and hub in source:
            lines[index] = json.dumps(make_offset(hub, positions))
            replaced += 1
    if replaced != 1:
        raise RewindError(
            f"expected exactly one Event Hubs source reading {hub!r} in the checkpoint, found {replaced}"
        )
    fs.makedirs(join(new, "offsets"), exist_ok=True)
    fs.makedirs(join(new, "commits"), exist_ok=True)
    with fs.open(join(new, "metadata"), "w") as handle:
        handle.write(read_text(fs, join(old, "metadata")))
    for written in (batch - 1, batch) if batch > 0 else (batch,):
        with fs.open(join(new, "offsets", str(written)), "w") as handle:
            handle.write("\n".join(lines))
        with fs.open(join(new, "commits", str(written)), "w") as handle:
            handle.write('v1\n{"nextBatchWatermarkMs":0}')
    return batch


def rewind_job(
    job: RegisteredJob,
    control: JobControl,
    live: Liveness,
    *,
    hub: str,
    latest: dict[str, int],
    connection_string: str,
    to_enqueued_time: str | None,
    to_sequence_numbers: str | dict[str, Any] | None,
    dry_run: bool,
    who: str,
    stop_wait: timedelta,
    start: Callable[[], str],
    log: Callable[..., Any],
    force: bool = False,
    reason: str | None = None,
) -> dict[str, Any]:
    """Rewind ``job`` (an Event Hubs job) to the requested positions; the on-call rewind, whole.

    Plans first (positions from ``to_enqueued_time`` or ``to_sequence_numbers``, the rest resume
    where the checkpoint committed; a Delta sink refuses going back), then, unless ``dry_run``:
    holds the job with a ``rewind`` hold (replacing an on-call ``stop`` hold; any other kind only
    with ``force`` and a ``reason``), reads its liveness again and stops it if it runs (a supervisor
    may have started it since ``live`` was read), waits up to ``stop_wait`` for its lease to be free
    (no driver writes the checkpoint any more), plans again from the checkpoint as it is now, moves
    it whole into its backups folder, seeds the new checkpoint at the positions, releases its own
    hold and calls ``start`` (which launches the driver and returns what it did). A ``stop`` placed
    meanwhile survives: the rewind then leaves the job held and does not start it. ``latest`` is the
    hub's next sequence number per partition (the Event Hubs hook asks the hub). Airflow-free: the
    operator passes its logger and its driver launcher. Raises :class:`RewindError` with a message for
    on-call; the old checkpoint is never edited.
    """
    from hubflow.checkpoints.backups import BackupError, backup_checkpoint
    from hubflow.checkpoints.inspector import inspect_checkpoint
    from hubflow.status.holds import HoldKeptError, HoldKind, held_text, kind_of, takeover_text
    from hubflow.status.lease import LeaseHeldError, wait_until_lease_free
    from hubflow.supervision.health import committed_sequence_numbers, planned_sequence_numbers

    checkpoint = job.paths.checkpoint_location

    def plan_positions(at_time: dict[str, int] | None) -> tuple[dict[str, Any], dict[str, int]]:
        report = inspect_checkpoint(checkpoint, stalled_after=job.stalled_after_delta).to_dict()
        committed = committed_sequence_numbers(report, hub)
        positions = rewind_positions(
            sorted(latest, key=int),
            sequence_numbers=parse_sequence_numbers(to_sequence_numbers),
            at_enqueued_time=at_time,
            committed=committed,
        )
        check_delta_rewind(positions, planned_sequence_numbers(report, hub), job.paths.delta_tables)
        return report, positions

    log("found: hub %s, next sequence number per partition %s", hub, latest)
    try:
        when = parse_enqueued_time(to_enqueued_time)
        at_time = resolve_enqueued_time(connection_string, when)[1] if when else None
        if at_time is not None:
            log("found: first sequence numbers enqueued at or after %s: %s", when, at_time)
        report, positions = plan_positions(at_time)
    except RewindError as exc:
        raise RewindError(f"job {job.name}: cannot rewind: {exc}") from None
    committed = committed_sequence_numbers(report, hub)
    log("found: checkpoint %s is %s; committed %s", checkpoint, report["verdict"], committed or "none")
    if live.hold is not None and kind_of(live.hold) != HoldKind.STOP and not force:
        raise RewindError(
            f"{held_text(job.name, live.hold)}; a rewind replaces only a stop hold: pass force with a "
            "reason to take over"
        )
    if force and live.hold is not None and not reason:
        raise RewindError(f"job {job.name}: taking over a hold (force) needs a reason, recorded with it")
    plan = [
        f"hold job {job.name} while it rewinds, so that no supervisor starts it meanwhile",
        f"stop job {job.name}" if live.alive else f"leave job {job.name} stopped ({live.reason})",
        f"wait up to {stop_wait} for its lease to be free (no driver writes the checkpoint)",
        f"move checkpoint {checkpoint} whole into its backups folder (never edited)",
        f"write a new checkpoint that resumes at sequence numbers {positions}",
        f"release the hold and start job {job.name}",
    ]
    if dry_run:
        for line in plan:
            log("dry run, would: %s", line)
        return {"job": job.name, "action": "rewind", "dry_run": True, "done": [f"would {p}" for p in plan]}
    done = []
    # Held from here until the new checkpoint is written: a supervisor run in between leaves the job
    # stopped instead of starting a driver on a checkpoint being moved (or on none at all). A rewind
    # that fails part-way leaves the hold, with its reason, for on-call to read.
    found = control.folder.hold()
    if found is not None and kind_of(found) != HoldKind.STOP:
        if not force:
            raise RewindError(
                f"{held_text(job.name, found)}; a rewind replaces only a stop hold: pass force with a "
                "reason to take over"
            )
        replaced = f" ({takeover_text(found, who, reason)})"
    else:
        replaced = f" (replacing the hold {found.describe()})" if found is not None else ""
    hold = control.folder.place_hold(REWIND_HOLD_REASON, by=who, kind=HoldKind.REWIND)
    done.append(f"held job {job.name} {hold.describe()} while it rewinds{replaced}")
    log("%s", done[-1])
    # Read again: a supervisor may have started the job between ``live`` and the hold.
    now_live = control.liveness()
    if now_live.alive:
        if not live.alive:
            log("found: job %s was started since it was last read (%s)", job.name, now_live.reason)
        done.append(control.stop(stop_wait, log=log, requested_by=who))
        log("%s", done[-1])
    try:
        wait_until_lease_free(control.folder, stop_wait.total_seconds())
    except LeaseHeldError as exc:
        raise RewindError(
            f"job {job.name}: cannot rewind: {exc}. The checkpoint was not touched and the rewind's "
            "hold stays (a driver that sees it stops). Stop that driver (on-call stop, or kill its "
            "Spark application on that host; a driver whose host is gone loses its lease after its "
            "lease_duration), then rewind again with force and a reason."
        ) from None
    try:
        report, again = plan_positions(at_time)
    except RewindError as exc:
        raise RewindError(f"job {job.name}: cannot rewind: {exc} The checkpoint was not touched.") from None
    if again != positions:
        log(
            "found: checkpoint %s moved on since it was planned (committed %s): resuming at %s",
            checkpoint,
            committed_sequence_numbers(report, hub),
            again,
        )
        positions = again
    try:
        backup = backup_checkpoint(checkpoint, log=log, status_dir=control.status_dir)
    except BackupError as exc:
        raise RewindError(f"job {job.name}: cannot rewind: {exc}") from None
    if backup is None:
        raise RewindError(f"job {job.name}: no checkpoint at {checkpoint}; start the job instead")
    done.append(f"checkpoint moved to {backup}")
    log("%s", done[-1])
    try:
        batch = seed_checkpoint(backup, checkpoint, hub, positions)
    except RewindError as exc:
        raise RewindError(
            f"job {job.name}: cannot rewind: {exc} The old checkpoint is intact in {backup}."
        ) from None
    done.append(f"new checkpoint {checkpoint} resumes after batch {batch} at {positions}")
    log("%s", done[-1])
    result = {"job": job.name, "action": "rewind", "dry_run": False, "backup": backup, "done": done}
    try:
        control.folder.release_hold(HoldKind.REWIND, by=who, placed=hold, action="the rewind")
    except HoldKeptError as kept:
        done.append(
            f"{held_text(job.name, kept.hold)}, placed during the rewind: the hold stays and the job is "
            "not started; the new checkpoint is in place for its next start"
        )
        log("%s", done[-1])
        return {**result, "held": kept.hold.to_dict()}
    done.append("released the rewind's hold: a rewind ends by starting the job")
    log("%s", done[-1])
    done.append(start())
    log("%s", done[-1])
    return result
