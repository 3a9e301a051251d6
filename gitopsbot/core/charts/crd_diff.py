"""Compare two charts' ``crds/``: what ``kubectl apply`` of the new CRDs will change (R7).

Breaking: a CRD removed, a served version removed, the storage version changed, or a field
removed from a version's openAPIV3Schema (R16: CRDs are never downgraded, and removing
fields can prune data in existing resources). Added CRDs, versions and fields are not.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gitopsbot.core.charts.chart import Chart, Crd


class CrdChangeKind(StrEnum):
    CRD_ADDED = "crd-added"
    CRD_REMOVED = "crd-removed"
    VERSION_ADDED = "version-added"
    VERSION_REMOVED = "version-removed"
    STORAGE_CHANGED = "storage-changed"
    FIELDS_REMOVED = "fields-removed"
    FIELDS_ADDED = "fields-added"


BREAKING = frozenset(
    {
        CrdChangeKind.CRD_REMOVED,
        CrdChangeKind.VERSION_REMOVED,
        CrdChangeKind.STORAGE_CHANGED,
        CrdChangeKind.FIELDS_REMOVED,
    }
)


@dataclass(frozen=True, slots=True)
class CrdChange:
    kind: CrdChangeKind
    crd: str
    version: str = ""
    detail: str = ""
    fields: tuple[str, ...] = ()

    @property
    def breaking(self) -> bool:
        return self.kind in BREAKING


@dataclass(frozen=True, slots=True)
class CrdDiff:
    changes: tuple[CrdChange, ...]
    unchanged: tuple[str, ...] = ()

    @property
    def breaking(self) -> tuple[CrdChange, ...]:
        return tuple(c for c in self.changes if c.breaking)

    def drops_version(self) -> bool:
        """A served or stored version goes away (or a whole CRD does)."""
        return any(
            c.kind
            in {
                CrdChangeKind.CRD_REMOVED,
                CrdChangeKind.VERSION_REMOVED,
                CrdChangeKind.STORAGE_CHANGED,
            }
            for c in self.changes
        )


def diff_crds(old: tuple[Crd, ...], new: tuple[Crd, ...]) -> CrdDiff:
    before = {c.name: c for c in old}
    after = {c.name: c for c in new}
    changes: list[CrdChange] = []
    unchanged: list[str] = []
    for name in sorted(before.keys() | after.keys()):
        a, b = before.get(name), after.get(name)
        if a is None and b is not None:
            changes.append(CrdChange(CrdChangeKind.CRD_ADDED, name, detail=b.file))
            continue
        if b is None and a is not None:
            changes.append(CrdChange(CrdChangeKind.CRD_REMOVED, name, detail=a.file))
            continue
        assert a is not None and b is not None
        found = _diff_one(a, b)
        changes.extend(found)
        if not found:
            unchanged.append(name)
    return CrdDiff(tuple(changes), tuple(unchanged))


def _diff_one(a: Crd, b: Crd) -> list[CrdChange]:
    out: list[CrdChange] = []
    served_a = {v.name: v for v in a.versions if v.served}
    served_b = {v.name: v for v in b.versions if v.served}
    for name in sorted(served_a.keys() - served_b.keys()):
        out.append(CrdChange(CrdChangeKind.VERSION_REMOVED, a.name, version=name))
    for name in sorted(served_b.keys() - served_a.keys()):
        out.append(CrdChange(CrdChangeKind.VERSION_ADDED, a.name, version=name))
    if a.storage_version and a.storage_version != b.storage_version:
        out.append(
            CrdChange(
                CrdChangeKind.STORAGE_CHANGED,
                a.name,
                version=b.storage_version,
                detail=f"{a.storage_version} -> {b.storage_version or '(none)'}",
            )
        )
    all_b = {v.name: v for v in b.versions}
    for v in a.versions:
        nv = all_b.get(v.name)
        if nv is None:
            continue
        removed = v.fields - nv.fields
        # Report the top of each removed subtree only: its children go with it.
        tops = _tops(removed)
        if tops:
            out.append(
                CrdChange(CrdChangeKind.FIELDS_REMOVED, a.name, version=v.name, fields=tuple(tops))
            )
        added = nv.fields - v.fields
        added_tops = _tops(added)
        if added_tops:
            out.append(
                CrdChange(
                    CrdChangeKind.FIELDS_ADDED, a.name, version=v.name, fields=tuple(added_tops)
                )
            )
    return out


def _tops(paths: frozenset[str]) -> list[str]:
    return sorted(p for p in paths if not any(p.startswith((r + ".", r + "[")) for r in paths))


def diff_charts(old: Chart | None, new: Chart) -> CrdDiff:
    """CRD diff between the deployed chart (None: everything is added) and the target."""
    return diff_crds(old.crd_defs if old else (), new.crd_defs)
