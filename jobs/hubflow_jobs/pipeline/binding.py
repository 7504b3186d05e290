"""A pipeline function: found by its reference ``module:function``, bound to its config by parameter name.

The function's parameters are bound by name: each name of the config's ``sources:`` gets that
source as a DataFrame, ``params`` gets the config's ``params:`` (validated by the parameter's
pydantic model when it is annotated with one), ``spark`` gets the session. It returns one DataFrame
(for a config with one sink) or a mapping of sink name to DataFrame. The same function runs on
streaming DataFrames (hubflow) and on batch DataFrames (the user's unit tests).

Everything here runs on the driver and imports no Spark: ``hubflow check`` binds every pipeline
without starting a session. Each problem is a :class:`PipelineError` naming the reference, the
parameter or sink, and the names that would have been valid.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import inspect
import sys
import traceback
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from hubflow.applications import REFERENCE_SEPARATOR
from hubflow.repository import pipelines_folder

#: Parameter names hubflow binds besides the sources; ``context`` makes a function that starts its
#: own queries (:class:`~hubflow_jobs.pipeline.streams.PipelineContext`).
PARAMS, SPARK, CONTEXT = "params", "spark", "context"
#: The environment variable naming the folder of the user's pipeline modules (default: ``pipelines/``
#: of the repository).
#: PySpark's error for what needs a session (``udf("long")`` parses its DDL type on the JVM) when
#: there is none: a module doing that at import fails in hubflow's check before Spark starts.
NO_SESSION_ERROR = "SESSION_OR_CONTEXT_NOT_EXISTS"


class PipelineError(Exception):
    """A pipeline cannot be bound or its result cannot be written; ``str(error)`` says what to fix."""


def _import_from(folder: Path, module_name: str) -> Any:
    """``module_name``, its top-level module taken from ``folder`` first, else from the installed packages.

    The module is registered in ``sys.modules`` under its own name (so cloudpickle ships the
    functions of a module of ``pipelines/`` by reference, and executors import the file
    ``ship_module`` gives them); ``sys.path`` is left as it was.
    """
    top = module_name.partition(".")[0]
    if top not in sys.modules and folder.is_dir():
        spec = importlib.machinery.PathFinder.find_spec(top, [str(folder)])
        if spec is not None and spec.loader is not None:
            module = importlib.util.module_from_spec(spec)
            sys.modules[top] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules[top]
                raise
    return importlib.import_module(module_name)


def load_function(reference: str, folder: Path | None = None) -> Callable[..., Any]:
    """The function ``module:function`` names, its module imported from ``folder`` or a package."""
    module_name, separator, function_name = reference.partition(REFERENCE_SEPARATOR)
    if not separator or not module_name or not function_name or REFERENCE_SEPARATOR in function_name:
        raise PipelineError(
            f"pipeline {reference!r}: write it as module:function, e.g. hot_devices:transform"
        )
    folder = folder or pipelines_folder()
    importlib.invalidate_caches()  # a module written since the folder was last looked at is found too
    try:
        module = _import_from(folder, module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise PipelineError(
                f"pipeline {reference!r}: no module {module_name!r} in {folder} or the installed "
                f"packages; create {folder / (module_name.replace('.', '/') + '.py')} or fix the name"
            ) from None
        raise PipelineError(_import_failure(reference, exc, folder)) from exc
    except Exception as exc:
        raise PipelineError(_import_failure(reference, exc, folder)) from exc
    function = getattr(module, function_name, None)
    if not callable(function):
        public = sorted(
            name
            for name, value in vars(module).items()
            if inspect.isfunction(value) and not name.startswith("_") and value.__module__ == module.__name__
        )
        raise PipelineError(
            f"pipeline {reference!r}: module {module_name} ({getattr(module, '__file__', '?')}) has no "
            f"function {function_name!r}; its functions: {', '.join(public) or '(none)'}"
        )
    return function


def _import_failure(reference: str, exc: BaseException, folder: Path) -> str:
    """The message for a module that raised while it was imported: the error and the user's line.

    The line is the deepest frame in the pipelines folder (the user's code), else the first frame
    of the import itself (the module's line that raised, or that imported what raised); neither the
    import machinery nor a library's internals say where to look.
    """
    frames = [
        frame
        for frame in traceback.extract_tb(exc.__traceback__)
        if not frame.filename.startswith("<frozen ")
        and Path(frame.filename).resolve() != Path(__file__).resolve()
    ]
    resolved = folder.resolve()
    own = [frame for frame in frames if resolved in Path(frame.filename).resolve().parents]
    frame = own[-1] if own else (frames[0] if frames else None)
    where = f" ({frame.filename}, line {frame.lineno})" if frame else ""
    message = f"pipeline {reference!r}: importing its module failed{where}: {type(exc).__name__}: {exc}"
    if NO_SESSION_ERROR in str(exc):
        message = message.rstrip(".") + (
            "; hubflow imports the module before Spark starts, to check it: give a module-level udf its "
            "return type as a DataType (LongType(), not 'long'), or create what needs Spark inside the "
            "function"
        )
    return message


@dataclass(frozen=True)
class Binding:
    """How hubflow calls one pipeline function: which parameters get sources, params, the session."""

    reference: str
    function: Callable[..., Any]
    sources: tuple[str, ...]
    takes_params: bool
    takes_spark: bool
    params_model: type[BaseModel] | None
    #: The function takes ``context`` and starts its own queries (no source parameters then).
    takes_context: bool = False

    def call(
        self, frames: Mapping[str, Any], params: Mapping[str, Any], spark: Any = None, context: Any = None
    ) -> Any:
        """Call the function with each bound source's frame, the params (as its model), the session
        and the context, as its parameters ask."""
        arguments = {name: frames[name] for name in self.sources}
        if self.takes_params:
            arguments[PARAMS] = self.validated_params(params)
        if self.takes_spark:
            arguments[SPARK] = spark
        if self.takes_context:
            arguments[CONTEXT] = context
        return self.function(**arguments)

    def validated_params(self, params: Mapping[str, Any]) -> Any:
        """``params`` as the function's model (a plain dict without one); each problem names its key.

        A key the model does not declare is a problem too (a misspelt key would otherwise fall back
        to its default silently), unless the model says what to do with more (``extra``).
        """
        model = self.params_model
        if model is None:
            return dict(params)
        problems = []
        if model.model_config.get("extra") is None:
            known = set(model.model_fields) | {f.alias for f in model.model_fields.values() if f.alias}
            problems = [
                f"params.{key}: unknown key; {model.__name__} takes {', '.join(model.model_fields) or 'none'}"
                for key in params
                if key not in known
            ]
        try:
            value = model.model_validate(dict(params))
        except ValidationError as exc:
            problems += [
                f"params.{'.'.join(str(p) for p in error['loc']) or '(top level)'}: {error['msg']}"
                for error in exc.errors()
            ]
        if problems:
            raise PipelineError(
                f"pipeline {self.reference!r}: params do not fit {model.__name__}: {'; '.join(problems)}"
            )
        return value


def bind(function: Callable[..., Any], reference: str, source_names: Sequence[str]) -> Binding:
    """Match the function's parameters with the config's source names; every mismatch in one error."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError) as exc:
        raise PipelineError(f"pipeline {reference!r}: cannot read its parameters: {exc}") from None
    valid = [*source_names, PARAMS, SPARK, CONTEXT]
    problems: list[str] = []
    bound: list[str] = []
    takes_params = takes_spark = takes_context = False
    for parameter in signature.parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD, parameter.POSITIONAL_ONLY):
            problems.append(
                f"parameter {parameter.name!r} must be an ordinary named parameter (no *args, **kwargs or /)"
            )
        elif parameter.name in source_names:
            bound.append(parameter.name)
        elif parameter.name == PARAMS:
            takes_params = True
        elif parameter.name == SPARK:
            takes_spark = True
        elif parameter.name == CONTEXT:
            takes_context = True
        elif parameter.default is parameter.empty:
            problems.append(
                f"parameter {parameter.name!r} names no source of the config; valid names: {', '.join(valid)}"
            )
    if takes_context and (bound or takes_spark):
        others = ", ".join(repr(n) for n in [*bound, *([SPARK] if takes_spark else [])])
        problems.append(
            f"a function that takes {CONTEXT!r} starts its own queries and reads its sources and session "
            f"through it (context.read(name), context.spark); remove parameter {others}"
        )
    unused = [name for name in source_names if name not in bound]
    if unused and not takes_context:
        problems.append(
            f"source {', '.join(repr(n) for n in unused)} of the config is taken by no parameter; "
            f"add a parameter of that name or remove the source"
        )
    if problems:
        raise PipelineError(f"pipeline {reference!r}: " + "; ".join(problems))
    model = _params_model(function, reference) if takes_params else None
    return Binding(reference, function, tuple(bound), takes_params, takes_spark, model, takes_context)


def _params_model(function: Callable[..., Any], reference: str) -> type[BaseModel] | None:
    """The pydantic model the ``params`` parameter is annotated with, if any."""
    try:
        hints = typing.get_type_hints(function)
    except Exception as exc:
        raise PipelineError(f"pipeline {reference!r}: its type annotations do not resolve: {exc}") from None
    annotation = hints.get(PARAMS)
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return annotation
    return None


def sink_frames(result: Any, reference: str, sink_names: Sequence[str]) -> dict[str, Any]:
    """The function's result as ``{sink name: DataFrame}``, checked against the config's sinks."""
    if isinstance(result, Mapping):
        returned = [str(name) for name in result]
        missing = [name for name in sink_names if name not in result]
        extra = [name for name in returned if name not in sink_names]
        if missing or extra:
            parts = []
            if missing:
                parts.append(f"sink {', '.join(repr(n) for n in missing)} of the config is not returned")
            if extra:
                parts.append(
                    f"it returns {', '.join(repr(n) for n in extra)}, which the config does not declare"
                )
            raise PipelineError(
                f"pipeline {reference!r}: "
                + "; ".join(parts)
                + f"; the config's sinks: {', '.join(sink_names)}"
            )
        frames = {name: result[name] for name in sink_names}
    elif len(sink_names) == 1:
        frames = {sink_names[0]: result}
    else:
        raise PipelineError(
            f"pipeline {reference!r}: the config declares {len(sink_names)} sinks ({', '.join(sink_names)}); "
            "return a mapping of sink name to DataFrame"
        )
    for name, frame in frames.items():
        if not _is_dataframe(frame):
            raise PipelineError(
                f"pipeline {reference!r}: sink {name!r} got {type(frame).__name__}, not a DataFrame"
            )
    return frames


def _is_dataframe(value: Any) -> bool:
    """Whether ``value`` is a PySpark DataFrame (classic or Spark Connect), without importing pyspark."""
    return any(
        cls.__name__ == "DataFrame" and cls.__module__.startswith("pyspark.") for cls in type(value).__mro__
    )
