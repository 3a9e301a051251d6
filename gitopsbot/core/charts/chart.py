"""Helm chart metadata, parsed purely from text and bytes the chart adapter hands over.

``parse_index`` reads a repository's ``index.yaml``; ``parse_chart_files`` reads one chart
(``Chart.yaml``, ``values.yaml``, ``values.schema.json``, ``crds/*``) given as a mapping of
chart-relative path to bytes. Versions order by semver (``semver_key``); the app version is
independent of the chart version and not monotonic (F5), so both are kept.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gitopsbot.core.fleet import located_yaml
from gitopsbot.errors import ChartInvalid, FleetError

_SEMVER = re.compile(
    r"^v?(?P<major>0|[1-9]\d*)(?:\.(?P<minor>\d+))?(?:\.(?P<patch>\d+))?"
    r"(?:-(?P<pre>[0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$"
)


def semver_key(version: str) -> tuple[Any, ...]:
    """Sort key for a semantic version; a pre-release sorts before its release.

    Raises ValueError for text that is not a version (callers name the file)."""
    m = _SEMVER.match(version.strip())
    if m is None:
        raise ValueError(f"not a semantic version: {version!r}")
    pre = m.group("pre")
    pre_key: tuple[Any, ...] = ()
    if pre:
        pre_key = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre.split("."))
    return (
        int(m.group("major")),
        int(m.group("minor") or 0),
        int(m.group("patch") or 0),
        0 if pre else 1,
        pre_key,
    )


def is_version(version: str) -> bool:
    return _SEMVER.match(version.strip()) is not None


def major(version: str) -> int:
    """The major number (``2`` for ``v2.17.0``); R2 is decided on the app major (F5)."""
    return int(semver_key(version)[0])


@dataclass(frozen=True, slots=True)
class ChartVersion:
    """One entry of a repository index."""

    name: str
    version: str
    app_version: str
    digest: str
    created: str
    urls: tuple[str, ...]
    annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def changes(self) -> str:
        """``artifacthub.io/changes`` where the chart publishes it, else ``""``."""
        return self.annotations.get("artifacthub.io/changes", "")


@dataclass(frozen=True, slots=True)
class ChartIndex:
    """A repository index: chart name -> versions, newest (semver) first."""

    entries: Mapping[str, tuple[ChartVersion, ...]]
    generated: str = ""

    def versions(self, name: str) -> tuple[ChartVersion, ...]:
        return self.entries.get(name, ())

    def get(self, name: str, version: str) -> ChartVersion | None:
        wanted = version.removeprefix("v")
        for entry in self.versions(name):
            if entry.version.removeprefix("v") == wanted:
                return entry
        return None

    def latest(self, name: str, *, prereleases: bool = False) -> ChartVersion | None:
        for entry in self.versions(name):
            if prereleases or semver_key(entry.version)[3] == 1:
                return entry
        return None


@dataclass(frozen=True, slots=True)
class CrdVersion:
    """One version of a CRD: whether served and stored, and its schema's field paths."""

    name: str
    served: bool
    storage: bool
    fields: frozenset[str]


@dataclass(frozen=True, slots=True)
class Crd:
    """A CustomResourceDefinition reduced to what an upgrade must compare (R7, R16)."""

    name: str  # metadata.name, e.g. gpupools.tensor-fusion.ai
    kind: str
    file: str
    versions: tuple[CrdVersion, ...]

    @property
    def storage_version(self) -> str:
        return next((v.name for v in self.versions if v.storage), "")


@dataclass(frozen=True, slots=True)
class Chart:
    """One chart version's data the plan needs. ``values`` are the chart defaults."""

    name: str
    version: str
    app_version: str
    values_text: str
    values: Mapping[str, Any]
    schema: Mapping[str, Any] | None
    crds: Mapping[str, str]  # crds/<file> -> text
    digest: str
    annotations: Mapping[str, str] = field(default_factory=dict)
    crd_defs: tuple[Crd, ...] = ()


# A chart repository's index.yaml lists every version of every chart (public ones run to tens
# of megabytes) and a CRD file can pass 1 MiB: larger bounds than a fleet file's, still bounds.
INDEX_LIMITS = located_yaml.YamlLimits(max_bytes=64 << 20, max_nodes=20_000_000)
CRD_LIMITS = located_yaml.YamlLimits(max_bytes=16 << 20, max_nodes=5_000_000)


def _load(
    text: str, source: str, limits: located_yaml.YamlLimits = located_yaml.DEFAULT_LIMITS
) -> Any:
    """One document through the project's YAML reader (bounded); ChartInvalid when refused."""
    try:
        return located_yaml.load(text, source, limits=limits)
    except FleetError as exc:
        raise ChartInvalid(str(exc.problems[0])) from None


def _str_map(raw: Any) -> dict[str, str]:
    if not isinstance(raw, Mapping):
        return {}
    return {str(k): str(v) for k, v in raw.items()}


