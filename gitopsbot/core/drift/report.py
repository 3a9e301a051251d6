"""Drift: where a cluster's deployed state differs from what the bot would deploy from Git
(issue 14 part 2, docs/drift.md).

``DesiredState`` is what the bot renders or pins from Git for the cluster; ``ObservedState`` a
snapshot read from the cluster (``bot/drift.py``). ``compare`` returns a ``DriftReport``: one
``DriftItem`` per difference, saying what, where, desired and observed, and the differences
that are not drift (``Pending``): a change Git holds back, compared against what the bot
applied (``core.drift.baseline``), and a value the bot pinned itself (issue 28).

Secrets: ``observed_values`` turns the release's values into masked values plus a digest per
secret leaf before anything else sees them, so a snapshot never holds secret material; a
secret that differs is reported as ``differs (digest)``, never with its value or its digest (a
digest of a short secret could be guessed).

Pure: values in, values out.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gitopsbot.core.charts.values_diff import ChangeKind, diff_values, get_path, leaf_paths
from gitopsbot.core.fleet import secrets as secrets_mod
from gitopsbot.core.notices.kube_events import WARNING, EventSpec, note_of
from gitopsbot.core.operations.manual_revision import ManualRevision

SECRET_DIFFERS = "differs (digest)"
ABSENT = "(absent)"
# Switches the bot opens only inside an operation's pool phase: closed otherwise (F1).
SWITCHES = ("autoUpdateHypervisor", "autoUpdateWorker", "autoUpdateClient")


def secret_digest(value: Any) -> str:
    """A digest of one secret value, for comparing (never shown)."""
    text = json.dumps(value, sort_keys=True, default=str)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class DesiredState:
    """What the bot would deploy or pin from Git for one cluster."""

    chart_version: str
    # values.yaml as Git holds it (secret paths empty or placeholders: no secret material).
    values: Mapping[str, Any]
    # Values path → digest of the secret the bot would merge in at apply time (resolved
    # credentials); a path whose secret could not be resolved is left out (not compared).
    secret_digests: Mapping[str, str] = field(default_factory=dict)
    # Team-declared secret paths (credentials.yaml ``secretPaths`` and the SecretRefs' paths).
    secret_paths: tuple[str, ...] = ()
    # SecretRef paths whose secret could not be resolved now (reported as not compared).
    unresolved_secrets: tuple[str, ...] = ()
    # The CRD bundle's digest as the bot's last CRDs step left it, whatever operation came
    # after (core.drift_baseline); "" = unknown, not compared.
    crd_digest: str = ""
    # Pool → the ``nodePoolRollingUpdatePolicy`` the bot pins (core.postrender).
    pool_policies: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # Pool → policy keys the bot's last operation pinned itself (a batch a budget or the
    # tenants shrank): the cluster holding them is the bot's own work, never drift.
    pins: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    pinned_by: str = ""  # that operation's id
    # Component → image ("" or missing: unknown, not compared).
    images: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ObservedValues:
    """A release's user-supplied values without secret material: masked, plus a digest of
    each secret leaf."""

    masked: Mapping[str, Any]
    secret_digests: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class ObservedState:
    """A snapshot of the cluster, read without writing anything."""

    chart_version: str  # "" = no release
    revision: int = 0
    values: ObservedValues = ObservedValues({}, {})
    crd_digest: str = ""  # "" = no TensorFusion CRD
    # Pool → the rolling-update policy in the TensorFusionCluster's pool template.
    tfc_policies: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # Pool → the rolling-update policy in the GPUPool's spec (None: no GPUPool).
    gpupool_policies: Mapping[str, Mapping[str, Any] | None] = field(default_factory=dict)
    tfc_name: str = "tensor-fusion"
    gpupool_names: Mapping[str, str] = field(default_factory=dict)
    # Pool → component → image in the TensorFusionCluster's pool template.
    pool_images: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    controller_image: str = ""  # "" = not read
    # A Helm revision made outside the bot after its last operation (core.manual_revision).
    manual: ManualRevision | None = None
    # An operation is running: switches may be open and batches pinned on purpose, so they
    # are not compared.
    operation_active: bool = False


@dataclass(frozen=True, slots=True)
class DriftItem:
    """One difference. ``desired`` and ``observed`` are display text, secret-free; ``value``
    is the observed value to write into Git (None for secrets and where Git cannot hold it)."""

    what: str  # chart | values | secret | crds | pool-policy | image | revision
    where: str
    desired: str
    observed: str
    git_file: str = ""  # release.yaml | values.yaml | rollout.yaml | "" (not kept in Git)
    git_path: str = ""  # dotted path in that file
    value: Any = None
    removed: bool = False  # the cluster has no value here: Git's would be deleted

    def line(self) -> str:
        return f"{self.what}: {self.where}: Git {self.desired}, cluster {self.observed}"


@dataclass(frozen=True, slots=True)
class Pending:
    """A difference that is not drift: a change Git holds back (waves, a window, a pause, an
    approval, an operation still applying it) or a value the bot pinned itself. Shown, never
    proposed away."""

    item: DriftItem
    why: str

    def line(self) -> str:
        return f"{self.item.line()} ({self.why})"


@dataclass(frozen=True, slots=True)
class DriftReport:
    cluster: str
    items: tuple[DriftItem, ...]
    # What could not be compared, and why (a secret not resolved, no chart to know images...).
    unchecked: tuple[str, ...] = ()
    pending: tuple[Pending, ...] = ()  # not drift: not in the digest, the summary's count

    @property
    def drifted(self) -> bool:
        return bool(self.items)

    def digest(self) -> str:
        """Identifies this drift (what, where, observed): a PR is updated when it changes."""
        text = json.dumps([[i.what, i.where, i.observed] for i in self.items])
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def summary(self) -> str:
        if not self.items:
            held = f" ({len(self.pending)} pending)" if self.pending else ""
            return f"{self.cluster}: no drift{held}"
        kinds = sorted({i.what for i in self.items})
        return f"{self.cluster}: drift ({len(self.items)}: {', '.join(kinds)})"

    def lines(self) -> list[str]:
        out = [self.summary()]
        out.extend(f"  {i.line()}" for i in self.items)
        out.extend(f"  pending, not drift: {p.line()}" for p in self.pending)
        out.extend(f"  not compared: {u}" for u in self.unchecked)
        return out

    def as_json(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "drift": self.drifted,
            "items": [
                {"what": i.what, "where": i.where, "desired": i.desired, "observed": i.observed}
                for i in self.items
            ],
            "unchecked": list(self.unchecked),
            "pending": [
                {
                    "what": p.item.what,
                    "where": p.item.where,
                    "desired": p.item.desired,
                    "observed": p.item.observed,
                    "why": p.why,
                }
                for p in self.pending
            ],
        }


def observed_values(values: Mapping[str, Any], secret_paths: Iterable[str] = ()) -> ObservedValues:
    """``values`` (from Helm: may hold secrets) as masked values and per-secret digests."""
    extra = tuple(secret_paths)
    digests: dict[str, str] = {}
    for parts in leaf_paths(values):
        if not parts:
            continue  # no values at all
        path = secrets_mod.join_path(parts)
        leaf = get_path(values, parts)
        if leaf is None or leaf == "" or isinstance(leaf, bool):
            continue
        if secrets_mod.is_secret_path(path, extra) or secrets_mod.looks_like_token(leaf):
            digests[path] = secret_digest(leaf)
    return ObservedValues(secrets_mod.mask(values, extra), digests)


def _show(value: Any) -> str:
    if value is None:
        return ABSENT
    if isinstance(value, str):
        return value if value else '""'
    return json.dumps(value, sort_keys=True, default=str)


def _is_secret(path: str, desired: DesiredState, observed: ObservedState) -> bool:
    if not path:
        return False  # the whole tree (one side empty)
    return (
        path in desired.secret_digests
        or path in observed.values.secret_digests
        or secrets_mod.is_secret_path(path, desired.secret_paths)
    )


def _without_secrets(
    node: Any, parts: tuple[str | int, ...], desired: DesiredState, observed: ObservedState
) -> Any:
    """``node`` without its secret leaves (and without mappings left empty by that)."""
    if isinstance(node, Mapping):
        out: dict[str, Any] = {}
        for key, child in node.items():
            kept = _without_secrets(child, (*parts, str(key)), desired, observed)
            if kept is not _DROP:
                out[str(key)] = kept
        return out if out or not node or not parts else _DROP
    if parts and not isinstance(node, Mapping | list):
        path = secrets_mod.join_path(parts)
        if node == secrets_mod.MASK or (
            _is_secret(path, desired, observed) and secrets_mod.is_placeholder(node)
        ):
            return _DROP
    return node


_DROP: Any = object()


def _values(desired: DesiredState, observed: ObservedState) -> list[DriftItem]:
    out: list[DriftItem] = []
    extra = desired.secret_paths
    # Secret leaves leave both trees first (compared by digest below), so a subtree added by
    # hand shows its other values and never a mask.
    want = _without_secrets(desired.values, (), desired, observed)
    have = _without_secrets(observed.values.masked, (), desired, observed)
    diff = diff_values(want, have).masked(extra)
    for change in diff.changes:
        path = change.path
        removed = change.kind is ChangeKind.REMOVED
        out.append(
            DriftItem(
                "values",
                path,
                _show(change.before),
                _show(None if removed else change.after),
                "values.yaml",
                path,
                None if removed else change.after,
                removed,
            )
        )
    seen = observed.values.secret_digests
    for path in sorted(set(desired.secret_digests) | set(seen)):
        want, have = desired.secret_digests.get(path), seen.get(path)
        if want is None and have is not None:
            given = get_path(desired.values, secrets_mod.split_path(path))
            if not secrets_mod.is_placeholder(given):
                continue  # Git holds a literal here: the values diff above shows it masked
            if path in desired.unresolved_secrets:
                continue  # a credential not resolved now: reported as not compared
            out.append(DriftItem("secret", path, "not set", "set (digest)"))
        elif want is not None and want != have:
            out.append(DriftItem("secret", path, "set (digest)", SECRET_DIFFERS))
    return out


def _policies(
    desired: DesiredState, observed: ObservedState
) -> tuple[list[DriftItem], list[Pending]]:
    out: list[DriftItem] = []
    pinned: list[Pending] = []
    for pool, want in desired.pool_policies.items():
        places: list[tuple[str, Mapping[str, Any] | None]] = [
            (
                f"TensorFusionCluster {observed.tfc_name} pool {pool}",
                observed.tfc_policies.get(pool),
            )
        ]
        if pool in observed.gpupool_policies:
            name = observed.gpupool_names.get(pool, pool)
            places.append((f"GPUPool {name}", observed.gpupool_policies[pool]))
        for where, have in places:
            if have is None:
                out.append(DriftItem("pool-policy", where, "present", ABSENT))
                continue
            for key, value in want.items():
                if key in _PINNED and observed.operation_active:
                    continue  # an operation opens switches and pins batches on purpose
                found = have.get(key)
                if found is None and value is False:
                    continue  # an absent switch is a closed one
                if found == value:
                    continue
                item = _policy_item(pool, where, key, value, found)
                if found is not None and desired.pins.get(pool, {}).get(key) == found:
                    why = f"pinned by the bot's operation {desired.pinned_by or '(unknown)'}"
                    pinned.append(Pending(item, why))
                else:
                    out.append(item)
    return out, pinned


# What an operation writes into a pool's policy on purpose: the switches, the batch the
# budget or the tenants allow, the interval pinned while a budget holds (core.admission).
_PINNED = frozenset({*SWITCHES, "batchPercentage", "batchInterval"})

# rollout.yaml fields the policy keys come from (core/fleet/rollout_file.py).
_ROLLOUT_FIELDS = {"batchPercentage": "batchPercentage", "batchInterval": "batchInterval"}


def _policy_item(pool: str, where: str, key: str, want: Any, found: Any) -> DriftItem:
    field_name = _ROLLOUT_FIELDS.get(key)
    git_path = f"pools.{pool}.{field_name}" if field_name else ""
    return DriftItem(
        "pool-policy",
        f"{where}: {key}",
        _show(want),
        _show(found),
        "rollout.yaml" if field_name else "",
        git_path,
        found if field_name else None,
    )


def _images(desired: DesiredState, observed: ObservedState) -> list[DriftItem]:
    out: list[DriftItem] = []
    want_controller = desired.images.get("controller", "")
    if (
        want_controller
        and observed.controller_image
        and want_controller != observed.controller_image
    ):
        out.append(
            DriftItem("image", "controller Deployment", want_controller, observed.controller_image)
        )
    for pool, images in sorted(observed.pool_images.items()):
        for component, have in sorted(images.items()):
            want = desired.images.get(component, "")
            if want and have and want != have:
                where = f"TensorFusionCluster {observed.tfc_name} pool {pool}: {component}"
                out.append(DriftItem("image", where, want, have))
    return out


def _compare(
    desired: DesiredState, observed: ObservedState
) -> tuple[list[DriftItem], list[str], list[Pending]]:
    """Items, what was not compared, and the bot's own pins, of one desired state."""
    unchecked: list[str] = []
    if not observed.chart_version:
        item = DriftItem("chart", "Helm release", desired.chart_version, "not installed")
        return [item], [], []
    items: list[DriftItem] = []
    if observed.manual is not None:
        items.append(
            DriftItem("revision", f"Helm revision {observed.manual.revision}", "made by the bot",
                      observed.manual.describe())
        )  # fmt: skip
    if desired.chart_version != observed.chart_version:
        items.append(
            DriftItem("chart", "Helm release chart version", desired.chart_version,
                      observed.chart_version, "release.yaml", "chart.version",
                      observed.chart_version)
        )  # fmt: skip
    items.extend(_values(desired, observed))
    unchecked.extend(
        f"secret {p}: its credential could not be resolved" for p in desired.unresolved_secrets
    )
    if not desired.crd_digest:
        unchecked.append("CRDs: the bot has recorded no CRDs step for this cluster yet")
    elif desired.crd_digest != observed.crd_digest:
        items.append(
            DriftItem("crds", "TensorFusion CRDs", f"bundle {desired.crd_digest[:19]}",
                      f"bundle {observed.crd_digest[:19] or ABSENT}")
        )  # fmt: skip
    policies, pinned = _policies(desired, observed)
    items.extend(policies)
    if not desired.images:
        unchecked.append("images: the chart could not be read")
    items.extend(_images(desired, observed))
    return items, unchecked, pinned


