"""The fleet side of ``gitopsbot sandbox up``: a Git remote over smart HTTP holding a fleet
repository made from ``examples/fleet``, and a local GitHub-compatible forge for it.

Both listen on loopback with credentials generated per start (sandbox-only: printed by ``up``
and kept in the state file, never used anywhere else). The fleet repository lives under the
state directory, so a kept state dir keeps its history; ``--fresh`` starts it over.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

from gitopsbot.sandbox.forges.github import GitHubForge
from gitopsbot.sandbox.gitremote import GitRemote, create_fleet_repo

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_FLEET = ROOT / "examples" / "fleet"
FLEET_REPO = "fleet"
# examples/fleet/gitopsbot.yaml names this repository (forge.repository).
OWNER, REPO = "example-org", "gpu-fleet"
GIT_USER = "gitopsbot"


@dataclass(frozen=True, slots=True)
class FleetCredentials:
    """Sandbox-only secrets: basic auth for the Git remote, a token for the forge API."""

    git_username: str
    git_password: str
    forge_token: str

    @classmethod
    def generate(cls) -> FleetCredentials:
        return cls(GIT_USER, secrets.token_hex(12), "sbx_" + secrets.token_hex(16))

    def __repr__(self) -> str:
        return f"FleetCredentials(git_username={self.git_username!r}, ***)"


class FleetGitService:
    """The Git remote; ``url`` is the fleet repository's clone URL once started."""

    def __init__(
        self, root: Path, credentials: FleetCredentials, *, source: Path = EXAMPLE_FLEET
    ) -> None:
        self.root = root
        self.source = source
        self.remote = GitRemote(
            root, username=credentials.git_username, password=credentials.git_password
        )
        self.url = ""

    def start(self) -> FleetGitService:
        self.remote.start()
        try:
            if not (self.root / f"{FLEET_REPO}.git").exists():
                create_fleet_repo(self.root, FLEET_REPO, self.source)
        except BaseException:
            self.remote.stop()
            raise
        self.url = self.remote.repo_url(FLEET_REPO)
        return self

    def stop(self) -> None:
        self.remote.stop()


class FleetForgeService:
    """The local GitHub API for ``example-org/gpu-fleet``; ``url`` is its API root."""

    def __init__(self, credentials: FleetCredentials) -> None:
        self.forge = GitHubForge(token=credentials.forge_token, owner=OWNER, repo=REPO)
        self.url = ""

    def start(self) -> FleetForgeService:
        self.forge.start()
        self.url = self.forge.api_url
        return self

    def stop(self) -> None:
        self.forge.stop()
