"""The fleet repository: its URL, credentials (HTTPS token or SSH key), the local mirror,
and the read-only state view for ``gitopsbot status``.

Part of the composition root (``gitopsbot.app``): the only package that knows concrete
classes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gitopsbot import settings
from gitopsbot.adapters.builtin_policies import (  # re-exported: plan, validate
    builtin_policy_documents as builtin_policy_documents,
)
from gitopsbot.adapters.forge._http import TokenSource
from gitopsbot.adapters.git import GitRepo, GitSettings
from gitopsbot.adapters.git_credentials import (
    Credentials,
    HttpsPassword,
    HttpsToken,
    HttpsTokenSource,
    SshKey,
    redact,
)
from gitopsbot.adapters.metrics_server import MetricsServer as MetricsServer  # re-exported: run
from gitopsbot.adapters.webhooks import WebhookReceiver as WebhookReceiver  # re-exported: run
from gitopsbot.app.forge_access import env_app_tokens
from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.core.fleet.model import BotSettings, Fleet, SecretRef
from gitopsbot.errors import ConfigError
from gitopsbot.fleetrepo import load_fleet
from gitopsbot.ports.repo import Repo


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


def git_credentials(
    url: str, fleet_settings: BotSettings | None = None, *, tokens: TokenSource | None = None
) -> Credentials | None:
    """Credentials for the fleet remote: over SSH the fleet's ``git.sshKey``, else the key file
    in $GITOPSBOT_GIT_SSH_KEY; over HTTPS the token in $GITOPSBOT_GIT_TOKEN, else the GitHub
    App's installation tokens: ``tokens`` (the forge's, once gitopsbot.yaml is read), or for
    the first fetch the app in the environment (``forge_access.env_app_tokens``)."""
    if is_ssh_url(url):
        if fleet_settings is not None and fleet_settings.git.ssh_key is not None:
            return ssh_key_credentials(fleet_settings.git.ssh_key)
        key = settings.environment_value(SSH_KEY_ENV)
        return SshKey(private_key=Path(key).expanduser()) if key else None
    token = settings.environment_value(TOKEN_ENV)
    if token:
        return HttpsToken(token)
    if tokens is None and fleet_settings is None and url.startswith(("https://", "http://")):
        tokens = env_app_tokens(url)
    return HttpsTokenSource(tokens) if tokens is not None else None


def open_repo(url: str, cache: Path, credentials: Credentials | None = None) -> GitRepo:
    """The fleet repository's local mirror, fetched; ``credentials`` default to the
    environment's (see ``git_credentials``)."""
    mirror = cache / "mirrors" / hashlib.sha256(url.encode()).hexdigest()[:16]
    creds = credentials if credentials is not None else git_credentials(url)
    repo = GitRepo(GitSettings(url=url, mirror_dir=mirror, credentials=creds))
    repo.fetch()
    return repo


def token_mirror(
    url: str,
    mirror_dir: Path,
    tokens: TokenSource,
    *,
    author_name: str = "gitopsbot",
    author_email: str = "gitopsbot@localhost",
) -> GitRepo:
    """A mirror of ``url`` over HTTPS with a GitHub App's installation tokens
    (``x-access-token``), refreshed as the forge client's are; not fetched yet."""
    return GitRepo(
        GitSettings(
            url=url,
            mirror_dir=mirror_dir,
            credentials=HttpsTokenSource(tokens),
            author_name=author_name,
            author_email=author_email,
        )
    )


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


# ``gitopsbot status --fleet CLONE`` reads what a person's clone has, with no network: its local
# branches, and its remote-tracking refs (origin/*, as of its last ``git fetch``), which reach
# the status mirror under ``CLONE_ORIGIN`` (``clone-origin/gitopsbot/state`` is the clone's
# ``origin/gitopsbot/state``). A mirror of its own: the bot's mirrors never see these refs.
CLONE_ORIGIN = "clone-origin/"
CLONE_REFSPEC = f"+refs/remotes/origin/*:refs/remotes/origin/{CLONE_ORIGIN}*"


@dataclass(frozen=True, slots=True)
class StateView:
    """What ``gitopsbot status`` reads: the state branch (read-only, no push), the fleet's
    settings, and ``source``, one line saying which ref of which repository that is."""

    store: JournalStore
    settings: BotSettings
    source: str
    # The fleet at the watched branch (None: it does not load) and the repository it and the
    # state branch are read from: ``status`` groups clusters by wave with them.
    fleet: Fleet | None = None
    repo: Repo | None = None


def _clone_branch(repo: GitRepo, branch: str, *, newer: bool) -> str | None:
    """The name to read ``branch`` of a clone by in its status mirror: the clone's local branch,
    else its ``origin/<branch>``; with ``newer``, also ``origin/<branch>`` when the local branch
    is behind it. None when the clone has neither."""
    local, tracking = repo.head(branch), repo.head(CLONE_ORIGIN + branch)
    if local is None:
        return None if tracking is None else CLONE_ORIGIN + branch
    if newer and tracking not in (None, local) and repo.is_ancestor(local, str(tracking)):
        return CLONE_ORIGIN + branch
    return branch


def _read_fleet(repo: GitRepo, branch: str | None) -> Fleet | None:
    if branch is not None:
        try:
            return read_fleet(repo, branch)
        except ConfigError:
            pass
    return None


def open_state(url: str, cache: Path | None = None, *, clone: Path | None = None) -> StateView:
    """A read-only view of the state branch (no push) for ``gitopsbot status``.

    ``url`` is fetched now. With ``clone`` (``url`` is its file:// URL), the state branch is
    the clone's local branch when it has one, else its ``origin/<state branch>``; the fleet's
    settings (which name the state branch) come from its ``main``, or ``origin/main`` when that
    is missing or newer."""
    if clone is None:
        repo = open_repo(url, cache or settings.cache_dir())
        fleet = _read_fleet(repo, "main")
        fleet_settings = fleet.settings if fleet is not None else BotSettings()
        branch = fleet_settings.state_branch
        where = redact(url)
        if repo.head(branch) is None:
            source = f"no {branch} on {where} (fetched now): the bot has recorded nothing yet"
        else:
            source = f"{branch} of {where} (fetched now)"
        store = JournalStore(repo, branch=branch, push=False)
        return StateView(store, fleet_settings, f"state: {source}", fleet, repo)
    key = hashlib.sha256(f"{url} {CLONE_REFSPEC}".encode()).hexdigest()[:16]
    repo = GitRepo(
        GitSettings(
            url=url,
            mirror_dir=(cache or settings.cache_dir()) / "mirrors" / key,
            extra_fetch_refspecs=(CLONE_REFSPEC,),
        )
    )
    repo.fetch()
    fleet = _read_fleet(repo, _clone_branch(repo, "main", newer=True))
    fleet_settings = fleet.settings if fleet is not None else BotSettings()
    state = fleet_settings.state_branch
    read = _clone_branch(repo, state, newer=False)
    if read is None:
        source = (
            f"no {state} in {clone}: looked for the local branch {state} and origin/{state} "
            "(none: has the bot run yet? run git fetch there)"
        )
        read = state
    elif read == state:
        source = f"{state} from the local branch {state} in {clone}"
        tracking = repo.head(CLONE_ORIGIN + state)
        if tracking not in (None, repo.head(state)):
            source += f" (origin/{state} differs: the local branch wins)"
    else:
        source = f"{state} from origin/{state} in {clone} (as of your last git fetch)"
    store = JournalStore(repo, branch=read, push=False)
    return StateView(store, fleet_settings, f"state: {source}", fleet, repo)
