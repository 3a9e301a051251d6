"""A chart version whose GPU canary failed is held for every cluster, pool and wave until a
person clears it in Git (issue 18).

The mark is the bot's own record on the state branch, ``canary-failures/<version>.yaml``:
written the moment the canary fails, it takes effect at once (no pull request). The policy
folds the standing marks into ``failedVersions`` with no wave (``with_canary_marks``), so
``core.waves.promotion.judge`` denies a chart change to that version on every cluster, waved or
not; ``hold_for`` answers the same for a driver about to open a pool whose cluster already
runs the version (a values-only change that promotion does not judge).

A person clears a mark in the fleet repository's ``gitopsbot.yaml``::

    clearedVersions:
      - version: 1.8.7
        reason: driver fixed on the canary nodes   # required: why it may go again
        operation: op-20261204-0001                # optional: only that failure

An entry without ``operation`` clears every canary failure of the version, including later
ones; with it, a later failure (another operation) stands again. Removing the entry makes
the mark stand again. The record itself stays on the state branch as history; a new
failure of a cleared version replaces it (``to_record``).

Pure: values and text in, values and text out.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gitopsbot.core.fleet.model import BotSettings, ClearedVersion, FailedVersion
from gitopsbot.core.records.journal import dump_yaml, load_yaml
from gitopsbot.core.rollouts.canary_smoke import CanaryResult

RECORD_DIR = "canary-failures"
_KIND = "GpuCanaryFailure"
_SAFE = re.compile(r"^[0-9A-Za-z.+_-]+$")


@dataclass(frozen=True, slots=True)
class CanaryFailure:
    """One failed GPU canary: ``version`` (the chart version rolled) on ``cluster``'s
    ``pool`` in operation ``op_id``."""

    version: str
    cluster: str
    pool: str
    op_id: str
    at: datetime
    message: str
    node: str = ""

    @property
    def path(self) -> str:
        return record_path(self.version)

    def reason(self) -> str:
        """The text a deny shows: what failed, where it is recorded, how to clear it."""
        return (
            f"GPU canary failed on {self.cluster} pool {self.pool} ({self.op_id}, "
            f"{self.at.astimezone(UTC):%Y-%m-%d %H:%M} UTC): {self.message} [state branch "
            f"{self.path}]; to promote it again add clearedVersions: - version: {self.version}"
            f" with a reason (operation: {self.op_id} to clear only this failure) to "
            "gitopsbot.yaml"
        )


def failure_of(
    result: CanaryResult, *, version: str, cluster: str, pool: str, op_id: str, at: datetime
) -> CanaryFailure | None:
    """The mark a canary result calls for: one for a failed run, none otherwise."""
    if not result.failed:
        return None
    return CanaryFailure(
        version=version,
        cluster=cluster,
        pool=pool,
        op_id=op_id,
        at=at,
        message=result.message,
        node=result.evidence.node,
    )


def record_path(version: str) -> str:
    """The record's path on the state branch; a version that is not a plain file name is
    refused (it comes from release.yaml, but the path must never leave the directory)."""
    if not _SAFE.match(version) or version.startswith("."):
        raise ValueError(f"not a chart version usable as a file name: {version!r}")
    return f"{RECORD_DIR}/{version}.yaml"


def is_record_path(path: str) -> bool:
    return path.startswith(f"{RECORD_DIR}/") and path.endswith(".yaml") and path.count("/") == 1


def cleared_by(failure: CanaryFailure, cleared: Iterable[ClearedVersion]) -> ClearedVersion | None:
    return next((c for c in cleared if c.clears(failure.version, failure.op_id)), None)


def standing(
    marks: Iterable[CanaryFailure], cleared: Iterable[ClearedVersion]
) -> tuple[CanaryFailure, ...]:
    """The marks no clearedVersions entry clears, by version."""
    entries = tuple(cleared)
    return tuple(
        sorted(
            (m for m in marks if cleared_by(m, entries) is None),
            key=lambda m: (m.version, m.at),
        )
    )


def hold_for(
    version: str, marks: Iterable[CanaryFailure], cleared: Iterable[ClearedVersion]
) -> CanaryFailure | None:
    """The standing mark that holds ``version`` everywhere, or None: it may go."""
    return next((m for m in standing(marks, cleared) if m.version == version), None)


def to_record(
    existing: CanaryFailure | None,
    new: CanaryFailure,
    cleared: Iterable[ClearedVersion],
) -> CanaryFailure | None:
    """What to write for ``new``: None when a standing record of the version already holds it
    (the first failure is the evidence kept; later ones change nothing), else ``new``."""
    if existing is not None and cleared_by(existing, tuple(cleared)) is None:
        return None
    return new


def as_failed_versions(
    marks: Iterable[CanaryFailure], cleared: Iterable[ClearedVersion]
) -> tuple[FailedVersion, ...]:
    """Standing marks as ``failedVersions`` entries for every cluster (wave "", line 0: not
    written in gitopsbot.yaml; ``core.waves.promotion`` words the deny from the reason)."""
    return tuple(
        FailedVersion(version=m.version, wave="", reason=m.reason(), line=0)
        for m in standing(marks, cleared)
    )


def with_canary_marks(
    settings: BotSettings,
    marks: Iterable[CanaryFailure],
    cleared: Iterable[ClearedVersion],
) -> BotSettings:
    """``settings`` with the standing canary marks added to its failedVersions, so the
    promotion gate (``core.waves.promotion_gate``) holds those versions on every cluster."""
    extra = as_failed_versions(marks, cleared)
    if not extra:
        return settings
    return dataclasses.replace(settings, failed_versions=settings.failed_versions + extra)


def dumps(failure: CanaryFailure) -> str:
    data: dict[str, Any] = {
        "kind": _KIND,
        "version": failure.version,
        "cluster": failure.cluster,
        "pool": failure.pool,
        "operation": failure.op_id,
        "at": failure.at.astimezone(UTC).isoformat(),
        "message": failure.message,
    }
    if failure.node:
        data["node"] = failure.node
    return dump_yaml(data)


def loads(text: str, source: str = "<state>") -> CanaryFailure:
    """A record read back; ValueError when it is not one."""
    data = load_yaml(text, source)
    if not isinstance(data, Mapping) or data.get("kind") != _KIND:
        raise ValueError(f"{source}: not a {_KIND} record")

    def text_of(key: str, *, required: bool = True) -> str:
        value = data.get(key)
        if value is None and not required:
            return ""
        if not isinstance(value, str) or (required and not value):
            raise ValueError(f"{source}: {key} must be a non-empty string")
        return value

    try:
        at = datetime.fromisoformat(text_of("at"))
    except ValueError as exc:
        raise ValueError(f"{source}: at: {exc}") from None
    return CanaryFailure(
        version=text_of("version"),
        cluster=text_of("cluster"),
        pool=text_of("pool"),
        op_id=text_of("operation"),
        at=at if at.tzinfo else at.replace(tzinfo=UTC),
        message=text_of("message", required=False),
        node=text_of("node", required=False),
    )


def read_all(files: Mapping[str, str]) -> tuple[tuple[CanaryFailure, ...], tuple[str, ...]]:
    """Records from state-branch files (path → text; other paths ignored), and a problem
    per unreadable record. The caller fails closed on a problem: it cannot tell which
    version that record holds."""
    marks: list[CanaryFailure] = []
    problems: list[str] = []
    for path in sorted(files):
        if not is_record_path(path):
            continue
        try:
            marks.append(loads(files[path], path))
        except ValueError as exc:
            problems.append(str(exc))
    return tuple(marks), tuple(problems)
