"""Helm releases read from Helm's own storage through the Kubernetes API: no helm process.

Helm's default storage driver (``secret``, helm/pkg/storage/driver/secrets.go) keeps one
Secret per revision, ``sh.helm.release.v1.<release>.v<revision>``, labelled ``owner=helm``,
``name=<release>``; ``data.release`` is Helm's base64 of the gzipped release JSON
(``ports.cluster.decode_helm_release``). ``HelmStorage`` reads what ``helm history -o json``
and ``helm get values -o json`` print, exactly as helm computes it (helm 3.18 and 4.1, the
versions the bot pins; docs/helm.md "How the bot reads a release"):

- history: one list of the release's Secrets by those labels (``Storage.History``), sorted by
  the record's ``version``; each entry as ``getReleaseHistory`` prints it (chart
  ``<name>-<version>``, or ``MISSING`` without chart metadata; ``updated`` =
  ``info.last_deployed``, absent when zero) and parsed by ``release_info``, the one parser
  of ``helm history -o json`` (HelmCli's too);
- values: the record's ``config`` (``null`` → {}); the latest revision's from the same list
  (``Storage.Last``), a given revision's from its Secret by name (``Storage.Get``).
- the mark (``mark``): whether anything changed, for an idle cluster's check
  (docs/executor.md "The idle check"): one list of the same Secrets, metadata only, so none
  of the records (hundreds of KB each, gzipped) crosses the wire. Each Secret's name,
  resourceVersion and Helm's labels (``status``, ``version``, ``modifiedAt``: helm sets them
  on every write); a revision added, removed or rewritten changes it.

One difference, on purpose: helm skips a release Secret it cannot decode (and then reports
an older revision as the latest); this reader refuses with an error naming the Secret, never
its content. The record holds the values with their secrets: nothing of it reaches a log or
an exception message.

Only valid when helm uses the Secret driver: ``HelmCli`` decides (``HELM_DRIVER``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from gitopsbot.core.charts.observed import HelmReleaseInfo, HelmReleaseStatus
from gitopsbot.errors import HelmFailed
from gitopsbot.ports.cluster import Cluster, decode_helm_release, helm_release_secret_name

# helm's chartutil.ValidateReleaseName: a name helm refuses is left to helm (its own error);
# it is also what keeps the label selector below from being anything but one name.
_RELEASE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_RELEASE_NAME_MAX = 53
_CHART = re.compile(r"^(?P<name>.+?)-(?P<version>v?\d+\.\d+\.\d+\S*)$")
_GO_ZERO_TIME = datetime(1, 1, 1, tzinfo=UTC)
MISSING = "MISSING"  # what helm history prints for a record without chart metadata
# The labels helm writes on each release Secret (helm/pkg/storage/driver/secrets.go)
_MARK_LABELS = ("status", "version", "modifiedAt")


@dataclass(frozen=True, slots=True)
class StoredRelease:
    """One revision as Helm stored it: what ``helm history`` prints of it, and its values
    (the user-supplied ``config``; never in a repr: it holds secrets)."""

    info: HelmReleaseInfo
    values: dict[str, Any] = field(repr=False)
    secret: str = ""  # the Secret it was read from


class ReleaseReader(Protocol):
    """What ``HelmCli`` reads a release from instead of spawning helm."""

    def readable(self, release: str) -> bool:
        """False when the reader cannot stand in for helm for this release name."""
        ...

    def releases(self, release: str, namespace: str) -> list[StoredRelease]:
        """Every stored revision, oldest first; [] when the release does not exist."""
        ...

    def revision(self, release: str, namespace: str, revision: int) -> StoredRelease | None:
        """Revision ``revision`` (its Secret by name, as ``helm get values --revision``
        reads it), or None when there is no such Secret."""
        ...

    def mark(self, release: str, namespace: str) -> str:
        """What changes when any stored revision does, read without the records ("" when
        the release does not exist)."""
        ...


class HelmStorage:
    """``ReleaseReader`` over the Cluster port: ``list`` (one call per history, status or
    latest values) and ``get`` (a given revision). Kube* errors pass through unchanged;
    a Secret that is not a Helm release record raises HelmFailed naming the Secret."""

    def __init__(self, cluster: Cluster) -> None:
        self._cluster = cluster

    def readable(self, release: str) -> bool:
        return len(release) <= _RELEASE_NAME_MAX and bool(_RELEASE_NAME.match(release))

    def releases(self, release: str, namespace: str) -> list[StoredRelease]:
        selector = f"owner=helm,name={release}"
        secrets = self._cluster.list("v1", "Secret", namespace, label_selector=selector)
        found = [stored_release(s, release, namespace) for s in secrets]
        return sorted(found, key=lambda r: r.info.revision)

    def mark(self, release: str, namespace: str) -> str:
        selector = f"owner=helm,name={release}"
        found = self._cluster.list_metadata("v1", "Secret", namespace, selector)
        return release_mark(found)

    def revision(self, release: str, namespace: str, revision: int) -> StoredRelease | None:
        name = helm_release_secret_name(release, revision)
        secret = self._cluster.get("v1", "Secret", namespace, name)
        return None if secret is None else stored_release(secret, release, namespace)


def release_mark(items: Sequence[Mapping[str, Any]]) -> str:
    """The mark of a release's Secrets as a metadata list gives them: per Secret, its name,
    resourceVersion and Helm's labels, in name order. Names and numbers only: no value."""
    parts = []
    for item in items:
        meta = item.get("metadata") or {}
        labels = meta.get("labels") or {}
        fields = [meta.get("name"), meta.get("resourceVersion")]
        fields += [labels.get(k) for k in _MARK_LABELS]
        parts.append("|".join(str(f or "") for f in fields))
    return "\n".join(sorted(parts))


