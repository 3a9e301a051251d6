"""``waves:`` and ``failedVersions:`` in gitopsbot.yaml: the order in which a chart version
is promoted through the fleet, and the versions marked as failed (docs/fleet-repo.md, Waves).

Every wrong entry is a located ``Problem`` (``gitopsbot.yaml:LINE:COL: waves[1].soak``).
Which clusters a wave takes is not checked here: the clusters are read later, and a wave
that selects none is allowed (it is skipped, see ``core.waves.promotion``).
"""

from __future__ import annotations

import re
from typing import Any

from gitopsbot.core.fleet.fields import FieldReader, is_semver, suggest
from gitopsbot.core.fleet.located_yaml import LocatedList, LocatedMap
from gitopsbot.core.fleet.model import (
    ClearedVersion,
    Environment,
    FailedVersion,
    Wave,
    WaveSelector,
)

_WAVE_KEYS = ("name", "clusters", "soak", "gateValues")
_SELECTOR_KEYS = ("environment", "names", "labels")
_FAILED_KEYS = ("version", "wave", "reason")
_CLEARED_KEYS = ("version", "reason", "operation")
_ENVIRONMENTS = tuple(e.value for e in Environment)
_DAYS = re.compile(r"^\s*(\d+)d\s*$")


def read_waves(r: FieldReader, top: LocatedMap) -> tuple[Wave, ...]:
    waves: list[Wave] = []
    first_line: dict[str, int] = {}
    for i, (item, at) in enumerate(r.entries(top, "waves", "")):
        name = item.get("name") if isinstance(item, LocatedMap) else None
        if isinstance(name, str) and name in first_line:
            # Reported even when the entry has other faults: the name is what
            # failedVersions and status refer to.
            r.add(
                r.value_at(item, "name"),
                f"waves[{i}].name",
                f"duplicate wave name '{name}'",
                f"first defined at line {first_line[name]}",
            )
            continue
        if isinstance(name, str):
            first_line[name] = at[0]
        wave = _wave(r, i, item, at)
        if wave is not None:
            waves.append(wave)
    return tuple(waves)


def read_failed_versions(r: FieldReader, top: LocatedMap) -> tuple[FailedVersion, ...]:
    """``failedVersions:``: a bare version fails it everywhere; ``{version, wave, reason}``
    fails it from that wave on. A person clears a mark by removing it."""
    # Every name written under waves:, even of a wave with faults of its own: those are
    # reported there, and "no wave is named" here would only mislead.
    declared = top.get("waves")
    names = tuple(
        w["name"]
        for w in (declared if isinstance(declared, LocatedList) else ())
        if isinstance(w, LocatedMap) and isinstance(w.get("name"), str)
    )
    out: list[FailedVersion] = []
    for i, (item, at) in enumerate(r.entries(top, "failedVersions", "")):
        fld = f"failedVersions[{i}]"
        if isinstance(item, str):
            if _version_ok(r, item, fld, at):
                out.append(FailedVersion(version=item, line=at[0]))
            continue
        entry = r.mapping(item, fld, at, _FAILED_KEYS)
        if entry is None:
            continue
        before = len(r.problems)
        version = _version_key(r, entry, fld)
        wave = r.string(entry, "wave", fld)
        if wave and wave not in names:
            r.add(
                r.value_at(entry, "wave"),
                f"{fld}.wave",
                f"no wave is named '{wave}'",
                suggest(wave, names) if names else "define it under waves:",
            )
        reason = r.string(entry, "reason", fld)
        if len(r.problems) == before:
            out.append(FailedVersion(version=version, wave=wave, reason=reason, line=at[0]))
    return tuple(out)


def read_cleared_versions(r: FieldReader, top: LocatedMap) -> tuple[ClearedVersion, ...]:
    """``clearedVersions:``: a person clears the GPU canary's failed-version marks
    (``core.waves.canary_marks``) of ``version``, all of them or only ``operation``'s; the
    ``reason`` is required, as the record of why the version may go again."""
    out: list[ClearedVersion] = []
    for i, (item, at) in enumerate(r.entries(top, "clearedVersions", "")):
        fld = f"clearedVersions[{i}]"
        entry = r.mapping(item, fld, at, _CLEARED_KEYS)
        if entry is None:
            continue
        before = len(r.problems)
        version = _version_key(r, entry, fld)
        reason = r.string(entry, "reason", fld, required=True)
        operation = r.string(entry, "operation", fld)
        if len(r.problems) == before:
            out.append(ClearedVersion(version, reason, operation, line=at[0]))
    return tuple(out)


def _version_key(r: FieldReader, entry: LocatedMap, fld: str) -> str:
    """An entry's required ``version:``, a SemVer version (a problem recorded when not)."""
    version = r.string(entry, "version", fld, required=True)
    if version:
        _version_ok(r, version, f"{fld}.version", r.value_at(entry, "version"))
    return version


def _version_ok(r: FieldReader, version: str, fld: str, at: tuple[int, int]) -> bool:
    if is_semver(version):
        return True
    r.add(at, fld, f"'{version}' is not a SemVer version", "write MAJOR.MINOR.PATCH, e.g. 1.8.7")
    return False


def _wave(r: FieldReader, i: int, item: Any, at: tuple[int, int]) -> Wave | None:
    fld = f"waves[{i}]"
    entry = r.mapping(item, fld, at, _WAVE_KEYS)
    if entry is None:
        return None
    before = len(r.problems)
    name = r.string(entry, "name", fld, required=True)
    if "clusters" not in entry:
        hint = "e.g. clusters: {environment: staging}"
        r.add(at, f"{fld}.clusters", "required key is missing", hint)
    selector = _selector(r, entry, fld)
    soak = 0
    days = _DAYS.match(entry["soak"]) if isinstance(entry.get("soak"), str) else None
    if days:
        # Durations are whole h/m/s everywhere in the fleet; say what to write instead.
        hint = f"write {int(days.group(1)) * 24}h"
        r.add(r.value_at(entry, "soak"), f"{fld}.soak", "days are not a duration unit", hint)
    else:
        soak = r.duration(entry, "soak", fld, 0, minimum=0)
    gate_values = r.boolean(entry, "gateValues", fld, False)
    if len(r.problems) > before or selector is None:
        return None
    return Wave(
        name=name, clusters=selector, soak_seconds=soak, gate_values=gate_values, line=at[0]
    )


def _selector(r: FieldReader, entry: LocatedMap, fld: str) -> WaveSelector | None:
    if entry.get("clusters") is None:
        return None
    prefix = f"{fld}.clusters"
    node = r.section(entry, "clusters", fld, _SELECTOR_KEYS)
    if not isinstance(entry["clusters"], LocatedMap):
        return None  # "expected a mapping" is already reported
    if not any(key in node for key in _SELECTOR_KEYS):
        # An empty selector would take no cluster (or, read the other way, all of them):
        # either is a surprise, so say what to write.
        r.add(
            r.value_at(entry, "clusters"),
            prefix,
            "selects nothing: give environment, names or labels",
            'for every remaining cluster write names: ["*"]',
        )
        return None
    env = r.choice(node, "environment", prefix, "", _ENVIRONMENTS)
    names, where = r.string_list(node, "names", prefix, ())
    for j, (pattern, pattern_at) in enumerate(zip(names, where, strict=True)):
        if not pattern.strip():
            r.add(pattern_at, f"{prefix}.names[{j}]", "must not be empty", "e.g. prod-*")
    labels = r.labels(node, "labels", prefix)
    return WaveSelector(environment=Environment(env) if env else None, names=names, labels=labels)
