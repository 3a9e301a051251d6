"""What the journal keeps of a pool's GPU canary judgement (issue 18, #28 item 6): the
verdict, when it was judged, and the evidence (pod, namespace, node, phase, the hypervisor
and worker images, the container's message).

Kept with the phase (``PhaseProgress.canary``) for a pass as for a failure: the smoke pod is
deleted once judged, so this record (and the journal in ``history/``) is what is left of it;
``status``, the progress log and the pull-request comment show it (``note``). Written only
when set: journals of phases without a GPU canary keep their exact bytes. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

# The container's message can be long (a stack trace): the note and the record cut it.
MAX_MESSAGE = 400


@dataclass(frozen=True, slots=True)
class CanaryRecord:
    """The GPU canary's judgement: PASSED or FAILED (a running one is not recorded)."""

    verdict: CanaryVerdict
    at: datetime
    evidence: CanaryEvidence


def of(result: CanaryResult, now: datetime) -> CanaryRecord | None:
    """The record of a judged result; None while it runs (nothing to keep yet)."""
    if result.verdict is CanaryVerdict.RUNNING:
        return None
    e = result.evidence
    return CanaryRecord(result.verdict, now, replace(e, exit_message=e.exit_message[:MAX_MESSAGE]))


def note(record: CanaryRecord | None) -> str:
    """One line for a person, e.g. ``GPU canary passed 2026-12-04 18:00:00 UTC: pod
    ns/gitopsbot-gpu-canary-a-1 on node n1 Succeeded; hypervisor hv:2, worker w:2``;
    "" without a record."""
    if record is None:
        return ""
    e = record.evidence
    where = f" on node {e.node}" if e.node else " (no node)"
    phase = f" {e.phase}" if e.phase else ""
    images = [
        f"{what} {image}"
        for what, image in (("hypervisor", e.hypervisor_image), ("worker", e.worker_image))
        if image
    ]
    said = f"; said: {e.exit_message}" if e.exit_message else ""
    return (
        f"GPU canary {record.verdict} {record.at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC: "
        f"pod {e.namespace}/{e.pod}{where}{phase}"
        + (f"; {', '.join(images)}" if images else "")
        + said
    )


def to_data(record: CanaryRecord) -> dict[str, Any]:
    return {
        "verdict": str(record.verdict),
        "at": record.at.astimezone(UTC).isoformat(),
        **record.evidence.as_dict(),
    }


def from_data(data: Any) -> CanaryRecord | None:
    """Read back what ``to_data`` wrote; None when absent or malformed (a hand-edited
    journal loses the display record, never the operation)."""
    if not isinstance(data, Mapping):
        return None
    try:
        verdict = CanaryVerdict(str(data.get("verdict")))
        at = datetime.fromisoformat(str(data.get("at")))
    except ValueError:
        return None
    if verdict is CanaryVerdict.RUNNING:
        return None

    def text(key: str) -> str:
        return str(data.get(key) or "")

    evidence = CanaryEvidence(
        pod=text("pod"),
        namespace=text("namespace"),
        node=text("node"),
        phase=text("phase"),
        hypervisor_image=text("hypervisorImage"),
        worker_image=text("workerImage"),
        exit_message=text("exitMessage"),
    )
    return CanaryRecord(verdict, at if at.tzinfo else at.replace(tzinfo=UTC), evidence)


class CanaryVerdict(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    RUNNING = "running"


@dataclass(frozen=True, slots=True)
class CanaryEvidence:
    """What the journal keeps of a smoke run: enough to tell a person why it failed."""

    pod: str
    namespace: str
    node: str = ""  # the updated node it was pinned to
    phase: str = ""  # the Pod's phase when judged ("" before it exists)
    hypervisor_image: str = ""  # the hypervisor image of that node when the pod was made
    worker_image: str = ""  # the pool's worker image (what a new worker runs), when known
    exit_message: str = ""  # the container's termination message or reason

    def as_dict(self) -> dict[str, str]:
        return {k: v for k, v in _fields(self).items() if v}


def _fields(e: CanaryEvidence) -> dict[str, str]:
    return {
        "pod": e.pod,
        "namespace": e.namespace,
        "node": e.node,
        "phase": e.phase,
        "hypervisorImage": e.hypervisor_image,
        "workerImage": e.worker_image,
        "exitMessage": e.exit_message,
    }


@dataclass(frozen=True, slots=True)
class CanaryResult:
    verdict: CanaryVerdict
    message: str
    evidence: CanaryEvidence
    retry_after: float = 0.0  # for RUNNING: when to look again (seconds)

    @property
    def passed(self) -> bool:
        return self.verdict is CanaryVerdict.PASSED

    @property
    def failed(self) -> bool:
        return self.verdict is CanaryVerdict.FAILED