def stored_release(secret: Mapping[str, Any], release: str, namespace: str) -> StoredRelease:
    """One release Secret decoded. HelmFailed names the Secret when it is not a Helm release
    record; its content never appears."""
    meta = secret.get("metadata") or {}
    name = f"{meta.get('namespace') or namespace}/{meta.get('name') or '?'}"
    data = (secret.get("data") or {}).get("release")
    why = "has no data.release"
    if isinstance(data, str):
        why = "data.release is not a Helm release record"
        try:
            record = decode_helm_release(data)
            if isinstance(record, dict):
                info = release_info(history_entry(record), release, namespace)
                config = record.get("config")
                return StoredRelease(info, config if isinstance(config, dict) else {}, name)
        except (ValueError, TypeError, AttributeError):
            pass  # its text may quote the record (int("<a value>")): raised below, unchained
    raise HelmFailed(
        f"Helm release storage: Secret {name} of release {release} {why}; helm itself skips "
        "such a record, the bot does not guess: inspect or delete the Secret"
    )


def history_entry(record: Mapping[str, Any]) -> dict[str, Any]:
    """What ``helm history -o json`` prints of a release record (helm 3.18
    cmd/helm/history.go and 4.1 pkg/cmd/history.go, ``getReleaseHistory``)."""
    info = record.get("info") or {}
    chart = record.get("chart")
    metadata = chart.get("metadata") if isinstance(chart, dict) else None
    if isinstance(metadata, dict):
        chart_text = f"{metadata.get('name') or ''}-{metadata.get('version') or ''}"
        app_version = str(metadata.get("appVersion") or "")
    else:  # formatChartName / formatAppVersion: "an edge case that has happened in prod"
        chart_text = app_version = MISSING
    entry: dict[str, Any] = {
        "revision": record.get("version") or 0,
        "status": str(info.get("status") or ""),
        "chart": chart_text,
        "app_version": app_version,
        "description": str(info.get("description") or ""),
    }
    deployed = info.get("last_deployed")
    # helm prints no ``updated`` for Go's zero time (helm 3: "", helm 4: omitted).
    if _timestamp(deployed) not in (None, _GO_ZERO_TIME):
        entry["updated"] = deployed
    return entry


def release_info(entry: Mapping[str, Any], release: str, namespace: str) -> HelmReleaseInfo:
    """A ``helm history -o json`` entry as a HelmReleaseInfo: the one parser of both ways of
    reading a release (helm's output, Helm's storage)."""
    chart = str(entry.get("chart", ""))
    match = _CHART.match(chart)
    name, version = (match.group("name"), match.group("version")) if match else (chart, "")
    return HelmReleaseInfo(
        name=release,
        namespace=namespace,
        revision=int(entry.get("revision") or 0),
        status=HelmReleaseStatus.parse(str(entry.get("status", ""))),
        chart_name=name,
        chart_version=version,
        app_version=str(entry.get("app_version", "")),
        description=str(entry.get("description", "")),
        updated=_timestamp(entry.get("updated")),
    )


def _timestamp(text: Any) -> datetime | None:
    if not isinstance(text, str) or not text:
        return None
    # Go prints nanoseconds and an offset: 2026-12-02T14:11:42.123456789Z / +00:00.
    match = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:?\d\d)?", text)
    if not match:
        return None
    base, fraction, zone = match.groups()
    micro = (fraction or "0")[:6].ljust(6, "0")
    zone = "+00:00" if zone in (None, "Z") else zone
    try:
        return datetime.fromisoformat(f"{base}.{micro}{zone}")
    except ValueError:
        return None
