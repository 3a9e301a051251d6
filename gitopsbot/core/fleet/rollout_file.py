"""``clusters/<name>/rollout.yaml``: per-pool rollout policy, maintenance windows."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Collection
from typing import Any

from croniter import CroniterError, croniter

from gitopsbot.core.fleet.fields import DNS_LABEL, TIMEZONE, FieldReader, join, kind_of, suggest
from gitopsbot.core.fleet.gate_specs import PrometheusEndpoint
from gitopsbot.core.fleet.gates_file import (
    GATE_POOL_KEYS,
    PROMETHEUS_KEY,
    read_gate_settings,
    read_prometheus,
)
from gitopsbot.core.fleet.layout import ROLLOUT_FILE
from gitopsbot.core.fleet.located_yaml import LocatedList, LocatedMap
from gitopsbot.core.fleet.model import (
    Component,
    Location,
    MaintenanceWindow,
    PoolPolicy,
    RolloutPolicy,
    Share,
)
from gitopsbot.core.fleet.workload_file import WORKLOAD_POOL_KEYS, read_workload_awareness

_ROLLOUT_KEYS = (
    "order",
    "maxParallelPools",
    "canaryPool",
    "onFailure",
    "controllerReadyTimeout",
    "acknowledgements",
    "paused",
    "requireApproval",
    "approve",
    "pools",
    PROMETHEUS_KEY,
)
_POOL_KEYS = (
    "autoUpdateHypervisor",
    "autoUpdateWorker",
    "autoUpdateClient",
    "batchPercentage",
    "batchInterval",
    "maintenanceWindow",
    "maxDuration",
    "stallTimeout",
    "phases",
    "nodes",
    "canaryBatchPercentage",
    "paused",
    "requireApproval",
    "approve",
    "maxUnavailable",
    "windowFit",
    *GATE_POOL_KEYS,
    *WORKLOAD_POOL_KEYS,
)
_WINDOW_KEYS = ("cron", "duration", "timeZone")
_ON_FAILURE = ("rollback", "revert-pr", "halt")
_COMPONENTS = tuple(c.value for c in Component)


# A fixed instant to search from (core reads no clock): cron matches repeat at least every 28
# years, so a cron that matches after this instant and before it matches at any time.
_SEARCH_FROM = dt.datetime(2001, 1, 1, tzinfo=dt.UTC)


_CRON_FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")
_CRON_NAMES = {
    3: ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"),
    4: ("sun", "mon", "tue", "wed", "thu", "fri", "sat"),
}


def backwards_range(cron: str) -> str:
    """The first range of ``cron`` written high-low (``1-0``, ``22-2``), named by its field
    ("range 22-2 of the hour field"); "" when none. croniter wraps such a range around
    silently where cron(8) refuses it: a window a person meant as 22:00-02:00 would open at
    other hours than they read."""
    fields = cron.split()
    if len(fields) != 5:
        return ""
    for index, field in enumerate(fields):
        for part in field.split(","):
            span = part.split("/", 1)[0]
            if "-" not in span:
                continue
            low, high = (_cron_value(index, v) for v in span.split("-", 1))
            if low is not None and high is not None and low > high:
                return f"range {span} of the {_CRON_FIELDS[index]} field"
    return ""


def _cron_value(index: int, text: str) -> int | None:
    if text.isdigit():
        return int(text)
    names = _CRON_NAMES.get(index, ())
    lowered = text.lower()
    if lowered in names:
        return names.index(lowered) + (1 if index == 3 else 0)
    return None


def fires(cron: str) -> bool:
    """Does the (valid) cron expression ever match? ``0 0 30 2 *`` does not."""
    try:
        croniter(cron, _SEARCH_FROM).get_next(dt.datetime)
        croniter(cron, _SEARCH_FROM).get_prev(dt.datetime)
    except CroniterError:
        return False
    return True


def _cron_problem(cron: str) -> tuple[str, str] | None:
    """What is wrong with a window's cron expression and how to write it (None: fine)."""
    fields = cron.split()
    well_formed = len(fields) == 5 or (len(fields) == 1 and cron.startswith("@"))
    if not well_formed or not croniter.is_valid(cron):
        return (
            f"'{cron}' is not a valid cron expression",
            "five fields: minute hour day-of-month month day-of-week, e.g. '0 2 * * 6'",
        )
    if backwards := backwards_range(cron):
        return (
            f"'{cron}': the {backwards} runs backwards",
            "write ranges low-high; a range across midnight or the week's end is two, "
            "e.g. hours '22-23,0-2'",
        )
    if not fires(cron):
        return (
            f"'{cron}' never fires: no date matches it",
            "check day-of-month against month, e.g. there is no 30 February",
        )
    return None