def compare(
    cluster: str,
    desired: DesiredState,
    observed: ObservedState,
    *,
    applied: DesiredState | None = None,
    pending_why: str = "",
) -> DriftReport:
    """Every difference between Git's desired state and the cluster's.

    ``applied``: what the bot applied last or is applying, when Git's head holds a change it
    has not applied (``pending_why`` says why). Then the cluster is compared with both: a
    difference only from Git's head (the cluster has the applied value) is pending, not
    drift; one from both (the cluster has neither) is drift, told against the applied value
    and, where the held change touches the same place, not written into Git by a request (it
    would undo the held change: a person decides).
    """
    items, unchecked, pinned = _compare(desired, observed)
    if applied is None or applied == desired:
        return DriftReport(cluster, tuple(items), tuple(unchecked), tuple(pinned))
    old_items, old_unchecked, old_pinned = _compare(applied, observed)
    head = {(i.what, i.where): i for i in items}
    drifted: list[DriftItem] = []
    for item in old_items:
        also = head.get((item.what, item.where))
        if also is None:
            continue  # the cluster has Git's head's value already (the operation applied it)
        if also.desired != item.desired:
            item = replace(item, git_file="", git_path="", value=None)
        drifted.append(item)
    before = {(i.what, i.where) for i in old_items}
    pending = [Pending(i, pending_why) for i in items if (i.what, i.where) not in before]
    seen_pins = {(p.item.what, p.item.where) for p in pinned}
    pinned += [p for p in old_pinned if (p.item.what, p.item.where) not in seen_pins]
    notes = list(dict.fromkeys([*unchecked, *old_unchecked]))
    return DriftReport(cluster, tuple(drifted), tuple(notes), (*pending, *pinned))


def event_of(report: DriftReport) -> EventSpec:
    """The Kubernetes Event telling a drift (Warning ``Drifted``) on the TensorFusionCluster;
    the items are secret-free, and the note masks token shapes all the same."""
    listed = "; ".join(i.line() for i in report.items[:5])
    more = f"; and {len(report.items) - 5} more" if len(report.items) > 5 else ""
    return EventSpec(
        reason="Drifted",
        type=WARNING,
        action="DriftCheck",
        note=note_of(f"{report.summary()}: {listed}{more} (docs/drift.md)"),
    )
