"""Values keys the chart does not know, for a chart without ``values.schema.json``: a typo such
as ``replicaCnt`` passes Helm silently (the template reads ``replicaCount`` and gets the
default), so ``gitopsbot validate`` warns, naming the nearest key the chart has. Pure.

A key is judged only where the chart's own ``values.yaml`` has a non-empty mapping: an empty
mapping (``nodeSelector: {}``, ``resources: {}``), a list or a scalar default is open to any
keys, as chart templates pass those through whole. Warnings, never errors: a chart's defaults
do not list every key its templates read.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping
from typing import Any

from gitopsbot.core.secrets import join_path


def unknown_keys(values: Mapping[str, Any], defaults: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(values path, hint) for each key of ``values`` that ``defaults`` does not have where
    it has a non-empty mapping; the hint is "did you mean 'x'?" or ""."""
    return list(_walk(values, defaults, ()))


def _walk(
    values: Mapping[str, Any], defaults: Mapping[str, Any], parts: tuple[str | int, ...]
) -> Iterator[tuple[str, str]]:
    for key, value in values.items():
        sub = (*parts, str(key))
        if key not in defaults:
            close = difflib.get_close_matches(str(key), [str(k) for k in defaults], n=1)
            yield join_path(sub), f"did you mean '{close[0]}'?" if close else ""
            continue
        default = defaults[key]
        if isinstance(value, Mapping) and isinstance(default, Mapping) and default:
            yield from _walk(value, default, sub)
