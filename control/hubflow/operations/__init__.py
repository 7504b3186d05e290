"""What on-call does to a job from outside it: stop, hold, start and kill (:mod:`.job_control`),
rewind to an earlier batch (:mod:`.rewind`), archive processed landing files (:mod:`.archive`), and
the audit trail of who did what to a job (:mod:`.audit`)."""
