"""The configs of built-in jobs written before pipelines: ``source:`` and ``sink:`` read as
``sources:`` and ``sinks:``, with a deprecation warning; and what a built-in's sink is by default.

A built-in rebuilt as a pipeline declares how its old sections map to named ones
(:class:`LegacySections`); its config model (:class:`LegacyPipelineConfig`) upgrades an old config
before validating it, and names every problem by the key the user wrote (``source.eventhub_name``,
``sink.format``), never by the upgraded one. The checkpoint and the table stay where they were: the
first sink's query keeps ``<checkpoint_root>/<name>``. Imports no Spark.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel, PrivateAttr, ValidationError, model_validator

from hubflow.config import KeyedValueError
from hubflow_jobs.pipeline import PipelineConfig


class LegacyConfigWarning(FutureWarning):
    """A built-in job's config uses the keys of hubflow before pipelines (shown to users by default)."""


@dataclass(frozen=True)
class LegacySections:
    """How one built-in's ``source:`` and ``sink:`` become a named source and a named sink."""

    builtin: str
    source: str  # the source's name (the function's parameter)
    source_kind: str
    sink: str  # the sink's name
    sink_keys: tuple[str, ...] = ("output_path", "format")  # what the old sink: accepted
    sink_required: tuple[str, ...] = ("output_path",)
    sink_defaults: dict[str, Any] = field(default_factory=dict)  # what the built-in always wrote
    params: str | None = None  # the old section that is the function's params (bronze_to_silver's parse:)
    params_model: type[BaseModel] | None = None  # its model: its mistakes are named by the old keys
    sink_columns: Callable[[Any], list[str]] | None = None  # the output's columns, from the params model
    sink_kind: str | None = None  # the sink's kind when the old sink: had no format (an Event Hub)
    source_of: Callable[[dict[str, Any]], dict[str, Any]] | None = None  # old source: -> the new one
    #: The built-in's whole old config model: an old config is validated with it first, so each
    #: mistake gets the message the job gave before (checks across sections included).
    legacy_model: type[BaseModel] | None = None

    def upgraded(self, data: dict[str, Any]) -> dict[str, Any]:
        """``data`` with ``source:`` and ``sink:`` as ``sources:`` and ``sinks:``."""
        both = [key for key in ("sources", "sinks", "params") if key in data]
        if both:
            raise KeyedValueError(
                "source",
                f"write the old keys (source:, sink:) or the pipeline's ({', '.join(both)}:), not both",
            )
        data = dict(data)
        source, sink = data.pop("source", None), data.pop("sink", None)
        if isinstance(source, dict):
            source = self.source_of(source) if self.source_of else {"kind": self.source_kind, **source}
        if isinstance(sink, dict) and self.sink_kind:
            sink = {"kind": self.sink_kind, **sink}
        elif isinstance(sink, dict):
            unknown = sorted(set(sink) - set(self.sink_keys))
            if unknown:
                raise KeyedValueError(
                    f"sink.{unknown[0]}", f"unknown key; sink: takes {', '.join(self.sink_keys)}"
                )
            sink = dict(sink)
            formats = ("delta", "parquet")
            file_format = sink.pop("format", "delta")
            if file_format not in formats:
                raise KeyedValueError("sink.format", f"{file_format!r} is not one of 'delta', 'parquet'")
            sink = {"kind": file_format, **sink}
            for key in self.sink_required:
                if key not in sink:
                    raise KeyedValueError(f"sink.{key}", "is required")
        if self.params and self.params in data:
            data["params"] = self._checked_params(data.pop(self.params))
        if source is not None:
            data["sources"] = {self.source: source}
        if sink is not None:
            data["sinks"] = {self.sink: sink}
        return data

    def with_defaults(self, data: dict[str, Any]) -> dict[str, Any]:
        """``data`` (in the pipeline's keys) with what the built-in's sink is unless the config says
        otherwise: ``sink_defaults``, and the output's columns its params imply."""
        sinks = data.get("sinks")
        sink = sinks.get(self.sink) if isinstance(sinks, dict) else None
        if not isinstance(sink, dict):
            return data
        sink = {**self.sink_defaults, **sink}
        if self.sink_columns and self.params_model and "columns" not in sink:
            try:
                sink["columns"] = self.sink_columns(
                    self.params_model.model_validate(data.get("params") or {})
                )
            except ValidationError:
                pass  # the binding names what is wrong with the params
        return {**data, "sinks": {**sinks, self.sink: sink}}

    def _checked_params(self, params: Any) -> Any:
        """The old params section, validated by the function's model so that a mistake names its key."""
        if self.params_model is None or not isinstance(params, dict):
            return params
        try:
            self.params_model.model_validate(params)
        except ValidationError as exc:
            error = exc.errors(include_url=False)[0]
            context = error.get("ctx") or {}
            key = ".".join(str(part) for part in (self.params, *error["loc"]))
            if isinstance(context.get("error"), KeyedValueError):
                key = f"{key}.{context['error'].key}"
                raise KeyedValueError(key, str(context["error"])) from None
            problem = "unknown key" if error["type"] == "extra_forbidden" else error["msg"]
            raise KeyedValueError(key, problem) from None
        return params

    def as_written(self, loc: tuple[Any, ...]) -> tuple[Any, ...]:
        """An error location in the upgraded config, as the old config names it."""
        if loc[:2] == ("sources", self.source):
            return ("source", *loc[2:])
        if loc[:3] == ("sinks", self.sink, "kind"):
            return ("sink", "format", *loc[3:])
        if loc[:2] == ("sinks", self.sink):
            return ("sink", *loc[2:])
        if self.params and loc[:1] == ("params",):
            return (self.params, *loc[1:])
        return loc

    def notice(self, name: Any) -> str:
        """The deprecation warning of an old config."""
        old = f"source:, {self.params}: and sink:" if self.params else "source: and sink:"
        params = f", params: (the old {self.params}:)" if self.params else ""
        return (
            f"job config {name}: {old} are the keys of the built-in {self.builtin} before it became a "
            f"pipeline; they still work, but write them as sources: {{{self.source}: {{kind: "
            f"{self.source_kind}, ...}}}}{params} and sinks: {{{self.sink}: {{kind: "
            f'{self.sink_kind or "delta"}, ...}}}} (docs/pipelines.md, "The built-in jobs")'
        )


