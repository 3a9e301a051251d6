"""The forge client from gitopsbot.yaml's ``forge:``: a token, or a GitHub App whose
installation tokens the Git transport shares (docs/forges.md, GitHub App).

Part of the composition root (``gitopsbot.app``). The app's private key is resolved into
memory (never written anywhere) and masked in log lines like every resolved secret.

Before gitopsbot.yaml is read, the first fetch of an HTTPS fleet URL can authenticate as the
app too: ``GITOPSBOT_GITHUB_APP_ID`` and ``GITOPSBOT_GITHUB_APP_KEY`` (the PEM text, as the
chart puts it from a Secret), the API root from ``GITOPSBOT_GITHUB_API_URL`` or the fleet
URL's host, the repository from ``GITOPSBOT_GITHUB_REPOSITORY`` or the fleet URL's path.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from gitopsbot import settings
from gitopsbot.adapters.clock import SystemClock
from gitopsbot.adapters.forge._http import ForgeCall, TokenSource
from gitopsbot.adapters.forge.connect import connect_github_app, from_settings
from gitopsbot.adapters.redaction import KNOWN
from gitopsbot.adapters.secrets import SecretResolver
from gitopsbot.core.fleet.model import BotSettings
from gitopsbot.errors import ConfigError
from gitopsbot.ports.clock import Clock
from gitopsbot.ports.forge import Forge

APP_ID_ENV = "GITOPSBOT_GITHUB_APP_ID"
APP_KEY_ENV = "GITOPSBOT_GITHUB_APP_KEY"
API_URL_ENV = "GITOPSBOT_GITHUB_API_URL"
REPOSITORY_ENV = "GITOPSBOT_GITHUB_REPOSITORY"


@dataclass(frozen=True, slots=True)
class ForgeAccess:
    """The forge (None: Git-only), and with a GitHub App the installation's token source,
    for Git over HTTPS (``x-access-token``)."""

    forge: Forge | None
    tokens: TokenSource | None = None
    close: Callable[[], None] | None = None


def connect_forge(
    fleet_settings: BotSettings,
    clock: Clock,
    observe: Callable[[ForgeCall], None] | None = None,
) -> ForgeAccess:
    """The forge named in gitopsbot.yaml (none for git-only, or without credentials)."""
    forge = fleet_settings.forge
    if forge.kind == "git-only":
        return ForgeAccess(None)
    if forge.app is not None:
        key = SecretResolver().resolve(forge.app.private_key)
        connected = connect_github_app(
            url=forge.url,
            repository=forge.repository,
            app_id=forge.app.app_id,
            private_key=key,
            installation=forge.app.installation_id,
            clock=clock,
        )
        connected.provider.http.observe = observe  # every request, for the metrics
        return ForgeAccess(connected.provider, connected.tokens, connected.close)
    if forge.token is None:
        return ForgeAccess(None)
    provider = from_settings(forge, SecretResolver().resolve(forge.token), clock=clock)
    provider.http.observe = observe
    return ForgeAccess(provider, close=provider.http.close)


def github_app_client(
    *,
    url: str,
    repository: str,
    app_id: int,
    private_key: str,
    installation: int = 0,
    closers: list[Callable[[], None]] | None = None,
) -> ForgeAccess:
    """A GitHub provider authenticated as app ``app_id`` (the sandbox's stories)."""
    KNOWN.add(private_key)
    connected = connect_github_app(
        url=url,
        repository=repository,
        app_id=app_id,
        private_key=private_key,
        installation=installation,
        clock=SystemClock(),
    )
    if closers is not None:
        closers.append(connected.close)
    return ForgeAccess(connected.provider, connected.tokens, connected.close)


def env_app_tokens(
    fleet_url: str, environment: Callable[[str], str | None] = settings.environment_value
) -> TokenSource | None:
    """The first fetch's token source as the app in the environment (module docstring), or
    None when ``GITOPSBOT_GITHUB_APP_ID`` is not set."""
    app_id = (environment(APP_ID_ENV) or "").strip()
    if not app_id:
        return None
    if not app_id.isdigit():
        raise ConfigError(f"{APP_ID_ENV}: the App ID is a number, got {app_id!r}")
    key = environment(APP_KEY_ENV) or ""
    if not key:
        raise ConfigError(
            f"{APP_KEY_ENV}: not set (the app's private key, PEM) but {APP_ID_ENV} is"
        )
    KNOWN.add(key)
    parts = urlsplit(fleet_url)
    # connect.api_root: github.com → api.github.com, another host → its /api/v3 (GHES).
    api = environment(API_URL_ENV) or f"{parts.scheme}://{parts.netloc}"
    path = parts.path.strip("/").removesuffix(".git")
    repository = environment(REPOSITORY_ENV) or path
    connected = connect_github_app(
        url=api,
        repository=repository,
        app_id=int(app_id),
        private_key=key,
        clock=SystemClock(),
    )
    connected.provider.http.close()  # only its tokens serve Git
    return connected.tokens
