"""Charts from OCI registries (``oci://host[:port]/path`` in release.yaml), through helm's own
OCI support, and the chart source that sends each repository URL to its kind.

``OciChartSource.chart`` asks the registry which manifest the version's tag points at now
(``HEAD /v2/<path>/<chart>/manifests/<version>``), and pulls that manifest by its digest
with ``helm pull`` (helm 3 or helm 4, the login of gitopsbot.yaml's ``chartRegistries``)
unless it was pulled already: a tag re-pushed with other content is pulled again, never
served from memory, and a tag moved between the two asks cannot swap the archive. The
``Chart`` it returns is read from the archive helm pulled, bytes for bytes, and its
``digest`` is that archive's sha256, as for a chart from an HTTP repository: what a plan
records and the apply checks is the same for both kinds. ``index`` lists the chart's tags
(an OCI repository has no index.yaml: it needs the chart's name).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from gitopsbot.adapters.chartrepo import (
    MAX_ARCHIVE_BYTES,
    keep_archive,
    kept_archive,
    unpack_chart_archive,
)
from gitopsbot.adapters.helm import HelmCli
from gitopsbot.adapters.oci_registry import RegistryApi, unauthorized
from gitopsbot.core.charts.chart import (
    Chart,
    ChartIndex,
    ChartVersion,
    is_version,
    parse_chart_files,
    semver_key,
)
from gitopsbot.errors import (
    ChartInvalid,
    ChartNotFound,
    ChartUnavailable,
    HelmChartUnusable,
    HelmError,
    HelmTimeout,
)
from gitopsbot.ports.charts import (
    ChartArchive,
    ChartArchives,
    ChartSource,
    ProvenanceFiles,
    fetched_again,
)
from gitopsbot.ports.helm import ChartRef

T = TypeVar("T")
_REFUSED = ("response status code 401", "response status code 403", "unauthorized")


class OciChartSource(ChartSource, ChartArchives, ProvenanceFiles):
    """Charts of ``oci://`` repositories. ``helm``: a HelmCli made on
    first use (no helm is looked for by a bot whose charts are all over HTTP)."""

    def __init__(
        self, helm: Callable[[], HelmCli], api: RegistryApi, archives: Path | None = None
    ) -> None:
        self._helm_factory = helm
        self._helm: HelmCli | None = None
        self._api = api
        # Where the archives a plan reviewed and an apply installs are kept, by sha256
        # (``ports.charts.ChartArchives``, docs/plan.md "Digests"); None: not kept.
        self._archives = archives
        self._charts: dict[str, Chart] = {}  # manifest digest -> chart read from it
        self._configs: dict[tuple[str, str, str], dict[str, Any]] = {}  # (url, chart, tag)

    def close(self) -> None:
        self._api.close()

    def index(self, repo_url: str, name: str = "") -> ChartIndex:
        if not name:
            raise ChartNotFound(
                f"{repo_url}: an OCI repository lists versions per chart: name the chart"
            )
        versions = [
            self._entry(repo_url, name, tag)
            for tag in set(self._api.tags(repo_url, name))
            if is_version(tag.replace("_", "+"))
        ]
        versions.sort(key=lambda v: semver_key(v.version), reverse=True)
        return ChartIndex({name: tuple(versions)} if versions else {})

    def _entry(self, repo_url: str, name: str, tag: str) -> ChartVersion:
        """An index entry from the tag's chart metadata (what proposals judge: appVersion,
        annotations), read once per tag in this source's life; the archive is ``chart``'s."""
        key = (repo_url, name, tag)
        if key not in self._configs:
            self._configs[key] = self._api.chart_config(repo_url, name, tag)
        meta = self._configs[key]
        annotations = meta.get("annotations")
        return ChartVersion(
            name=name,
            version=tag.replace("_", "+"),
            app_version=str(meta.get("appVersion") or ""),
            digest="",
            created="",
            urls=(),
            annotations={str(k): str(v) for k, v in annotations.items()}
            if isinstance(annotations, dict)
            else {},
        )

    def chart(self, repo_url: str, name: str, version: str) -> Chart:
        manifest = self._api.manifest_digest(repo_url, name, version)
        known = self._charts.get(manifest)
        if known is not None:
            return known
        data = self._pull(repo_url, name, version, manifest)
        if len(data) > MAX_ARCHIVE_BYTES:
            raise ChartInvalid(f"{repo_url}/{name}:{version}: larger than {MAX_ARCHIVE_BYTES} B")
        source = f"{repo_url.rstrip('/')}/{name}:{version}"
        files = unpack_chart_archive(data, source=source)
        chart = parse_chart_files(files, digest=hashlib.sha256(data).hexdigest(), source=source)
        self._charts[manifest] = chart
        return chart

    def fetch(self, repo_url: str, name: str, version: str) -> ChartArchive:
        """The archive the registry serves for the tag now (its manifest asked again, the
        layer pulled by that manifest's digest), kept under its sha256: the same digest as an
        HTTP repository's archive of the same bytes."""
        if self._archives is None:
            raise ChartUnavailable(f"{repo_url}: no directory to keep chart archives in")
        manifest = self._api.manifest_digest(repo_url, name, version)
        data = self._pull(repo_url, name, version, manifest)
        if len(data) > MAX_ARCHIVE_BYTES:
            raise ChartInvalid(f"{repo_url}/{name}:{version}: larger than {MAX_ARCHIVE_BYTES} B")
        path, digest = keep_archive(self._archives, data)
        source = f"{repo_url.rstrip('/')}/{name}:{version}@{manifest}"
        return ChartArchive(path, digest, source, manifest=manifest)

    def kept(self, repo_url: str, name: str, version: str, digest: str) -> ChartArchive:
        path = kept_archive(self._archives, digest) if self._archives is not None else None
        if path is not None:
            return ChartArchive(path, digest, f"{repo_url.rstrip('/')}/{name}:{version}")
        return fetched_again(self, repo_url, name, version, digest)

    def provenance(self, repo_url: str, name: str, version: str) -> bytes | None:
        """The provenance layer of the tag's manifest (``helm push`` of an archive with its
        ``.prov`` beside it), pulled by the manifest's digest; None when it has none."""
        manifest = self._api.manifest_digest(repo_url, name, version)
        ref = ChartRef(name=name, repo_url=repo_url)
        return self._helm_call(repo_url, lambda h: h.pull_provenance(ref, version, manifest))

    def _pull(self, repo_url: str, name: str, version: str, manifest: str) -> bytes:
        ref = ChartRef(name=name, repo_url=repo_url)
        return self._helm_call(repo_url, lambda h: h.pull_archive(ref, version, manifest))

    def _helm_call(self, repo_url: str, call: Callable[[HelmCli], T]) -> T:
        if self._helm is None:
            self._helm = self._helm_factory()
        try:
            return call(self._helm)
        except HelmTimeout as exc:
            raise ChartUnavailable(str(exc)) from None
        except HelmChartUnusable as exc:
            if any(word in str(exc) for word in _REFUSED):
                login = self._api.login_for(repo_url)
                raise unauthorized(repo_url, login, 401) from None
            raise ChartInvalid(str(exc)) from None
        except HelmError as exc:
            raise ChartUnavailable(str(exc)) from None


class ChartSources(ChartSource, ChartArchives, ProvenanceFiles):
    """One ChartSource for every kind of repository URL: ``oci://`` to the OCI source (made
    on first use), the rest to the HTTP one."""

    def __init__(self, http: ChartSource, oci: Callable[[], OciChartSource]) -> None:
        self._http = http
        self._oci_factory = oci
        self._oci: OciChartSource | None = None

    def _for(self, repo_url: str) -> ChartSource:
        if not repo_url.startswith("oci://"):
            return self._http
        if self._oci is None:
            self._oci = self._oci_factory()
        return self._oci

    def index(self, repo_url: str, name: str = "") -> ChartIndex:
        return self._for(repo_url).index(repo_url, name)

    def chart(self, repo_url: str, name: str, version: str) -> Chart:
        return self._for(repo_url).chart(repo_url, name, version)

    def fetch(self, repo_url: str, name: str, version: str) -> ChartArchive:
        return self._archives_for(repo_url).fetch(repo_url, name, version)

    def kept(self, repo_url: str, name: str, version: str, digest: str) -> ChartArchive:
        return self._archives_for(repo_url).kept(repo_url, name, version, digest)

    def provenance(self, repo_url: str, name: str, version: str) -> bytes | None:
        source = self._for(repo_url)
        if not isinstance(source, ProvenanceFiles):
            raise ChartUnavailable(f"{repo_url}: its chart source serves no provenance files")
        return source.provenance(repo_url, name, version)

    def _archives_for(self, repo_url: str) -> ChartArchives:
        source = self._for(repo_url)
        if not isinstance(source, ChartArchives):
            raise ChartUnavailable(f"{repo_url}: its chart source keeps no archives")
        return source

    def close(self) -> None:
        for source in (self._http, self._oci):
            close = getattr(source, "close", None)
            if close is not None:
                close()
