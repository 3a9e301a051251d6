"""Where chart metadata comes from: a Helm repository over HTTP, or local directories/archives."""

from __future__ import annotations

from typing import Protocol

from gitopsbot.core.chart import Chart, ChartIndex


class ChartSource(Protocol):
    def index(self, repo_url: str, name: str = "") -> ChartIndex:
        """The repository's index. Raises ChartUnavailable (retry) or ChartNotFound.
        ``name``: the chart whose versions are wanted. An HTTP repository's index holds every
        chart; an OCI repository lists versions per chart (its tags), so there it is
        required."""
        ...

    def chart(self, repo_url: str, name: str, version: str) -> Chart:
        """One chart version. Raises ChartNotFound, ChartUnavailable or ChartInvalid."""
        ...
