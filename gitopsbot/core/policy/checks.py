"""The closed set of check kinds a rule may name (``docs/policies.md``, "Check kinds"): what
each looks at in a ``PolicyInput`` and the findings it returns, with the parameters each
kind accepts."""

from __future__ import annotations

import difflib
import fnmatch
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from gitopsbot.core.charts.chart import Chart, ChartIndex, major, semver_key
from gitopsbot.core.charts.crd_diff import CrdDiff
from gitopsbot.core.charts.images import ImageChange
from gitopsbot.core.charts.observed import DeployedState
from gitopsbot.core.charts.values_diff import (
    ValuesDiff,
    get_path,
    has_path,
    leaf_paths,
    merge_values,
)
from gitopsbot.core.fleet.model import ClusterSpec, Component
from gitopsbot.core.fleet.secrets import find_secret_literals, join_path, split_path
from gitopsbot.errors import Problem


@dataclass(frozen=True, slots=True)
class PolicyInput:
    """Everything a check may look at. Absent parts (None) mean "cannot be judged here"."""

    cluster: ClusterSpec
    deployed: DeployedState | None = None
    target_chart: Chart | None = None
    deployed_chart: Chart | None = None
    index: ChartIndex | None = None
    values_diff: ValuesDiff | None = None
    images: tuple[ImageChange, ...] = ()
    crd_diff: CrdDiff | None = None
    schema_problems: tuple[Problem, ...] = ()
    # Where charts were read from, for messages ("" → the release's repository URL), and
    # why the target chart could not be read ("" → it was, or nobody tried).
    chart_source: str = ""
    chart_problem: str = ""

    @property
    def desired_values(self) -> Mapping[str, Any]:
        return self.cluster.values

    def effective_desired(self) -> Mapping[str, Any]:
        if self.target_chart is None:
            return self.cluster.values
        return merge_values(self.target_chart.values, self.cluster.values)

    def version_changes(self) -> bool:
        """Chart or app version moves (or nothing is deployed to compare with: False)."""
        if self.deployed is None or self.target_chart is None:
            return False
        return (
            self.deployed.chart_version != self.target_chart.version
            or self.deployed.app_version != self.target_chart.app_version
        )


# A finding is a message, or (message, anchor): a values path ("controller.replicaCount") or a
# "<file>:<dotted key>" of another cluster file ("rollout.yaml:pools.gpu.phases") to locate it.
Finding = str | tuple[str, str]


Check = Callable[[PolicyInput, Mapping[str, Any]], Sequence[Finding]]


_MAX_LISTED = 8


def _listed(paths: list[str]) -> str:
    head = ", ".join(paths[:_MAX_LISTED])
    return head + (f" and {len(paths) - _MAX_LISTED} more" if len(paths) > _MAX_LISTED else "")


def _image(inp: PolicyInput, component: str) -> ImageChange | None:
    return next((i for i in inp.images if i.component == component), None)


def check_app_major_change(inp: PolicyInput, params: Mapping[str, Any]) -> list[str]:
    if inp.deployed is None or inp.target_chart is None:
        return []
    try:
        a, b = major(inp.deployed.app_version), major(inp.target_chart.app_version)
    except ValueError:
        return []
    want_from, want_to = params.get("from_major"), params.get("to_major")
    if (
        a == b
        or (want_from is not None and a != want_from)
        or (want_to is not None and b != want_to)
    ):
        return []
    return [
        f"app version {inp.deployed.app_version} -> {inp.target_chart.app_version} crosses "
        f"major {a} -> {b}; the app major decides, not the chart's (F5)"
    ]


def check_hypervisor_image_not_explicit(
    inp: PolicyInput, params: Mapping[str, Any]
) -> list[Finding]:
    path = ("cluster", "hypervisorImage")
    if not has_path(inp.desired_values, path) or not get_path(inp.desired_values, path):
        return [
            (
                "cluster.hypervisorImage is not set in values.yaml: set it explicitly (R4, F2)",
                "cluster",
            )
        ]
    hv = _image(inp, "hypervisor")
    # A pin that stays put while the default moved needs a word (F2) — unless the pin already
    # is the new default: then the image and the chart agree, nothing is left behind.
    if (
        hv is not None
        and hv.before
        and not hv.changed
        and hv.default_moved
        and hv.after != hv.new_default
    ):
        return [
            (
                f"hypervisor image stays {hv.after} while the chart's default moved; "
                "confirm the hypervisor should not follow (R4)",
                "cluster.hypervisorImage",
            )
        ]
    return []


