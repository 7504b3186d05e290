"""One rule for where a quarantine table may be (``lake_tables.check_quarantine_path``), the same in
every sink that has one: files_to_lake's, eventhubs_aggregate's and a pipeline's lake sink."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from hubflow_jobs.builtins.eventhubs_aggregate import LegacyEventHubsAggregateConfig
from hubflow_jobs.builtins.files_to_lake import LegacyFilesToLakeConfig
from hubflow_jobs.pipeline.declarations import LakeSink

SINKS: dict[str, tuple[type, dict[str, Any]]] = {
    "files_to_lake": (LegacyFilesToLakeConfig.model_fields["sink"].annotation, {}),
    "eventhubs_aggregate": (LegacyEventHubsAggregateConfig.model_fields["sink"].annotation, {}),
    "pipeline": (LakeSink, {"kind": "delta"}),
}


def _sink(kind: str, output: str, quarantine: str) -> Any:
    model, extra = SINKS[kind]
    return model.model_validate({**extra, "output_path": output, "quarantine_path": quarantine})


@pytest.mark.parametrize("kind", SINKS)
@pytest.mark.parametrize(
    ("output", "quarantine", "problem"),
    [
        ("/lake/orders", "/lake/orders/", "must differ from output_path"),
        ("/lake/orders", "/lake/orders/quarantine", "lies inside output_path /lake/orders"),
        ("/lake/orders/good", "/lake/orders", "lies around output_path /lake/orders/good"),
        ("abfss://lake@acct.dfs.core.windows.net/o", "abfss://lake@acct.dfs.core.windows.net/o/q", "inside"),
    ],
)
def test_a_quarantine_on_inside_or_around_the_output_is_refused_by_its_key(
    kind: str, output: str, quarantine: str, problem: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        _sink(kind, output, quarantine)
    assert problem in str(refused.value)
    keyed = refused.value.errors()[0]["ctx"]["error"]
    assert keyed.key == "quarantine_path", "named by the key the user wrote (sink.quarantine_path)"


@pytest.mark.parametrize("kind", SINKS)
@pytest.mark.parametrize(
    ("output", "quarantine"),
    [
        ("/lake/orders", "/lake/orders_quarantine"),  # a sibling whose name only starts the same
        ("/lake/orders", "/lake/quarantine/orders"),
        ("/lake/orders", "/lake/orders/_quarantine"),  # hidden from the output's readers and VACUUM
    ],
)
def test_a_quarantine_beside_the_output_or_hidden_in_it_is_accepted(
    kind: str, output: str, quarantine: str
) -> None:
    assert _sink(kind, output, quarantine).quarantine_path == quarantine
