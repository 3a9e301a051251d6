"""Chart sources: a Helm repository over HTTP (httpx) and local chart directories/archives.

Archives are unpacked in memory (size- and count-bounded; absolute paths, ``..``, links and
devices refused) and only the files the plan reads are kept: ``Chart.yaml``, ``values.yaml``,
``values.schema.json`` and ``crds/*``. Downloaded archives are cached by their sha256 digest
under ``<cache>/charts/<sha256>.tgz`` and verified against the index digest. Vendor errors
become ``ChartUnavailable`` (retry), ``ChartNotFound`` or ``ChartInvalid``.

A repository index is cached for ``index_ttl_seconds`` (default 300 s) so a long-running
``run``/``propose`` loop sees newly published versions; once stale it is revalidated with a
conditional request (``If-None-Match`` / ``If-Modified-Since`` from the last ``ETag`` /
``Last-Modified``), and a ``304 Not Modified`` keeps the parsed index without re-downloading.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import httpx

from gitopsbot.core.charts.chart import (
    Chart,
    ChartIndex,
    ChartVersion,
    parse_chart_files,
    semver_key,
)
from gitopsbot.errors import ChartInvalid, ChartNotFound, ChartUnavailable
from gitopsbot.ports.charts import (
    ChartArchive,
    ChartArchives,
    ChartSource,
    ProvenanceFiles,
    fetched_again,
)

MAX_ARCHIVE_BYTES = 20 * 1024 * 1024
MAX_UNPACKED_BYTES = 100 * 1024 * 1024
MAX_MEMBERS = 5000
MAX_INDEX_BYTES = 20 * 1024 * 1024
MAX_PROVENANCE_BYTES = 1024 * 1024


def _wanted(path: str) -> bool:
    return path in {"Chart.yaml", "values.yaml", "values.schema.json"} or (
        path.startswith("crds/") and path.count("/") == 1
    )


def unpack_chart_archive(data: bytes, *, source: str) -> dict[str, bytes]:
    """The plan-relevant files of a chart ``.tgz``, keyed relative to the chart root."""
    if len(data) > MAX_ARCHIVE_BYTES:
        raise ChartInvalid(f"{source}: archive larger than {MAX_ARCHIVE_BYTES} bytes")
    files: dict[str, bytes] = {}
    total = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
            for count, member in enumerate(tar, 1):
                if count > MAX_MEMBERS:
                    raise ChartInvalid(f"{source}: more than {MAX_MEMBERS} entries")
                name = PurePosixPath(member.name)
                if name.is_absolute() or ".." in name.parts:
                    raise ChartInvalid(f"{source}: unsafe path {member.name!r} in archive")
                if member.isdir():
                    continue
                if not member.isfile():
                    # Links and devices have no place in a chart; refuse rather than follow.
                    raise ChartInvalid(f"{source}: {member.name!r} is not a regular file")
                total += member.size
                if total > MAX_UNPACKED_BYTES:
                    raise ChartInvalid(f"{source}: unpacks to more than {MAX_UNPACKED_BYTES} bytes")
                if len(name.parts) < 2:
                    continue
                rel = PurePosixPath(*name.parts[1:]).as_posix()  # strip "<chart>/"
                if not _wanted(rel):
                    continue
                handle = tar.extractfile(member)
                if handle is not None:
                    files[rel] = handle.read()
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise ChartInvalid(f"{source}: not a chart archive ({exc})") from None
    if "Chart.yaml" not in files:
        raise ChartInvalid(f"{source}: no <chart>/Chart.yaml in archive")
    return files


def _redact(url: str) -> str:
    """A URL without user:password, for messages."""
    try:
        u = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        return "<invalid url>"
    return str(u.copy_with(username=None, password=None)) if u.userinfo else str(u)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True, slots=True)
class _CachedIndex:
    index: ChartIndex
    fetched_at: float  # clock() reading when last fetched or revalidated
    etag: str | None
    last_modified: str | None


class HttpChartSource(ChartSource, ChartArchives, ProvenanceFiles):
    """A Helm chart repository over HTTP(S), with an on-disk archive cache."""

    def __init__(
        self,
        *,
        cache_dir: Path,
        client: httpx.Client | None = None,
        timeout_seconds: float = 30.0,
        index_ttl_seconds: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._cache = cache_dir / "charts"
        self._client = client or httpx.Client(timeout=timeout_seconds, follow_redirects=True)
        self._index_ttl = index_ttl_seconds
        self._clock = clock
        self._indexes: dict[str, _CachedIndex] = {}
        self._charts: dict[str, Chart] = {}

    def close(self) -> None:
        self._client.close()

    def _get(self, url: str, *, limit: int) -> bytes:
        return self._request(url, limit=limit).content

    def _request(
        self, url: str, *, limit: int, headers: Mapping[str, str] | None = None
    ) -> httpx.Response:
        shown = _redact(url)
        try:
            response = self._client.get(url, headers=dict(headers or {}))
        except httpx.TimeoutException:
            raise ChartUnavailable(f"{shown}: timed out") from None
        except httpx.HTTPError as exc:
            raise ChartUnavailable(f"{shown}: {type(exc).__name__}") from None
        if response.status_code == 404:
            raise ChartNotFound(f"{shown}: 404 not found")
        if response.status_code >= 500 or response.status_code == 429:
            retry = response.headers.get("retry-after", "")
            raise ChartUnavailable(
                f"{shown}: HTTP {response.status_code}",
                retry_after=float(retry) if retry.isdigit() else None,
            )
        if response.status_code >= 400:
            raise ChartNotFound(f"{shown}: HTTP {response.status_code}")
        if len(response.content) > limit:
            raise ChartInvalid(f"{shown}: response larger than {limit} bytes")
        return response

    @staticmethod
    def _index_url(repo_url: str) -> str:
        return repo_url.rstrip("/") + "/index.yaml"

    def index(self, repo_url: str, name: str = "", *, fresh: bool = False) -> ChartIndex:
        """The index (every chart's: ``name`` is for OCI repositories); ``fresh``: asked
        again (conditionally) whatever its age."""
        now = self._clock()
        cached = self._indexes.get(repo_url)
        if not fresh and cached is not None and now - cached.fetched_at < self._index_ttl:
            return cached.index
        from gitopsbot.core.charts.chart import parse_index

        url = self._index_url(repo_url)
        conditional: dict[str, str] = {}
        if cached is not None and cached.etag:
            conditional["If-None-Match"] = cached.etag
        if cached is not None and cached.last_modified:
            conditional["If-Modified-Since"] = cached.last_modified
        response = self._request(url, limit=MAX_INDEX_BYTES, headers=conditional)
        etag = response.headers.get("etag")
        last_modified = response.headers.get("last-modified")
        if response.status_code == 304 and cached is not None:
            self._indexes[repo_url] = _CachedIndex(
                index=cached.index,
                fetched_at=now,
                etag=etag or cached.etag,
                last_modified=last_modified or cached.last_modified,
            )
            return cached.index
        try:
            text = response.content.decode("utf-8")
        except UnicodeDecodeError:
            raise ChartInvalid(f"{_redact(url)}: not UTF-8") from None
        parsed = parse_index(text, source=_redact(url))
        self._indexes[repo_url] = _CachedIndex(
            index=parsed, fetched_at=now, etag=etag, last_modified=last_modified
        )
        return parsed

    def chart(self, repo_url: str, name: str, version: str) -> Chart:
        entry = self.index(repo_url).get(name, version)
        if entry is None:
            raise ChartNotFound(f"chart {name} {version} is not in {_redact(repo_url)}")
        if entry.digest and entry.digest in self._charts:
            return self._charts[entry.digest]
        data = self._archive(repo_url, entry)
        files = unpack_chart_archive(data, source=f"{name}-{version}.tgz")
        chart = parse_chart_files(files, digest=_sha256(data), source=f"{name}-{version}")
        self._charts[entry.digest or chart.digest] = chart
        return chart

    def fetch(self, repo_url: str, name: str, version: str) -> ChartArchive:
        """The archive as the repository serves it now: the index is asked again (a 304
        keeps it), the archive read from the cache when the index digest names it, else
        downloaded and verified against the index digest; kept under its sha256."""
        entry = self.index(repo_url, fresh=True).get(name, version)
        if entry is None:
            raise ChartNotFound(f"chart {name} {version} is not in {_redact(repo_url)}")
        path, digest = keep_archive(self._cache, self._archive(repo_url, entry))
        return ChartArchive(path, digest, _redact(self._archive_url(repo_url, entry)))

    def kept(self, repo_url: str, name: str, version: str, digest: str) -> ChartArchive:
        path = kept_archive(self._cache, digest)
        if path is not None:
            entry = self.index(repo_url).get(name, version)
            where = self._archive_url(repo_url, entry) if entry is not None else repo_url
            return ChartArchive(path, digest, _redact(where))
        return fetched_again(self, repo_url, name, version, digest)

    def provenance(self, repo_url: str, name: str, version: str) -> bytes | None:
        """``<archive URL>.prov`` (helm's convention for a signed chart), None on a 404."""
        entry = self.index(repo_url).get(name, version)
        if entry is None or not entry.urls:
            raise ChartNotFound(f"chart {name} {version} is not in {_redact(repo_url)}")
        url = self._archive_url(repo_url, entry) + ".prov"
        response = self._request_or_none(url, limit=MAX_PROVENANCE_BYTES)
        return response.content if response is not None else None

    def _request_or_none(self, url: str, *, limit: int) -> httpx.Response | None:
        try:
            return self._request(url, limit=limit)
        except ChartNotFound as exc:
            if str(exc).endswith(": 404 not found"):
                return None
            raise

    def _archive_url(self, repo_url: str, entry: ChartVersion) -> str:
        if not entry.urls:
            return repo_url
        # URLs may be relative to the index (helm repo index --url omitted).
        return str(httpx.URL(self._index_url(repo_url)).join(entry.urls[0]))

    def _archive(self, repo_url: str, entry: ChartVersion) -> bytes:
        path = self._cache / f"{entry.digest}.tgz" if entry.digest else None
        if path is not None and path.is_file():
            data = path.read_bytes()
            if _sha256(data) == entry.digest:
                return data
        if not entry.urls:
            raise ChartNotFound(f"chart {entry.name} {entry.version}: index lists no URL")
        url = self._archive_url(repo_url, entry)
        data = self._get(url, limit=MAX_ARCHIVE_BYTES)
        if entry.digest and _sha256(data) != entry.digest:
            raise ChartInvalid(
                f"{_redact(url)}: sha256 {_sha256(data)[:12]}… does not match the index "
                f"digest {entry.digest[:12]}…"
            )
        if path is not None:
            _write(path, data)
        return data


def keep_archive(directory: Path, data: bytes) -> tuple[Path, str]:
    """Keep an archive's bytes in ``directory`` under their sha256 (written whole or not at
    all); its path and digest (``sha256:<hex>``)."""
    digest = _sha256(data)
    path = directory / f"{digest}.tgz"
    if not path.is_file():
        _write(path, data)
    return path, f"sha256:{digest}"


def kept_archive(directory: Path, digest: str) -> Path | None:
    """The archive ``keep_archive`` kept in ``directory`` with ``digest``, None when it is
    not there intact."""
    hexdigest = digest.removeprefix("sha256:")
    path = directory / f"{hexdigest}.tgz"
    return path if path.is_file() and _sha256(path.read_bytes()) == hexdigest else None


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".part")
    tmp.write_bytes(data)
    tmp.replace(path)


def _dir_files(root: Path) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    for rel in ("Chart.yaml", "values.yaml", "values.schema.json"):
        p = root / rel
        if p.is_file():
            files[rel] = p.read_bytes()
    crds = root / "crds"
    if crds.is_dir():
        for p in sorted(crds.iterdir()):
            if p.is_file():
                files[f"crds/{p.name}"] = p.read_bytes()
    return files


def _digest_files(files: Mapping[str, bytes]) -> str:
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(path.encode() + b"\0" + hashlib.sha256(files[path]).digest())
    return h.hexdigest()


class LocalChartSource(ChartSource, ChartArchives, ProvenanceFiles):
    """Charts from local paths, for offline plans (``--chart-dir``, ``GITOPSBOT_CHARTS``).

    Each path is a chart directory (has ``Chart.yaml``), a chart archive (``.tgz``), or a
    directory holding either (a Helm repository directory works: its archives are read, its
    ``index.yaml`` is not needed). The repository URL is ignored: every chart found answers.
    """

    def __init__(self, paths: Iterable[Path]) -> None:
        self._paths = [Path(p) for p in paths]
        self._charts: dict[tuple[str, str], Chart] | None = None

    def _candidates(self) -> list[Path]:
        out: list[Path] = []
        for path in self._paths:
            if path.is_file() or (path / "Chart.yaml").is_file():
                out.append(path)
            elif path.is_dir():
                out += sorted(
                    p
                    for p in path.iterdir()
                    if (p.is_file() and p.name.endswith((".tgz", ".tar.gz")))
                    or (p / "Chart.yaml").is_file()
                )
            else:
                raise ChartNotFound(f"{path}: no such chart directory or archive")
        return out

    def _load(self, path: Path) -> Chart:
        if path.is_file():
            data = path.read_bytes()
            files = unpack_chart_archive(data, source=str(path))
            return parse_chart_files(files, digest=_sha256(data), source=str(path))
        files = _dir_files(path)
        return parse_chart_files(files, digest=_digest_files(files), source=str(path))

    def _all(self) -> dict[tuple[str, str], Chart]:
        if self._charts is None:
            charts: dict[tuple[str, str], Chart] = {}
            for path in self._candidates():
                chart = self._load(path)
                # A directory wins over an archive of the same version (it is what you edit).
                if path.is_dir() or (chart.name, chart.version) not in charts:
                    charts[(chart.name, chart.version)] = chart
            self._charts = charts
        return self._charts

    def index(self, repo_url: str, name: str = "") -> ChartIndex:
        by_name: dict[str, list[ChartVersion]] = {}
        for (name, version), chart in self._all().items():
            by_name.setdefault(name, []).append(
                ChartVersion(
                    name=name,
                    version=version,
                    app_version=chart.app_version,
                    digest=chart.digest,
                    created="",
                    urls=(),
                    annotations=chart.annotations,
                )
            )
        return ChartIndex(
            {
                n: tuple(sorted(v, key=lambda e: semver_key(e.version), reverse=True))
                for n, v in by_name.items()
            }
        )

    def _path_of(self, name: str, version: str) -> Path:
        """The path ``chart`` reads the version from (a directory wins over an archive)."""
        found: Path | None = None
        for path in self._candidates():
            chart = self._load(path)
            wanted = (chart.name, chart.version) == (name, version.removeprefix("v"))
            if wanted and (path.is_dir() or found is None):
                found = path
        if found is None:
            self.chart("", name, version)  # raises ChartNotFound, naming what there is
            raise ChartNotFound(f"chart {name} {version} not found")
        return found

    def fetch(self, repo_url: str, name: str, version: str) -> ChartArchive:
        """The local archive (or directory) of the version, read again from disk."""
        self._charts = None  # a file replaced on disk is seen
        path = self._path_of(name, version)
        chart = self._load(path)
        return ChartArchive(path, f"sha256:{chart.digest}", str(path))

    def provenance(self, repo_url: str, name: str, version: str) -> bytes | None:
        """``<archive>.prov`` beside the local archive; None for a chart directory."""
        path = self._path_of(name, version)
        signed = path.with_name(path.name + ".prov")
        return signed.read_bytes() if path.is_file() and signed.is_file() else None

    def kept(self, repo_url: str, name: str, version: str, digest: str) -> ChartArchive:
        return fetched_again(self, repo_url, name, version, digest)

    def chart(self, repo_url: str, name: str, version: str) -> Chart:
        found = self._all().get((name, version.removeprefix("v")))
        if found is None:
            have = sorted(v for n, v in self._all() if n == name)
            where = ", ".join(str(p) for p in self._paths)
            raise ChartNotFound(
                f"chart {name} {version} not found in {where}"
                + (f" (have: {', '.join(have)})" if have else "")
            )
        return found
