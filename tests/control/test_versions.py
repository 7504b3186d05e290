"""Job versions in supervisor.json (``hubflow.supervision.versions``): a start of the same version
keeps its ``since``, another version becomes current and keeps the one it replaced."""

from __future__ import annotations

from hubflow.supervision.versions import JobVersion, advance, version_text, versions

A, B, C = "a" * 64, "b" * 64, "c" * 64


def test_the_same_version_keeps_its_since_and_a_new_one_keeps_the_previous() -> None:
    state = advance({}, A, "T1")
    assert versions(state) == (JobVersion(A, "T1"), None)
    assert advance(state, A, "T2") == state, "a restart of the same version keeps its since"
    state = advance(state, B, "T3")
    assert versions(state) == (JobVersion(B, "T3"), JobVersion(A, "T1", "T3"))
    assert version_text(state) == f"{B[:12]} since T3 (before: {A[:12]}, T1 to T3)"
    state = advance(state, C, "T4")
    assert versions(state) == (JobVersion(C, "T4"), JobVersion(B, "T3", "T4")), "one previous is kept"


def test_a_state_from_before_versions_reads_its_started_fingerprint_as_the_current_version() -> None:
    old = {"fingerprint": {"digest": A}, "started_at": "T0", "backoff_reset_at": "T0"}
    assert versions(old) == (JobVersion(A, "T0"), None)
    upgraded = advance(old, B, "T5")
    assert versions(upgraded) == (JobVersion(B, "T5"), JobVersion(A, "T0", "T5"))
    assert upgraded["backoff_reset_at"] == "T0", "the rest of the state is kept"
    assert version_text({}) is None and versions({"version": "garbage"}) == (None, None)
