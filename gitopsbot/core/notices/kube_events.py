"""What a happening looks like as a Kubernetes Event (``events.k8s.io/v1``), and on which
objects it is told: the cluster's TensorFusionCluster always, and the GPUPool as well for a
happening of a pool step. docs/events.md lists every reason.

Kubernetes puts the Event of a cluster-scoped object into namespace ``default``, as client-go's
recorders do, with ``regarding.namespace`` empty: that is where ``kubectl describe`` and
``kubectl get events`` look for it. A repeated identical Event (same object, reason, action,
type and note) is not posted again: its ``series`` is patched (count 2, 3 … and
``lastObservedTime``), as the Events API defines it.

Pure: the caller passes the time and the reporting instance.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gitopsbot.core.fleet.model import ClusterSpec
from gitopsbot.core.fleet.secrets import MASK, looks_like_token
from gitopsbot.core.notices.happenings import Happening
from gitopsbot.core.rollouts import tf_objects

API_VERSION = "events.k8s.io/v1"
REPORTING_CONTROLLER = "gitopsbot.io/gitopsbot"
# Where the Events of cluster-scoped objects go (client-go: metav1.NamespaceDefault).
CLUSTER_SCOPED_NAMESPACE = "default"
NOTE_LIMIT = 1024  # bytes: the API server refuses a longer note
FIELD_LIMIT = 128  # action, reason, reportingInstance
NORMAL = "Normal"
WARNING = "Warning"


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """The object an Event is about; ``namespace`` "" for a cluster-scoped one, ``uid`` ""
    until read from the server."""

    api_version: str
    kind: str
    name: str
    namespace: str = ""
    uid: str = ""

    @property
    def event_namespace(self) -> str:
        return self.namespace or CLUSTER_SCOPED_NAMESPACE

    def as_regarding(self) -> dict[str, str]:
        out = {"apiVersion": self.api_version, "kind": self.kind, "name": self.name}
        if self.namespace:
            out["namespace"] = self.namespace
        if self.uid:
            out["uid"] = self.uid
        return out


@dataclass(frozen=True, slots=True)
class EventSpec:
    """What one Event says (``type`` Normal or Warning)."""

    reason: str
    type: str
    action: str
    note: str


@dataclass(frozen=True, slots=True)
class RecordedEvent:
    """An Event as read back from the server."""

    name: str
    namespace: str
    regarding: ObjectRef
    spec: EventSpec
    controller: str
    instance: str
    count: int  # 1, or the series' count
    event_time: str


def regarding(happening: Happening, spec: ClusterSpec) -> tuple[ObjectRef, ...]:
    """The objects ``happening`` is told on: the TensorFusionCluster, and for a happening of
    a pool step (pool progress, pause, halt; a pool step's start, end, failure) its GPUPool."""
    tfc = ObjectRef(tf_objects.TF, "TensorFusionCluster", tf_objects.tfc_name(spec))
    if not happening.pool:
        return (tfc,)
    pool = ObjectRef(tf_objects.TF, "GPUPool", tf_objects.gpupool_name(spec, happening.pool))
    return (tfc, pool)


def action_of(happening: Happening) -> str:
    """The Event's ``action``: what the bot was doing, by operation kind (``Upgrade``,
    ``Rollback``, ``ControllerRestart``, ``RolloutOnly``)."""
    return "".join(part.capitalize() for part in str(happening.op_kind).split("-"))


def event_of(happening: Happening) -> EventSpec:
    return EventSpec(
        reason=happening.reason[:FIELD_LIMIT],
        type=WARNING if happening.warning else NORMAL,
        action=action_of(happening)[:FIELD_LIMIT],
        note=note_of(happening.summary()),
    )


def note_of(text: str) -> str:
    """``text`` with every word shaped like a well-known credential masked, cut to the note's
    limit (1 kB of UTF-8, ``…`` marking the cut). Secret values of the fleet never get here:
    helm's and the adapters' errors mask them before they reach a journal."""
    words = text.split(" ")
    text = " ".join(MASK if looks_like_token(w) else w for w in words)
    data = text.encode()
    if len(data) <= NOTE_LIMIT:
        return text
    cut = data[: NOTE_LIMIT - len("…".encode())].decode(errors="ignore")
    return cut + "…"


def micro_time(at: datetime) -> str:
    """A MicroTime as the API server writes it: UTC, six fractional digits."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def nanos_of(at: datetime) -> int:
    return int(at.timestamp()) * 1_000_000_000 + at.microsecond * 1000


def event_name(ref: ObjectRef, nanos: int) -> str:
    """``<object>.<hex nanoseconds>``, as client-go names Events. The poster keeps ``nanos``
    strictly increasing, so names sort in the order the Events were posted: that is the
    order ``kubectl get events`` and ``kubectl describe`` list Events of equal time in."""
    return f"{ref.name}.{nanos:x}"


def event_body(
    ref: ObjectRef, event: EventSpec, *, name: str, at: datetime, controller: str, instance: str
) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "Event",
        "metadata": {"name": name, "namespace": ref.event_namespace},
        "eventTime": micro_time(at),
        "reportingController": controller,
        "reportingInstance": instance[:FIELD_LIMIT],
        "action": event.action,
        "reason": event.reason,
        "type": event.type,
        "note": event.note,
        "regarding": ref.as_regarding(),
    }


def series_patch(count: int, at: datetime) -> dict[str, Any]:
    """A merge patch telling that the Event happened again (``count`` ≥ 2)."""
    return {"series": {"count": count, "lastObservedTime": micro_time(at)}}


def recorded_of(obj: Mapping[str, Any]) -> RecordedEvent:
    """An ``events.k8s.io/v1`` Event as the server answers it. ``ValueError`` if malformed."""
    meta = obj.get("metadata")
    reg = obj.get("regarding")
    if not isinstance(meta, Mapping) or not isinstance(reg, Mapping):
        raise ValueError("an Event without metadata or regarding")
    series = obj.get("series")
    count = series.get("count") if isinstance(series, Mapping) else None
    return RecordedEvent(
        name=str(meta.get("name", "")),
        namespace=str(meta.get("namespace", "")),
        regarding=ObjectRef(
            str(reg.get("apiVersion", "")),
            str(reg.get("kind", "")),
            str(reg.get("name", "")),
            str(reg.get("namespace", "") or ""),
            str(reg.get("uid", "") or ""),
        ),
        spec=EventSpec(
            reason=str(obj.get("reason", "")),
            type=str(obj.get("type", "")),
            action=str(obj.get("action", "")),
            note=str(obj.get("note", "")),
        ),
        controller=str(obj.get("reportingController", "")),
        instance=str(obj.get("reportingInstance", "")),
        count=int(count) if isinstance(count, int) else 1,
        event_time=str(obj.get("eventTime", "")),
    )


def is_about(event: RecordedEvent, ref: ObjectRef) -> bool:
    """``event`` regards ``ref`` (by uid when both know it)."""
    r = event.regarding
    if (r.kind, r.name, r.namespace) != (ref.kind, ref.name, ref.namespace):
        return False
    return not (r.uid and ref.uid) or r.uid == ref.uid


SeriesKey = tuple[str, str, str, str, str, str, str]


class Series:
    """The Events this process posted, by what they say, so the same Event again patches
    its series instead of posting a new one. Bounded: the oldest are forgotten (the next
    repeat of one is posted anew, as is one whose Event the server dropped after its TTL)."""

    def __init__(self, limit: int = 512) -> None:
        self._limit = limit
        self._posted: dict[SeriesKey, tuple[str, int]] = {}  # key → (Event name, count)

    @staticmethod
    def key(ref: ObjectRef, event: EventSpec) -> SeriesKey:
        return (ref.kind, ref.namespace, ref.name, event.reason, event.action, event.type,
                event.note)  # fmt: skip

    def previous(self, ref: ObjectRef, event: EventSpec) -> tuple[str, int] | None:
        """(name, count) of the Event this one repeats, or None."""
        return self._posted.get(self.key(ref, event))

    def posted(self, ref: ObjectRef, event: EventSpec, name: str, count: int = 1) -> None:
        key = self.key(ref, event)
        self._posted.pop(key, None)
        self._posted[key] = (name, count)
        while len(self._posted) > self._limit:
            self._posted.pop(next(iter(self._posted)))

    def forget(self, ref: ObjectRef, event: EventSpec) -> None:
        self._posted.pop(self.key(ref, event), None)
