"""Failures a test injects into a fake: the next ``times`` calls of an operation raise ``error``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class _Injected:
    error: Exception
    times: int