def check_controller_replicas_below(inp: PolicyInput, params: Mapping[str, Any]) -> list[Finding]:
    minimum = int(params.get("min", 2))
    count = get_path(inp.effective_desired(), ("controller", "replicaCount"), 1)
    if isinstance(count, int) and not isinstance(count, bool) and count < minimum:
        return [
            (
                f"controller.replicaCount is {count}; at least {minimum} keep the webhook up (R5)",
                "controller.replicaCount",
            )
        ]
    return []


def check_values_keys_dropped(inp: PolicyInput, params: Mapping[str, Any]) -> list[str]:
    if inp.deployed is None:
        return []
    ignore = tuple(str(p) for p in params.get("ignore", ()))
    # Secrets are merged in at apply time, so their absence from values.yaml is expected.
    merged_later = {s.values_path for s in inp.cluster.credentials.secrets}
    dropped = [
        path
        for path in (join_path(p) for p in _missing(inp.deployed.values, inp.desired_values, ()))
        if path not in merged_later and not any(_matches(path, p) for p in ignore)
    ]
    if not dropped:
        return []
    return [
        f"values.yaml lacks {len(dropped)} key(s) the deployed release has: {_listed(dropped)}; "
        "Helm would reset them to chart defaults (R8)"
    ]


def _missing(old: Any, new: Any, parts: tuple[str | int, ...]) -> list[tuple[str | int, ...]]:
    """Leaf paths of ``old`` that ``new`` lacks (a missing subtree counts as its leaves)."""
    if isinstance(old, Mapping) and old:
        if not isinstance(new, Mapping):
            return [] if new is not None else leaf_paths(old, parts)
        out: list[tuple[str | int, ...]] = []
        for key, child in old.items():
            if key in new:
                out.extend(_missing(child, new[key], (*parts, key)))
            else:
                out.extend(leaf_paths(child, (*parts, key)))
        return out
    return []


def check_switch_without_ack(inp: PolicyInput, params: Mapping[str, Any]) -> list[Finding]:
    comp = Component(str(params.get("component", "client")))
    pools = [p.name for p in inp.cluster.rollout.pools if p.switch(comp)]
    if not pools:
        return []
    switch = f"autoUpdate{comp.value.capitalize()}"
    return [
        (f"{switch} is on in pool(s) {_listed(pools)}", f"rollout.yaml:pools.{pools[0]}.{switch}")
    ]


@lru_cache(maxsize=1024)
def _glob(pattern: str) -> re.Pattern[str]:
    return re.compile(fnmatch.translate(pattern))


def _matches(path: str, pattern: str) -> bool:
    return (
        path == pattern
        or path.startswith((pattern + ".", pattern + "["))
        or (
            ("*" in pattern or "?" in pattern or "[" in pattern)
            and _glob(pattern).match(path) is not None
        )
    )


def check_changed_together(inp: PolicyInput, params: Mapping[str, Any]) -> list[Finding]:
    if inp.values_diff is None or not inp.version_changes():
        return []
    patterns = [str(p) for p in params.get("paths", ())]
    hits = [c.path for c in inp.values_diff.changes if any(_matches(c.path, p) for p in patterns)]
    if not hits:
        return []
    assert inp.deployed is not None and inp.target_chart is not None
    return [
        (
            f"{_listed(hits)} changes in the same upgrade as chart "
            f"{inp.deployed.chart_version} -> {inp.target_chart.version}; change it on its own",
            hits[0],
        )
    ]


def restart_needed(
    diff: ValuesDiff | None, images: tuple[ImageChange, ...], prefixes: tuple[str, ...]
) -> list[str]:
    """R24: config under ``prefixes`` changed but the controller image did not, so
    ``helm upgrade`` will not restart the controller. Returns the changed prefixes."""
    if diff is None:
        return []
    controller = next((i for i in images if i.component == "controller"), None)
    if controller is not None and controller.changed:
        return []
    return [p for p in prefixes if diff.touches(p)]


def check_restart_only_change(inp: PolicyInput, params: Mapping[str, Any]) -> list[str]:
    if inp.target_chart is None:
        # Without the target chart its images are unknown (a new controller image restarts the
        # controller anyway) and the plan has no steps to add a restart to: CHART-NOT-IN-INDEX
        # is the finding, not R24.
        return []
    prefixes = tuple(str(p) for p in params.get("paths", ("dynamicConfig", "schedulerConfig")))
    hit = restart_needed(inp.values_diff, inp.images, prefixes)
    if not hit:
        return []
    return [
        f"{', '.join(hit)} changed without a controller image change: the plan adds "
        "`rollout restart` of the controller (R24)"
    ]


