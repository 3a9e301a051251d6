"""The metric names and label names a PromQL expression uses, for checking a dashboard
against what the bot exports (tests/fleet_page/test_fleet_page_sandbox.py). Small on
purpose: the dashboard's expressions are selectors, aggregations with ``by (...)``,
functions, ranges and arithmetic; nothing here needs a full PromQL parser."""

from __future__ import annotations

import re

KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
    "unless", "offset", "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk",
    "bottomk", "quantile", "count_values", "group", "inf", "nan",
}  # fmt: skip
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_MATCHER = re.compile(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)\s*\"")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)")
_IDENT = re.compile(r"(?<![\w:.$])([a-zA-Z_:][\w:]*)(?![\w:])(\s*\()?")


def names(expr: str) -> tuple[set[str], set[str]]:
    """(metric names, label names) in ``expr``; ``$variables`` and ``[ranges]`` ignored."""
    labels = set(_MATCHER.findall(expr))
    text = _STRING.sub('""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)  # matchers: their labels are taken above
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges
    for found in _GROUPING.findall(text):
        labels.update(x.strip() for x in found.split(",") if x.strip())
    text = _GROUPING.sub(" ", text)
    metrics = set()
    for ident, call in _IDENT.findall(text):
        if call or ident.lower() in KEYWORDS or ident.startswith("$"):
            continue
        metrics.add(ident)
    return metrics, labels


def legend_labels(legend: str) -> set[str]:
    return set(re.findall(r"\{\{\s*([a-zA-Z_]\w*)\s*\}\}", legend))


# Labels Prometheus adds when it scrapes (the target's), not the bot's.
TARGET_LABELS = {"instance", "job", "pod", "namespace"}


class Exposition:
    """What a scrape of ``/metrics`` says: each sample name with the label names its samples
    carry, and the sample names of every family declared (``# TYPE``), samples or not."""

    def __init__(self, text: str) -> None:
        from prometheus_client.parser import text_string_to_metric_families

        self.labels: dict[str, set[str]] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                self.labels.setdefault(s.name, set()).update(s.labels)
        self.declared: set[str] = set()
        suffixes = {
            "counter": ("_total", "_created"),
            "histogram": ("_bucket", "_sum", "_count", "_created"),
            "summary": ("_sum", "_count", "_created"),
        }
        for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, flags=re.M):
            base = name.removesuffix("_total") if kind == "counter" else name
            self.declared.update([name, *(base + s for s in suffixes.get(kind, ()))])

    def problems(self, expr: str, legend: str = "") -> tuple[list[str], set[str]]:
        """(what is wrong with ``expr``, the metrics it names that have no sample here)."""
        metrics, labels = names(expr)
        labels |= legend_labels(legend)
        wrong = [f"{m}: not exported" for m in sorted(metrics) if m not in self.declared]
        unsampled = {m for m in metrics if m in self.declared and m not in self.labels}
        carried = set().union(*(self.labels.get(m, set()) for m in metrics))
        if metrics and not unsampled:
            wrong += [
                f"label {label}: on no sample of {', '.join(sorted(metrics))}"
                for label in sorted(labels - carried - TARGET_LABELS)
            ]
        return wrong, unsampled
