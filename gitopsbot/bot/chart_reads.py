"""The chart a release names, or why it cannot be read.

The apply gate, the proposer's plans and ``gitopsbot plan`` judge a change with its target
chart. A version the repository does not have (or an archive that does not read as a chart)
is not an error there but the CHART-NOT-IN-INDEX deny (``core.planning.plan.make_plan``'s
``chart_problem``): the person reviewing the change must see why it is denied. An
unreachable repository still raises ChartUnavailable (retry later).
"""

from __future__ import annotations

from gitopsbot.core.charts.chart import Chart
from gitopsbot.core.fleet.model import ReleaseSpec
from gitopsbot.errors import ChartInvalid, ChartNotFound
from gitopsbot.ports.charts import ChartSource


def target_chart(source: ChartSource, rel: ReleaseSpec) -> tuple[Chart | None, str]:
    """(``rel``'s chart, "") or (None, why it cannot be read)."""
    try:
        return source.chart(rel.chart_repo_url, rel.chart_name, rel.version), ""
    except (ChartNotFound, ChartInvalid) as exc:
        return None, str(exc)