def check_phase_without_switch(inp: PolicyInput, params: Mapping[str, Any]) -> list[Finding]:
    out: list[Finding] = []
    for pool in inp.cluster.rollout.pools:
        for comp in pool.phases:
            if not pool.switch(comp):
                out.append(
                    (
                        f"pool {pool.name}: phase {comp.value} waits on a component whose "
                        f"autoUpdate{comp.value.capitalize()} is off: it would never finish (F3)",
                        f"rollout.yaml:pools.{pool.name}.phases",
                    )
                )
    return out


def check_app_version_downgrade(inp: PolicyInput, params: Mapping[str, Any]) -> list[str]:
    if inp.deployed is None or inp.target_chart is None:
        return []
    try:
        lower = semver_key(inp.target_chart.app_version) < semver_key(inp.deployed.app_version)
    except ValueError:
        return []
    if not lower:
        return []
    return [
        f"chart {inp.target_chart.version} ships app {inp.target_chart.app_version}, lower than "
        f"the deployed {inp.deployed.app_version} (F5: appVersion is not monotonic)"
    ]


def check_crd_drops_version(inp: PolicyInput, params: Mapping[str, Any]) -> list[str]:
    if inp.crd_diff is None:
        return []
    from gitopsbot.core.charts.crd_diff import CrdChangeKind

    kinds = {
        CrdChangeKind.CRD_REMOVED,
        CrdChangeKind.VERSION_REMOVED,
        CrdChangeKind.STORAGE_CHANGED,
    }
    return [
        f"{c.crd}: {c.kind.value}"
        + (f" {c.version}" if c.version else "")
        + (f" ({c.detail})" if c.detail else "")
        for c in inp.crd_diff.changes
        if c.kind in kinds
    ]


def check_batch_percentage_at_least(inp: PolicyInput, params: Mapping[str, Any]) -> list[Finding]:
    limit = int(params.get("value", 100))
    return [
        (
            f"pool {p.name}: batchPercentage {p.batch_percentage} rolls "
            f"{'every node at once' if p.batch_percentage >= 100 else 'too many nodes per batch'}",
            f"rollout.yaml:pools.{p.name}.batchPercentage",
        )
        for p in inp.cluster.rollout.pools
        if p.batch_percentage >= limit
    ]


def check_chart_version_not_in_index(inp: PolicyInput, params: Mapping[str, Any]) -> list[Finding]:
    rel = inp.cluster.release
    source = inp.chart_source or rel.chart_repo_url
    anchor = "release.yaml:chart.version"
    if inp.index is None or inp.index.get(rel.chart_name, rel.version) is not None:
        if inp.chart_problem:  # listed, yet unreadable: still no chart to install
            return [
                (
                    f"chart {rel.chart_name} {rel.version} could not be read from {source}: "
                    f"{inp.chart_problem}",
                    anchor,
                )
            ]
        return []
    known = [v.version for v in inp.index.versions(rel.chart_name)[:5]]
    return [
        (
            f"chart {rel.chart_name} {rel.version} is not in {source}"
            + (f" (newest: {', '.join(known)})" if known else ""),
            anchor,
        )
    ]


def check_values_schema(inp: PolicyInput, params: Mapping[str, Any]) -> list[str]:
    return [str(p) for p in inp.schema_problems]


