"""Build a Forge from settings: picks the provider, its API root and its auth header."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import httpx

from gitopsbot.adapters.forge._http import ForgeHttp
from gitopsbot.adapters.forge.gitea import GiteaForge
from gitopsbot.adapters.forge.github import GitHubForge
from gitopsbot.adapters.forge.github_app import GitHubApp, InstallationToken, load_app_key
from gitopsbot.adapters.forge.gitlab import GitLabForge
from gitopsbot.adapters.forge.provider import ForgeProvider
from gitopsbot.core.fleet.model import ForgeSettings
from gitopsbot.errors import ConfigError
from gitopsbot.ports.clock import Clock

GITHUB_HEADERS = {
    "Accept": "application/vnd.github+json",
    "X-GitHub-Api-Version": "2022-11-28",
}
_PROVIDERS: dict[str, type[GitHubForge | GitLabForge]] = {
    "github": GitHubForge,
    "gitlab": GitLabForge,
    "gitea": GiteaForge,
}
DEFAULT_URLS = {
    "github": "https://api.github.com",
    "gitlab": "https://gitlab.com",
    "gitea": "",
}


def api_root(kind: str, url: str) -> str:
    """The REST root for a forge's web or API URL.

    GitHub: https://api.github.com, or ``https://HOST/api/v3`` for Enterprise Server;
    GitLab: ``URL/api/v4``; Gitea/Forgejo: ``URL/api/v1``.
    """
    url = (url or DEFAULT_URLS.get(kind, "")).rstrip("/")
    if not url:
        raise ConfigError(f"forge.url: required for kind {kind!r}")
    if kind == "github":
        if url in ("https://github.com", "http://github.com"):
            return "https://api.github.com"
        if "api.github.com" in url or url.endswith("/api/v3"):
            return url
        return url + "/api/v3"
    suffix = {"gitlab": "/api/v4", "gitea": "/api/v1"}.get(kind)
    if suffix is None:
        raise ConfigError(f"forge.kind: {kind!r} has no API (use github, gitlab or gitea)")
    return url if url.endswith(suffix) else url + suffix


def connect(
    kind: str,
    *,
    url: str,
    repository: str,
    token: str,
    clock: Clock,
    transport: httpx.BaseTransport | None = None,
    max_wait: float = 120.0,
) -> ForgeProvider:
    """A provider for ``kind`` (github, gitlab, gitea) talking to ``url``'s API."""
    root = api_root(kind, url)
    if not token:
        raise ConfigError("forge.token: empty token")
    auth = {
        "github": ("Authorization", f"Bearer {token}"),
        "gitlab": ("PRIVATE-TOKEN", token),
        "gitea": ("Authorization", f"token {token}"),
    }[kind]  # api_root refused any other kind
    http = ForgeHttp(
        provider=kind,
        base_url=root,
        token=token,
        auth_header=auth,
        extra_headers=GITHUB_HEADERS if kind == "github" else None,
        clock=clock,
        transport=transport,
        max_wait=max_wait,
    )
    return _PROVIDERS[kind](http, repository)


def from_settings(settings: ForgeSettings, token: str, *, clock: Clock) -> ForgeProvider:
    """A provider for ``settings`` with the already-resolved ``token``."""
    return connect(
        settings.kind, url=settings.url, repository=settings.repository, token=token, clock=clock
    )


@dataclass(frozen=True, slots=True)
class AppForge:
    """A GitHub provider authenticated as an app's installation. ``tokens`` is the
    installation's token source: Git over HTTPS takes its tokens from it too."""

    provider: ForgeProvider
    tokens: InstallationToken
    close: Callable[[], None]


def connect_github_app(
    *,
    url: str,
    repository: str,
    app_id: int,
    private_key: str,
    clock: Clock,
    installation: int = 0,
    transport: httpx.BaseTransport | None = None,
    max_wait: float = 120.0,
) -> AppForge:
    """A GitHub provider for ``repository`` as app ``app_id`` (its PEM ``private_key``): the
    installation is found (unless given) and its first token minted now, so a wrong key, a
    skewed clock or a missing installation is a ConfigError at start (github_app.py)."""
    root = api_root("github", url)
    if repository.count("/") != 1:
        raise ConfigError(f"forge.repository: must be owner/name, got {repository!r}")
    app = GitHubApp(
        app_id=app_id,
        key=load_app_key(private_key),
        api_root=root,
        clock=clock,
        transport=transport,
    )
    try:
        tokens = app.start(repository, installation)
    except BaseException:
        app.close()
        raise
    http = ForgeHttp(
        provider="github",
        base_url=root,
        token="",
        auth_header=("Authorization", ""),
        extra_headers=GITHUB_HEADERS,
        clock=clock,
        transport=transport,
        max_wait=max_wait,
        tokens=tokens,
    )

    def close() -> None:
        http.close()
        app.close()

    return AppForge(GitHubForge(http, repository), tokens, close)