def parse_index(text: str, *, source: str = "index.yaml") -> ChartIndex:
    """Parse a Helm repository index. Entries that are not versions are refused."""
    doc = _load(text, source, INDEX_LIMITS)
    if not isinstance(doc, Mapping) or not isinstance(doc.get("entries"), Mapping):
        raise ChartInvalid(f"{source}: not a Helm repository index (no 'entries' mapping)")
    entries: dict[str, tuple[ChartVersion, ...]] = {}
    for name, raw_list in doc["entries"].items():
        if not isinstance(raw_list, list):
            raise ChartInvalid(f"{source}: entries.{name}: expected a list")
        found: list[ChartVersion] = []
        for i, raw in enumerate(raw_list):
            if not isinstance(raw, Mapping) or not is_version(str(raw.get("version", ""))):
                raise ChartInvalid(f"{source}: entries.{name}[{i}].version: not a version")
            urls = raw.get("urls") or []
            found.append(
                ChartVersion(
                    name=str(name),
                    version=str(raw["version"]),
                    app_version=str(raw.get("appVersion", "")),
                    digest=str(raw.get("digest", "")),
                    created=str(raw.get("created", "")),
                    urls=tuple(str(u) for u in urls) if isinstance(urls, list) else (),
                    annotations=_str_map(raw.get("annotations")),
                )
            )
        found.sort(key=lambda e: semver_key(e.version), reverse=True)
        entries[str(name)] = tuple(found)
    return ChartIndex(entries=entries, generated=str(doc.get("generated", "")))


def schema_fields(schema: Any, prefix: str = "") -> set[str]:
    """Dotted field paths declared by an openAPIV3Schema (``spec.gpuPools[].name``)."""
    out: set[str] = set()
    if not isinstance(schema, Mapping):
        return out
    props = schema.get("properties")
    if isinstance(props, Mapping):
        for key, sub in props.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            out.add(path)
            out |= schema_fields(sub, path)
    items = schema.get("items")
    if isinstance(items, Mapping):
        out |= schema_fields(items, f"{prefix}[]")
    extra = schema.get("additionalProperties")
    if isinstance(extra, Mapping):
        out |= schema_fields(extra, f"{prefix}.*" if prefix else "*")
    return out


def parse_crd(text: str, *, source: str) -> tuple[Crd, ...]:
    """The CRDs in one file (multi-document YAML allowed)."""
    try:
        docs = located_yaml.load_all(text, source, limits=CRD_LIMITS)
    except FleetError as exc:
        raise ChartInvalid(str(exc.problems[0])) from None
    out: list[Crd] = []
    for doc in docs:
        if not isinstance(doc, Mapping) or doc.get("kind") != "CustomResourceDefinition":
            continue
        spec = doc.get("spec") or {}
        versions: list[CrdVersion] = []
        for v in spec.get("versions") or []:
            schema = ((v.get("schema") or {}).get("openAPIV3Schema")) or {}
            versions.append(
                CrdVersion(
                    name=str(v.get("name", "")),
                    served=bool(v.get("served", False)),
                    storage=bool(v.get("storage", False)),
                    fields=frozenset(schema_fields(schema)),
                )
            )
        out.append(
            Crd(
                name=str((doc.get("metadata") or {}).get("name", "")),
                kind=str((spec.get("names") or {}).get("kind", "")),
                file=source,
                versions=tuple(versions),
            )
        )
    return tuple(out)


def parse_chart_files(files: Mapping[str, bytes], *, digest: str, source: str = "chart") -> Chart:
    """Build a Chart from its files, keyed by chart-relative POSIX path.

    Only ``Chart.yaml`` is required; a chart without values, schema or CRDs is valid.
    """

    def text(path: str) -> str | None:
        raw = files.get(path)
        if raw is None:
            return None
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ChartInvalid(f"{source}/{path}: not UTF-8 text") from None

    meta_text = text("Chart.yaml")
    if meta_text is None:
        raise ChartInvalid(f"{source}: no Chart.yaml")
    meta = _load(meta_text, f"{source}/Chart.yaml")
    if not isinstance(meta, Mapping) or not is_version(str(meta.get("version", ""))):
        raise ChartInvalid(f"{source}/Chart.yaml: version: missing or not a semantic version")
    values_text = text("values.yaml") or ""
    values = _load(values_text, f"{source}/values.yaml") if values_text else {}
    if values is None:
        values = {}
    if not isinstance(values, Mapping):
        raise ChartInvalid(f"{source}/values.yaml: top level must be a mapping")
    schema_text = text("values.schema.json")
    schema: Mapping[str, Any] | None = None
    if schema_text is not None:
        try:
            schema = json.loads(schema_text)
        except json.JSONDecodeError as exc:
            raise ChartInvalid(
                f"{source}/values.schema.json:{exc.lineno}:{exc.colno}: {exc.msg}"
            ) from None
    crds: dict[str, str] = {}
    crd_defs: list[Crd] = []
    for path in sorted(files):
        if path.startswith("crds/") and path.endswith((".yaml", ".yml", ".json")):
            body = text(path) or ""
            crds[path.removeprefix("crds/")] = body
            crd_defs.extend(parse_crd(body, source=path))
    return Chart(
        name=str(meta.get("name", "")),
        version=str(meta["version"]),
        app_version=str(meta.get("appVersion", "")),
        values_text=values_text,
        values=values,
        schema=schema,
        crds=crds,
        digest=digest,
        annotations=_str_map(meta.get("annotations")),
        crd_defs=tuple(crd_defs),
    )