def check_values_unknown_keys(inp: PolicyInput, params: Mapping[str, Any]) -> list[Finding]:
    """Keys of values.yaml the target chart does not know: Helm ignores them silently (a typo
    such as ``replicaCnt``). A key is known when the chart's default values have it or its
    ``values.schema.json`` lists it under ``properties`` (a real chart's schema often lists
    less than its defaults, and lets unlisted keys through). Below an open place nothing is
    judged: an empty or non-mapping default (``podAnnotations: {}``) with no schema
    properties, or a schema node with ``additionalProperties``/``patternProperties``. Only the
    topmost unknown key of a branch is reported, with the nearest known key."""
    chart = inp.target_chart
    if chart is None:
        return []
    out: list[Finding] = []

    def known_keys(defaults: Any, schema: Any) -> tuple[list[str], bool]:
        """(keys known here, whether this place is closed)."""
        keys: list[str] = []
        closed = False
        if isinstance(defaults, Mapping) and defaults:
            keys += [str(k) for k in defaults]
            closed = True
        if isinstance(schema, Mapping):
            props = schema.get("properties")
            if isinstance(props, Mapping) and props:
                keys += [str(k) for k in props if str(k) not in keys]
                closed = True
            if schema.get("additionalProperties") or schema.get("patternProperties"):
                closed = False
        return keys, closed

    def walk(desired: Mapping[Any, Any], defaults: Any, schema: Any, path: tuple[str, ...]) -> None:
        keys, closed = known_keys(defaults, schema)
        if not closed:
            return
        for key, value in desired.items():
            here = (*path, str(key))
            if str(key) not in keys:
                hint = suggest(str(key), keys)
                where = join_path(path) or "the top level"
                text = f"{join_path(here)}: the chart has no such key under {where}"
                out.append((text + (f" ({hint})" if hint else ""), join_path(here)))
                continue
            if isinstance(value, Mapping):
                below = defaults.get(key) if isinstance(defaults, Mapping) else None
                props = schema.get("properties") if isinstance(schema, Mapping) else None
                sub = props.get(str(key)) if isinstance(props, Mapping) else None
                walk(value, below, sub, here)

    walk(inp.desired_values, chart.values, chart.schema, ())
    return out


def check_secret_literal(inp: PolicyInput, params: Mapping[str, Any]) -> list[Finding]:
    found = find_secret_literals(inp.desired_values, inp.cluster.credentials.secret_paths)
    return [
        (f"{p} holds a secret-looking literal: reference it in credentials.yaml instead", p)
        for p in found
    ]


OPS = ("eq", "ne", "lt", "gt", "exists", "absent", "changed")


def check_path(inp: PolicyInput, params: Mapping[str, Any]) -> list[Finding]:
    path = str(params["path"])
    op = str(params["op"])
    parts = split_path(path)
    scope = str(params.get("values", "effective"))
    values = inp.effective_desired() if scope == "effective" else inp.desired_values
    present = has_path(values, parts)
    actual = get_path(values, parts)
    want = params.get("value")
    fired = False
    if op == "exists":
        fired = present
    elif op == "absent":
        fired = not present
    elif op == "changed":
        fired = inp.values_diff is not None and inp.values_diff.touches(path)
    elif present:
        try:
            fired = {
                "eq": lambda: actual == want,
                "ne": lambda: actual != want,
                "lt": lambda: actual < want,
                "gt": lambda: actual > want,
            }[op]()
        except TypeError:
            fired = False
    if not fired:
        return []
    shown = "" if op in {"exists", "absent", "changed"} else f" {op} {want!r} (is {actual!r})"
    return [(f"{path} {op if not shown else ''}{shown}".replace("  ", " ").strip(), path)]


CHECKS: Mapping[str, Check] = {
    "app_major_change": check_app_major_change,
    "hypervisor_image_not_explicit": check_hypervisor_image_not_explicit,
    "controller_replicas_below": check_controller_replicas_below,
    "values_keys_dropped": check_values_keys_dropped,
    "switch_without_ack": check_switch_without_ack,
    "changed_together": check_changed_together,
    "restart_only_change": check_restart_only_change,
    "phase_without_switch": check_phase_without_switch,
    "app_version_downgrade": check_app_version_downgrade,
    "crd_drops_version": check_crd_drops_version,
    "batch_percentage_at_least": check_batch_percentage_at_least,
    "chart_version_not_in_index": check_chart_version_not_in_index,
    "values_schema": check_values_schema,
    "values_unknown_keys": check_values_unknown_keys,
    "secret_literal": check_secret_literal,
    "path": check_path,
}


# Params each kind accepts (unknown params are errors, with a suggestion).
PARAMS: Mapping[str, frozenset[str]] = {
    "app_major_change": frozenset({"from_major", "to_major"}),
    "controller_replicas_below": frozenset({"min"}),
    "values_keys_dropped": frozenset({"ignore"}),
    "switch_without_ack": frozenset({"component"}),
    "changed_together": frozenset({"paths"}),
    "restart_only_change": frozenset({"paths"}),
    "batch_percentage_at_least": frozenset({"value"}),
    "path": frozenset({"path", "op", "value", "values"}),
}


def suggest(word: str, known: tuple[str, ...] | list[str]) -> str:
    near = difflib.get_close_matches(word, known, n=1)
    return f"did you mean {near[0]!r}?" if near else f"known: {', '.join(known)}"
