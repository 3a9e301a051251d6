"""OCI registries as chart repositories: logins, what helm is told, and the registry's own API
for what helm has no command for (a chart's tags, a tag's manifest digest).

- ``RegistryLogins``: the resolved ``chartRegistries`` of gitopsbot.yaml, by host. helm gets
  a login as a registry config (``--registry-config``, Docker's ``config.json`` form) written
  0600 into the helm child's own work directory, removed when the child ends (and, after a
  crash, by the next ``HelmCli``): never argv, never helm's shared config, never a file that
  outlives the process. ``plainHttp`` becomes ``--plain-http`` (helm 3.13+ and helm 4).
- ``RegistryApi``: the OCI distribution API over httpx: ``GET /v2/<repo>/tags/list`` (Link
  pages followed) and ``HEAD /v2/<repo>/manifests/<tag>`` (its ``Docker-Content-Digest``).
  Basic auth is sent with the login; a ``Bearer`` challenge (GHCR, Harbor, ECR...) is
  answered at its realm with the same login. A 401/403 is ``ChartUnauthorized``: one line
  naming the repository and the gitopsbot.yaml entry to fix.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from gitopsbot.errors import ChartNotFound, ChartUnauthorized, ChartUnavailable

# helm's chart manifest and config media types; an index of any OCI manifest is accepted too.
MANIFEST_TYPES = ", ".join(
    (
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.oci.image.index.v1+json",
    )
)
MAX_TAG_PAGES = 100
HELM_CONFIG = "application/vnd.cncf.helm.config.v1+json"
MAX_CONFIG_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class RegistryLogin:
    """How to reach one registry host: its login (empty: anonymous) and whether it speaks
    plain HTTP. ``where`` names its gitopsbot.yaml entry, for messages."""

    host: str
    username: str = ""
    password: str = field(default="", repr=False)
    plain_http: bool = False
    where: str = ""


@dataclass(frozen=True, slots=True)
class OciRef:
    """``oci://host[:port]/path`` split: the registry host and the repository path under it."""

    host: str
    path: str

    @classmethod
    def parse(cls, repo_url: str) -> OciRef:
        rest = repo_url.removeprefix("oci://").strip("/")
        host, _, path = rest.partition("/")
        return cls(host=host, path=path)

    def repository(self, chart: str) -> str:
        """The registry repository of ``chart`` (helm pushes ``<path>/<chart name>``)."""
        return f"{self.path}/{chart}" if self.path else chart


def is_oci(repo_url: str) -> bool:
    return repo_url.startswith("oci://")


def oci_chart(repo_url: str, chart: str) -> str:
    """The reference helm pulls and upgrades from: ``oci://host/path/<chart>``."""
    return f"{repo_url.rstrip('/')}/{chart}"


def oci_tag(version: str) -> str:
    """The tag of a chart version: OCI tags have no ``+``, helm writes ``_`` (helm push)."""
    return version.replace("+", "_")


class RegistryLogins:
    """The logins of gitopsbot.yaml's ``chartRegistries``, by host."""

    def __init__(self, logins: Iterable[RegistryLogin] = ()) -> None:
        self._by_host = {login.host.lower(): login for login in logins}

    def for_url(self, repo_url: str) -> RegistryLogin:
        host = OciRef.parse(repo_url).host
        return self._by_host.get(host.lower(), RegistryLogin(host=host))

    def secrets(self) -> list[str]:
        """The passwords, for masking."""
        return [login.password for login in self._by_host.values() if login.password]


def registry_config(login: RegistryLogin) -> str:
    """helm's registry config (Docker's ``config.json``) holding ``login`` only."""
    auths = {}
    if login.username:
        pair = f"{login.username}:{login.password}".encode()
        auths[login.host] = {"auth": base64.b64encode(pair).decode()}
    return json.dumps({"auths": auths})


def helm_registry_flags(login: RegistryLogin, work: Path) -> list[str]:
    """helm's flags for a chart in ``login``'s registry, its config written 0600 in ``work``
    (the child's own directory, removed with it). Always a config of its own: helm reads
    no login the bot was not given, and writes none anywhere else."""
    path = work / "registry-config.json"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(registry_config(login))
    return ["--registry-config", str(path), *(["--plain-http"] if login.plain_http else [])]


def unauthorized(repo_url: str, login: RegistryLogin, status: int) -> ChartUnauthorized:
    """The one line a refused login gets: which repository, which login, what to fix."""
    who = f"the login of user '{login.username}'" if login.username else "an anonymous pull"
    entry = login.where or f"a chartRegistries entry for host {login.host}"
    fix = (
        f"check {entry} in gitopsbot.yaml: its username, and the password its secret "
        "reference holds"
        if login.username
        else f"add a chartRegistries entry for host {login.host} to gitopsbot.yaml "
        "(username and password)"
    )
    return ChartUnauthorized(
        f"{repo_url}: the registry refused {who} (HTTP {status}); {fix}, "
        "and restart the bot after changing the secret"
    )