class LegacyPipelineConfig(PipelineConfig):
    """A built-in's config: a pipeline config that also reads the built-in's old ``source:``/``sink:``."""

    LEGACY: ClassVar[LegacySections]
    #: Whether the file used the old keys (so that messages name them).
    _old_keys: bool = PrivateAttr(default=False)

    def key_as_written(self, *loc: str) -> str:
        """``loc`` named by the old keys when the config was written in them."""
        return ".".join(str(part) for part in (self.LEGACY.as_written(loc) if self._old_keys else loc))

    @model_validator(mode="before")
    @classmethod
    def _upgrade(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if {"source", "sink"} & data.keys():
            warnings.warn(cls.LEGACY.notice(data.get("name")), LegacyConfigWarning, stacklevel=2)
            data = cls.LEGACY.upgraded(data)
        return cls.LEGACY.with_defaults(data)

    @classmethod
    def model_validate(cls, obj: Any, **kwargs: Any) -> LegacyPipelineConfig:
        """Validate, naming the problems of an old config by its own keys."""
        if isinstance(obj, dict) and {"source", "sink"} & obj.keys() and cls.LEGACY.legacy_model:
            cls.LEGACY.legacy_model.model_validate(obj, **kwargs)
        try:
            config = super().model_validate(obj, **kwargs)
        except ValidationError as exc:
            if not isinstance(obj, dict) or not {"source", "sink"} & obj.keys():
                raise
            errors = exc.errors(include_url=False)
            rewritten = [{**error, "loc": cls.LEGACY.as_written(tuple(error["loc"]))} for error in errors]
            raise ValidationError.from_exception_data(exc.title, rewritten) from None  # type: ignore[arg-type]
        config._old_keys = isinstance(obj, dict) and bool({"source", "sink"} & obj.keys())
        return config  # type: ignore[return-value]