def _window(
    r: FieldReader,
    node: Any,
    fld: str,
    at: tuple[int, int],
    known_timezones: Collection[str] | None,
) -> MaintenanceWindow | None:
    win = r.mapping(node, fld, at, _WINDOW_KEYS)
    if win is None:
        return None
    cron = r.string(win, "cron", fld, required=True)
    problem = _cron_problem(cron) if cron else None
    if problem is not None:
        r.add(r.value_at(win, "cron"), join(fld, "cron"), *problem)
        cron = ""
    duration = r.duration(win, "duration", fld, 0, minimum=60, required=True)
    tz = r.string(
        win, "timeZone", fld, "UTC", pattern=TIMEZONE, what="time zone name (e.g. Europe/Berlin)"
    )
    if (
        known_timezones is not None
        and "timeZone" in win
        and tz not in known_timezones
        and TIMEZONE.match(tz)
    ):
        r.add(
            r.value_at(win, "timeZone"),
            join(fld, "timeZone"),
            f"unknown time zone '{tz}'",
            suggest(tz, sorted(known_timezones)),
        )
    if not cron or not duration:
        return None
    return MaintenanceWindow(cron=cron, duration_seconds=duration, timezone=tz)


def _approval(r: FieldReader, node: LocatedMap, fld: str, only: str, needs: str) -> str:
    """``requireApproval``: ``only`` (the one value allowed at this level), which needs the
    canary named by ``needs`` to be set beside it (docs/pause.md)."""
    value = r.choice(node, "requireApproval", fld, "", (only,))
    if value and not node.get(needs):
        r.add(
            r.value_at(node, "requireApproval"),
            join(fld, "requireApproval"),
            f"'{value}' needs {join(fld, needs)}: there is no canary to approve",
            f"set {needs}, or remove requireApproval",
        )
        return ""
    return value


# An operation id: ``<cluster>-<first 12 of the merge commit>`` (core.operation.operation_id).
_OPERATION_ID = re.compile(r"^(?P<cluster>[a-z0-9]([-a-z0-9]*[a-z0-9])?)-[0-9a-f]{12}$")


def _approve(r: FieldReader, node: LocatedMap, fld: str, cluster: str) -> str:
    """``approve``: the id of the operation whose awaited approvals it gives (docs/pause.md).
    Bound to that operation, so it never approves a later change; one of another cluster
    could approve nothing here, so it is refused rather than ignored."""
    value = r.string(node, "approve", fld, "")
    if not value:
        return ""
    at, where = r.value_at(node, "approve"), join(fld, "approve")
    hint = "copy the operation id from `gitopsbot status` or the bot's comment on the request"
    m = _OPERATION_ID.match(value)
    if m is None:
        r.add(
            at, where,
            f"expected an operation id such as lab-3f1c2a9b7d10 (<cluster>-<first 12 hex "
            f"digits of the merge commit>), got '{value}'",
            hint,
        )  # fmt: skip
        return ""
    if cluster and m["cluster"] != cluster:
        r.add(
            at,
            where,
            f"'{value}' is an operation of cluster '{m['cluster']}', not of '{cluster}'",
            hint,
        )
        return ""
    return value


def _share(r: FieldReader, node: LocatedMap, key: str, fld: str) -> Share | None:
    """``maxUnavailable``: a positive count (``2``) or a percentage (``"25%"``)."""
    if node.get(key) is None:
        return None
    value, at, where = node[key], r.value_at(node, key), join(fld, key)
    hint = "a node count such as 2, or a percentage of the pool's nodes such as '25%'"
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            r.add(at, where, f"must be at least 1, got {value}", hint)
            return None
        return Share(value)
    text = value.strip() if isinstance(value, str) else ""
    if text.endswith("%") and text[:-1].isdigit() and 1 <= int(text[:-1]) <= 100:
        return Share(int(text[:-1]), percent=True)
    r.add(at, where, f"expected a count or a percentage, got {kind_of(value)}", hint)
    return None