class RegistryApi:
    """The parts of the OCI distribution API helm has no command for."""

    def __init__(self, logins: RegistryLogins, client: httpx.Client | None = None) -> None:
        self._logins = logins
        self._client = client or httpx.Client(timeout=30.0, follow_redirects=True)
        self._tokens: dict[tuple[str, str], str] = {}  # (host, scope) -> bearer token

    def close(self) -> None:
        self._client.close()

    def login_for(self, repo_url: str) -> RegistryLogin:
        return self._logins.for_url(repo_url)

    def tags(self, repo_url: str, chart: str) -> list[str]:
        """Every tag of ``chart`` in the repository (``[]`` when it has none)."""
        ref = OciRef.parse(repo_url)
        url: str | None = f"/v2/{ref.repository(chart)}/tags/list"
        tags: list[str] = []
        for _ in range(MAX_TAG_PAGES):
            if url is None:
                break
            response = self._get(repo_url, chart, url, method="GET")
            if response.status_code == 404:
                return tags  # no such repository: a chart with no versions
            body = response.json() if response.content else {}
            tags += [t for t in (body.get("tags") or []) if isinstance(t, str)]
            url = _next_page(response)
        return tags

    def chart_config(self, repo_url: str, chart: str, tag: str) -> dict[str, Any]:
        """The chart's metadata as helm pushed it: the manifest's config blob, Chart.yaml as
        JSON (``appVersion``, ``annotations``...); ``{}`` when it is not a Helm chart's."""
        repository = OciRef.parse(repo_url).repository(chart)
        manifest = self._get(repo_url, chart, f"/v2/{repository}/manifests/{tag}", method="GET")
        if manifest.status_code == 404:
            return {}
        config = (manifest.json() or {}).get("config") or {}
        if config.get("mediaType") != HELM_CONFIG or not config.get("digest"):
            return {}
        path = f"/v2/{repository}/blobs/{config['digest']}"
        blob = self._get(repo_url, chart, path, method="GET")
        if blob.status_code == 404 or len(blob.content) > MAX_CONFIG_BYTES:
            return {}
        body = blob.json()
        return body if isinstance(body, dict) else {}

    def manifest_digest(self, repo_url: str, chart: str, version: str) -> str:
        """The digest of the manifest ``chart:version`` points at now (what ``helm push``
        and ``helm pull`` print as ``Digest:``). ChartNotFound when the tag is absent."""
        ref = OciRef.parse(repo_url)
        path = f"/v2/{ref.repository(chart)}/manifests/{oci_tag(version)}"
        response = self._get(repo_url, chart, path, method="HEAD")
        if response.status_code == 404:
            raise ChartNotFound(f"chart {chart} {version} is not in {repo_url}")
        digest = str(response.headers.get("docker-content-digest", ""))
        if not digest:  # a registry that omits it on HEAD: the manifest itself
            response = self._get(repo_url, chart, path, method="GET")
            digest = "sha256:" + _sha256(response.content)
        return digest

    def _get(self, repo_url: str, chart: str, path: str, *, method: str) -> httpx.Response:
        login = self._logins.for_url(repo_url)
        ref = OciRef.parse(repo_url)
        scheme = "http" if login.plain_http else "https"
        url = path if path.startswith("http") else f"{scheme}://{ref.host}{path}"
        scope = f"repository:{ref.repository(chart)}:pull"
        response = self._send(method, url, self._auth(login, scope))
        if response.status_code == 401:
            challenge = response.headers.get("www-authenticate", "")
            if challenge.lower().startswith("bearer"):
                token = self._bearer(repo_url, login, challenge, scope)
                response = self._send(method, url, {"Authorization": f"Bearer {token}"})
        if response.status_code in (401, 403):
            raise unauthorized(repo_url, login, response.status_code)
        if response.status_code == 429 or response.status_code >= 500:
            raise ChartUnavailable(f"{repo_url}: HTTP {response.status_code} from the registry")
        if response.status_code >= 400 and response.status_code != 404:
            raise ChartNotFound(f"{repo_url}: HTTP {response.status_code} from the registry")
        return response

    def _auth(self, login: RegistryLogin, scope: str) -> dict[str, str]:
        token = self._tokens.get((login.host, scope))
        if token:
            return {"Authorization": f"Bearer {token}"}
        if login.username:
            pair = f"{login.username}:{login.password}".encode()
            return {"Authorization": "Basic " + base64.b64encode(pair).decode()}
        return {}

    def _send(self, method: str, url: str, headers: dict[str, str]) -> httpx.Response:
        shown = url.split("?")[0]
        try:
            return self._client.request(method, url, headers={"Accept": MANIFEST_TYPES, **headers})
        except httpx.TimeoutException:
            raise ChartUnavailable(f"{shown}: timed out") from None
        except httpx.HTTPError as exc:
            raise ChartUnavailable(f"{shown}: {type(exc).__name__}") from None

    def _bearer(self, repo_url: str, login: RegistryLogin, challenge: str, scope: str) -> str:
        """A token from the challenge's realm (Docker's token protocol), with the login."""
        params = _challenge_params(challenge)
        realm = params.pop("realm", "")
        if not realm:
            raise unauthorized(repo_url, login, 401)
        query = {"service": params.get("service", ""), "scope": params.get("scope", scope)}
        headers = self._auth(RegistryLogin(login.host, login.username, login.password), "")
        response = self._send("GET", str(httpx.URL(realm, params=query)), headers)
        if response.status_code in (401, 403):
            raise unauthorized(repo_url, login, response.status_code)
        if response.status_code >= 400:
            raise ChartUnavailable(f"{repo_url}: token service answered {response.status_code}")
        body = response.json()
        token = str(body.get("token") or body.get("access_token") or "")
        if not token:
            raise ChartUnavailable(f"{repo_url}: the token service gave no token")
        self._tokens[(login.host, scope)] = token
        return token


def _challenge_params(challenge: str) -> dict[str, str]:
    """``Bearer realm="…",service="…",scope="…"`` → its parameters (a scope may hold
    commas: ``pull,push``)."""
    return {k.lower(): v for k, v in re.findall(r'(\w+)="([^"]*)"', challenge)}


def _next_page(response: httpx.Response) -> str | None:
    link = response.headers.get("link", "")
    if 'rel="next"' not in link:
        return None
    target = link.split(";")[0].strip().strip("<>")
    return str(response.url.join(target))


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
