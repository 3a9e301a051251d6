"""Where chart metadata comes from: a Helm repository over HTTP, or local directories/archives;
the chart archives an apply uses (fetched once, kept by digest) and their rendering."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from gitopsbot.core.charts.chart import Chart, ChartIndex
from gitopsbot.core.planning.provenance import Provenance
from gitopsbot.errors import ChartInvalid


class ChartSource(Protocol):
    def index(self, repo_url: str, name: str = "") -> ChartIndex:
        """The repository's index. Raises ChartUnavailable (retry) or ChartNotFound.
        ``name``: the chart whose versions are wanted. An HTTP repository's index holds every
        chart; an OCI repository lists versions per chart (its tags), so there it is
        required."""
        ...

    def chart(self, repo_url: str, name: str, version: str) -> Chart:
        """One chart version. Raises ChartNotFound, ChartUnavailable or ChartInvalid."""
        ...


@dataclass(frozen=True, slots=True)
class ChartArchive:
    """One chart version's archive on this machine: a ``.tgz`` (a chart directory for a
    local source), its digest (``sha256:<hex>``) and where it came from (no credentials);
    from an OCI registry, also the digest of the manifest the tag pointed at (a tag
    re-pushed with the same archive bytes has another manifest); ``provenance``: what
    verifying it with gitopsbot.yaml's ``chartKeyrings`` found (None: no keyrings
    configured, nothing verified)."""

    path: Path
    digest: str
    source: str
    manifest: str = ""
    provenance: Provenance | None = None


@runtime_checkable
class ChartArchives(Protocol):
    """The archives a plan renders and an apply installs (docs/plan.md, "Digests")."""

    def fetch(self, repo_url: str, name: str, version: str) -> ChartArchive:
        """The archive the repository serves now (its index asked again, not a cached one).
        Raises ChartNotFound, ChartUnavailable or ChartInvalid."""
        ...

    def kept(self, repo_url: str, name: str, version: str, digest: str) -> ChartArchive:
        """The archive with ``digest``: the one kept on disk, else fetched again; ChartInvalid
        when the repository now serves other bytes."""
        ...


def fetched_again(
    archives: ChartArchives, repo_url: str, name: str, version: str, digest: str
) -> ChartArchive:
    """What ``kept`` does when the archive is not on disk: ``fetch`` it again, ChartInvalid
    when the repository now serves other bytes than ``digest``."""
    found = archives.fetch(repo_url, name, version)
    if found.digest != digest:
        raise ChartInvalid(
            f"{found.source}: archive {found.digest} is not {digest}, the one this "
            "operation was admitted with"
        )
    return found


@runtime_checkable
class ProvenanceFiles(Protocol):
    """The provenance files (``<chart>-<version>.tgz.prov``) a chart source serves."""

    def provenance(self, repo_url: str, name: str, version: str) -> bytes | None:
        """The version's provenance file, None when the repository has none. Raises
        ChartUnavailable (retry), ChartNotFound or ChartInvalid."""
        ...


class ManifestRenderer(Protocol):
    def template(
        self, chart: Path, *, release: str, namespace: str, values: Mapping[str, Any]
    ) -> str:
        """The manifests ``chart`` renders with ``values`` (``helm template``). Raises
        HelmError."""
        ...