def _pool(
    r: FieldReader,
    name: str,
    node: LocatedMap,
    fld: str,
    known_timezones: Collection[str] | None,
    locations: dict[str, Location],
    prometheus: PrometheusEndpoint | None = None,
    cluster: str = "",
) -> PoolPolicy:
    d = PoolPolicy(name=name)
    r.known_keys(node, fld, _POOL_KEYS)
    for key in node:
        locations[f"{ROLLOUT_FILE}:{join(fld, key)}"] = r.loc(r.key_at(node, key))
    window = None
    if node.get("maintenanceWindow") is not None:
        window = _window(
            r,
            node["maintenanceWindow"],
            join(fld, "maintenanceWindow"),
            r.value_at(node, "maintenanceWindow"),
            known_timezones,
        )
    names, where = r.string_list(node, "phases", fld, ())
    phases: list[Component] = []
    for i, (phase, at) in enumerate(zip(names, where, strict=True)):
        if phase not in _COMPONENTS:
            r.add(at, f"{fld}.phases[{i}]", f"unknown phase '{phase}'", suggest(phase, _COMPONENTS))
        elif Component(phase) in phases:
            r.add(at, f"{fld}.phases[{i}]", f"phase '{phase}' is listed twice")
        else:
            phases.append(Component(phase))
    if "phases" in node and not names and isinstance(node["phases"], LocatedList):
        r.add(r.value_at(node, "phases"), join(fld, "phases"), "must list at least one phase")
    max_duration: int | None = r.duration(node, "maxDuration", fld, None)
    gates = read_gate_settings(r, node, fld, prometheus)
    # A phase whose switch is off (F3) is the policy engine's rule, not a format error.
    return PoolPolicy(
        name=name,
        auto_update_hypervisor=r.boolean(
            node, "autoUpdateHypervisor", fld, d.auto_update_hypervisor
        ),
        auto_update_worker=r.boolean(node, "autoUpdateWorker", fld, d.auto_update_worker),
        auto_update_client=r.boolean(node, "autoUpdateClient", fld, d.auto_update_client),
        batch_percentage=r.integer(
            node, "batchPercentage", fld, d.batch_percentage, low=1, high=100
        ),
        batch_interval_seconds=r.duration(
            node, "batchInterval", fld, d.batch_interval_seconds, minimum=0
        ),
        maintenance_window=window,
        max_duration_seconds=max_duration,
        stall_timeout_seconds=r.duration(node, "stallTimeout", fld, d.stall_timeout_seconds),
        phases=tuple(phases) or d.phases,
        nodes=r.integer(node, "nodes", fld, d.nodes, low=0),
        canary_batch_percentage=r.integer(
            node, "canaryBatchPercentage", fld, d.canary_batch_percentage, low=0, high=100
        ),
        paused=r.boolean(node, "paused", fld, d.paused),
        require_approval=_approval(r, node, fld, "canary-batch", "canaryBatchPercentage"),
        approve=_approve(r, node, fld, cluster),
        max_unavailable=_share(r, node, "maxUnavailable", fld),
        window_fit=r.boolean(node, "windowFit", fld, d.window_fit),
        gates=gates.gates,
        gate_retries=gates.retries,
        gate_retry_interval_seconds=gates.retry_interval_seconds,
        workloads=read_workload_awareness(r, node, fld),
    )


def read_rollout(
    r: FieldReader,
    doc: Any,
    known_timezones: Collection[str] | None,
    locations: dict[str, Location],
    cluster: str = "",
) -> RolloutPolicy:
    """The policy; ``cluster``: the cluster's name, which an ``approve`` must name ("" when
    not known: the id's form is still checked)."""
    d = RolloutPolicy()
    top = r.document(doc, _ROLLOUT_KEYS)
    if top is None:
        return d
    for key in top:
        locations[f"{ROLLOUT_FILE}:{key}"] = r.loc(r.key_at(top, key))
    prometheus = read_prometheus(r, top)
    pools: list[PoolPolicy] = []
    pools_node: LocatedMap | None = None
    if top.get("pools") is not None:
        pools_node = r.mapping(top["pools"], "pools", r.value_at(top, "pools"))
    for name, node in (pools_node or {}).items():
        fld = join("pools", name)
        at = r.key_at(pools_node, name)
        if not isinstance(name, str) or not DNS_LABEL.match(name):
            r.add(at, fld, "pool name must be a DNS-1123 label (lowercase letters, digits, '-')")
            continue
        if node is None:
            node = LocatedMap()
        elif not isinstance(node, LocatedMap):
            r.add(r.value_at(pools_node, name), fld, f"expected a mapping, got {kind_of(node)}")
            continue
        pools.append(_pool(r, name, node, fld, known_timezones, locations, prometheus, cluster))
    names = [p.name for p in pools]
    order, order_at = r.string_list(top, "order", "", ())
    for i, (pool, at) in enumerate(zip(order, order_at, strict=True)):
        if pool not in names:
            r.add(at, f"order[{i}]", f"unknown pool '{pool}'", suggest(pool, names))
    if len(set(order)) != len(order):
        r.add(r.value_at(top, "order"), "order", "lists a pool twice")
    canary = r.string(top, "canaryPool", "") or None
    if canary is not None and canary not in names:
        r.add(
            r.value_at(top, "canaryPool"),
            "canaryPool",
            f"unknown pool '{canary}'",
            suggest(canary, names),
        )
    acks: dict[str, str] = {}
    if top.get("acknowledgements") is not None:
        ack_node = r.mapping(
            top["acknowledgements"], "acknowledgements", r.value_at(top, "acknowledgements")
        )
        for rule, reason in (ack_node or {}).items():
            fld = join("acknowledgements", rule)
            if not isinstance(reason, str) or not reason.strip():
                r.add(
                    r.value_at(ack_node, rule),
                    fld,
                    "give the reason for acknowledging this rule as a non-empty string",
                )
                continue
            acks[str(rule)] = str(reason)
    return RolloutPolicy(
        pools=tuple(pools),
        order=order,
        max_parallel_pools=r.integer(top, "maxParallelPools", "", d.max_parallel_pools, low=1),
        canary_pool=canary,
        on_failure=r.choice(top, "onFailure", "", d.on_failure, _ON_FAILURE),  # type: ignore[arg-type]
        controller_ready_timeout_seconds=r.duration(
            top, "controllerReadyTimeout", "", d.controller_ready_timeout_seconds
        ),
        acknowledgements=acks,
        paused=r.boolean(top, "paused", "", d.paused),
        require_approval=_approval(r, top, "", "canary-pool", "canaryPool"),
        approve=_approve(r, top, "", cluster),
        prometheus=prometheus,
    )
