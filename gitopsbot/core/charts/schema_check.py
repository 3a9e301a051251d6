"""Validate desired values against the chart's ``values.schema.json`` (what ``helm`` enforces).

Errors carry the values path (``controller.replicaCount``) and, when the caller can locate a
path in the values file, its file and line. The schema's ``default``s are documentation only:
Helm does not apply them (tensorfusion-facts §1.6), so neither do we.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from jsonschema import Draft7Validator, validators
from jsonschema.exceptions import SchemaError

from gitopsbot.core.charts.chart import Chart
from gitopsbot.core.fleet.model import Location
from gitopsbot.core.fleet.secrets import is_secret_path, join_path
from gitopsbot.errors import Problem

Locate = Callable[[str], Location | None]

# Validators by chart digest: building one compiles the schema; plans for many clusters share it.
_VALIDATORS: dict[str, Any] = {}
_MAX_CACHED = 64


def _validator(chart: Chart) -> Any:
    key = chart.digest or f"{chart.name}@{chart.version}"
    cached = _VALIDATORS.get(key)
    if cached is None:
        assert chart.schema is not None
        cls = validators.validator_for(chart.schema, default=Draft7Validator)
        cached = cls(dict(chart.schema))
        if len(_VALIDATORS) >= _MAX_CACHED:
            _VALIDATORS.pop(next(iter(_VALIDATORS)))
        _VALIDATORS[key] = cached
    return cached


def check_values(
    values: Mapping[str, Any],
    chart: Chart,
    *,
    file: str = "values.yaml",
    locate: Locate | None = None,
) -> tuple[Problem, ...]:
    """Problems of ``values`` under ``chart``'s schema, in path order; () when it has none."""
    if chart.schema is None:
        return ()
    try:
        validator = _validator(chart)
        found = list(validator.iter_errors(dict(values)))
    except SchemaError as exc:
        return (Problem(f"{chart.name}-{chart.version}/values.schema.json", 0, 0, "", exc.message),)
    problems: list[Problem] = []
    for err in sorted(found, key=lambda e: [str(p) for p in e.absolute_path]):
        path = join_path(tuple(err.absolute_path)) if err.absolute_path else ""
        loc = locate(path) if (locate and path) else None
        # jsonschema quotes the offending instance; never echo a secret into a message.
        secret = bool(path) and is_secret_path(path)
        message = _message(err, secret)
        problems.append(
            Problem(
                loc.file if loc else file,
                loc.line if loc else 0,
                loc.column if loc else 0,
                path or "(top level)",
                f"{message} (chart {chart.name} {chart.version} values.schema.json)",
            )
        )
    return tuple(problems)


def _message(err: Any, secret: bool) -> str:
    validator = err.validator
    if validator == "type":
        return f"must be of type {err.validator_value}"
    if validator == "required":
        return str(err.message)
    if validator == "enum":
        return f"must be one of {list(err.validator_value)}"
    if validator in {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}:
        return f"{validator} is {err.validator_value}" + (
            "" if secret else f", got {err.instance!r}"
        )
    return "invalid value" if secret else str(err.message)
