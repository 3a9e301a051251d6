"""The per-pool component rollout state machine (facts §3.2), as a pure function.

Given a pool's component status and annotations, the new template hash, the rolling policy, an
inventory of the objects the component covers and "now", it decides what to write: the status
fields, the annotations, which objects to update in this batch and when to look again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

DOMAIN = "tensor-fusion.ai"


class Component(StrEnum):
    HYPERVISOR = "hypervisor"
    WORKER = "worker"
    CLIENT = "client"

    @property
    def switch(self) -> str:
        return f"autoUpdate{self.value.capitalize()}"

    @property
    def in_progress_annotation(self) -> str:
        return f"{DOMAIN}/{self.value}-update-in-progress"

    @property
    def last_time_annotation(self) -> str:
        return f"{DOMAIN}/{self.value}-batch-update-last-time"

    @property
    def progress_field(self) -> str:
        return f"{self.value}UpdateProgress"

    @property
    def synced_field(self) -> str:
        return f"{self.value}ConfigSynced"


@dataclass(frozen=True, slots=True)
class Policy:
    auto_update: bool
    interval: timedelta
    percentage: int

    @classmethod
    def of(cls, pool_spec: dict[str, Any], component: Component) -> Policy:
        raw = (pool_spec.get("nodeManagerConfig") or {}).get("nodePoolRollingUpdatePolicy")
        if not isinstance(raw, dict):
            return cls(False, timedelta(seconds=1), 100)  # nil policy: (1s, 100), switch off
        interval = parse_go_duration(str(raw.get("batchInterval") or "1s"))
        pct = raw.get("batchPercentage", 100)
        pct = pct if isinstance(pct, int) and 0 <= pct <= 100 else 100
        return cls(bool(raw.get(component.switch)), interval, pct)


@dataclass(frozen=True, slots=True)
class Inventory:
    """What the component covers in one pool. ``outdated`` is oldest first, then by name."""

    total: int
    updated: int
    recheck: bool
    outdated: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Decision:
    # Full replacement for this component's keys of status.componentStatus, or None: leave.
    status: dict[str, Any] | None
    # Annotations to set (None removes one).
    annotations: dict[str, str | None] = field(default_factory=dict)
    # Objects (names from Inventory.outdated) to update in this batch.
    update: tuple[str, ...] = ()
    # When to reconcile again at the latest (None: on the next change).
    wake_at: datetime | None = None
    # Why the machine stopped here, for logs and tests.
    note: str = ""


def component_status(hash_: str, progress: int) -> dict[str, Any]:
    """The component's status keys; zero and false are omitted, as Go's omitempty does."""
    out: dict[str, Any] = {"hash": hash_}
    if progress:
        out["progress"] = progress
    if progress == 100:
        out["synced"] = True
    return out


def decide(
    component: Component,
    *,
    status: dict[str, Any],
    annotations: dict[str, str],
    new_hash: str,
    policy: Policy,
    inventory: Inventory,
    now: datetime,
    min_requeue: timedelta = timedelta(0),
) -> Decision:
    """One reconcile of one component of one pool (``status`` is status.componentStatus)."""
    old_hash = str(status.get(component.value) or "")
    progress = int(status.get(component.progress_field) or 0)
    synced = bool(status.get(component.synced_field))
    in_progress = annotations.get(component.in_progress_annotation, "")
    last_time = annotations.get(component.last_time_annotation, "")
    ann: dict[str, str | None] = {}

    if new_hash != old_hash:
        progress = 0
        if not old_hash or not policy.auto_update:
            # First sight, or switch off (R12): record the hash and wait.
            note = "first sight" if not old_hash else "switch off: hash recorded"
            return Decision(component_status(new_hash, 0), note=note)
        ann = {component.in_progress_annotation: new_hash, component.last_time_annotation: ""}
        last_time = ""
    else:
        if not policy.auto_update:
            return Decision(None, note="switch off")
        if in_progress != new_hash:
            if synced:
                return Decision(None, note="synced")
            # Resume a pending campaign (the switch was turned on after the change).
            ann = {component.in_progress_annotation: new_hash, component.last_time_annotation: ""}
            last_time = ""
        elif last_time:
            due = parse_time(last_time) + policy.interval
            if now < due:
                return Decision(None, wake_at=due, note="batch interval")

    if inventory.recheck:
        return Decision(None, ann, note="recheck: pending objects")
    if inventory.total <= 0:
        return Decision(None, ann, note="nothing to update")
    if policy.percentage == 0:
        # The real controller divides by zero here; the panic is recovered and it stalls.
        return Decision(None, ann, note="batchPercentage 0: stalled")

    batch_size = math.ceil(policy.percentage * inventory.total / 100)
    while True:
        index = progress // policy.percentage
        desired = min((index + 1) * batch_size, inventory.total)
        delta = desired - inventory.updated
        if delta >= 0:
            break
        progress = min(progress + policy.percentage, 100)

    if delta == 0:
        progress = min((index + 1) * policy.percentage, 100)
        if progress < 100:
            ann[component.last_time_annotation] = format_time(now)
            wait = max(policy.interval, min_requeue)
            return Decision(
                component_status(new_hash, progress), ann, wake_at=now + wait, note="batch done"
            )
        ann[component.in_progress_annotation] = None
        ann[component.last_time_annotation] = None
        return Decision(component_status(new_hash, 100), ann, note="done")
    return Decision(
        component_status(new_hash, progress),
        ann,
        update=inventory.outdated[:delta],
        note=f"batch of {delta}",
    )


def format_time(t: datetime) -> str:
    # RFC 3339 with fractions: the real controller writes whole seconds, which would make
    # sub-second batch intervals (used by fast tests) meaningless.
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_go_duration(text: str) -> timedelta:
    """A Go duration ("1s", "1m30s", "250ms"); unparseable falls back to 1s, as the real one."""
    rest = text.strip()
    total = 0.0
    if not rest:
        return timedelta(seconds=1)
    while rest:
        num = ""
        while rest and (rest[0].isdigit() or rest[0] == "."):
            num, rest = num + rest[0], rest[1:]
        unit = ""
        while rest and not (rest[0].isdigit() or rest[0] == "."):
            unit, rest = unit + rest[0], rest[1:]
        if not num or unit not in _UNITS:
            return timedelta(seconds=1)
        try:
            total += float(num) * _UNITS[unit]
        except ValueError:
            return timedelta(seconds=1)
    return timedelta(seconds=total)
