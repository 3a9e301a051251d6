"""The fleet repository: its URL, credentials (HTTPS token or SSH key), the local mirror,
and the read-only state view for ``gitopsbot status``.

Part of the composition root (``gitopsbot.app``): the only package that knows concrete
classes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

from gitopsbot import settings
from gitopsbot.adapters.builtin_policies import (  # re-exported: plan, validate
    builtin_policy_documents as builtin_policy_documents,
)
from gitopsbot.adapters.git import (
    Credentials,
    GitRepo,
    GitSettings,
    HttpsPassword,
    HttpsToken,
    SshKey,
)
from gitopsbot.adapters.metrics_server import MetricsServer as MetricsServer  # re-exported: run
from gitopsbot.adapters.webhooks import WebhookReceiver as WebhookReceiver  # re-exported: run
from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.core.model import BotSettings, Fleet, SecretRef
from gitopsbot.errors import ConfigError
from gitopsbot.fleetrepo import load_fleet


def fleet_url(*, url: str | None, path: str | None) -> str:
    if url:
        return url
    if path:
        resolved = Path(path).resolve()
        if not (resolved / ".git").exists() and not (resolved / "HEAD").exists():
            raise ConfigError(f"--fleet {path}: not a Git repository (the bot reads commits)")
        return resolved.as_uri()
    raise ConfigError("give --fleet-url URL or --fleet PATH")


# Environment fallbacks: an HTTPS token, and (for the first fetch over SSH, before
# gitopsbot.yaml's ``git.sshKey`` can be read) the path of an SSH private key file.
TOKEN_ENV = "GITOPSBOT_GIT_TOKEN"


SSH_KEY_ENV = "GITOPSBOT_GIT_SSH_KEY"


def is_ssh_url(url: str) -> bool:
    """``ssh://…`` or scp-like ``[user@]host:path`` (no scheme), as git reads a URL."""
    if url.startswith(("ssh://", "git+ssh://", "ssh+git://")):
        return True
    host, colon, _ = url.partition(":")
    return "://" not in url and bool(colon) and len(host) > 1 and "/" not in host


def ssh_key_credentials(
    ref: SecretRef, *, environment: Callable[[str], str | None] = settings.environment_value
) -> SshKey:
    """``git.sshKey`` → SshKey. The ref locates the private key file (``file``: its path;
    ``env``: a variable holding the path); the key is read by libgit2, never by the bot."""
    label = ref.values_path or "git.sshKey"  # "gitopsbot.yaml:LINE: git.sshKey" when loaded
    if ref.source == "file":
        raw = ref.name
    elif ref.source == "env":
        raw = environment(ref.name) or ""
        if not raw:
            raise ConfigError(
                f"{label}: environment variable {ref.name} is not set "
                "(it should hold the path of the SSH private key file)"
            )
    else:
        raise ConfigError(f"{label}: give file: PATH or env: VAR (the key is a file)")
    path = Path(raw).expanduser()
    if not path.is_file():
        raise ConfigError(f"{label}: no SSH private key file at {path}")
    return SshKey(private_key=path)


def git_credentials(url: str, fleet_settings: BotSettings | None = None) -> Credentials | None:
    """Credentials for the fleet remote: over SSH the fleet's ``git.sshKey``, else the key file
    in $GITOPSBOT_GIT_SSH_KEY; over HTTPS the token in $GITOPSBOT_GIT_TOKEN."""
    if is_ssh_url(url):
        if fleet_settings is not None and fleet_settings.git.ssh_key is not None:
            return ssh_key_credentials(fleet_settings.git.ssh_key)
        key = settings.environment_value(SSH_KEY_ENV)
        return SshKey(private_key=Path(key).expanduser()) if key else None
    token = settings.environment_value(TOKEN_ENV)
    return HttpsToken(token) if token else None


def open_repo(url: str, cache: Path, credentials: Credentials | None = None) -> GitRepo:
    """The fleet repository's local mirror, fetched; ``credentials`` default to the
    environment's (see ``git_credentials``)."""
    mirror = cache / "mirrors" / hashlib.sha256(url.encode()).hexdigest()[:16]
    creds = credentials if credentials is not None else git_credentials(url)
    repo = GitRepo(GitSettings(url=url, mirror_dir=mirror, credentials=creds))
    repo.fetch()
    return repo


def password_mirror(
    url: str,
    mirror_dir: Path,
    *,
    username: str,
    password: str,
    author_name: str = "gitopsbot",
    author_email: str = "gitopsbot@localhost",
) -> GitRepo:
    """A mirror of ``url`` over HTTPS basic auth (a Git server with accounts, such as the
    sandbox's remote), not fetched yet."""
    return GitRepo(
        GitSettings(
            url=url,
            mirror_dir=mirror_dir,
            credentials=HttpsPassword(username, password),
            author_name=author_name,
            author_email=author_email,
        )
    )


def read_fleet(repo: GitRepo, branch: str) -> Fleet:
    head = repo.head(branch)
    if head is None:
        raise ConfigError(f"branch {branch!r} not found in the fleet repository")
    return load_fleet(repo.tree(head))


def open_state(url: str, cache: Path | None = None) -> tuple[JournalStore, BotSettings]:
    """A read-only view of the state branch (no push) for ``gitopsbot status``."""
    repo = open_repo(url, cache or settings.cache_dir())
    fleet_settings = BotSettings()
    try:
        fleet_settings = read_fleet(repo, "main").settings
    except ConfigError:
        pass
    return JournalStore(repo, branch=fleet_settings.state_branch, push=False), fleet_settings
