"""The fleet side of ``gitopsbot sandbox up``: a Git remote over smart HTTP holding a fleet
repository, and a local GitHub-compatible forge for it.

Both listen on loopback with credentials generated per start (sandbox-only: printed by ``up``
and kept in the state file, never used anywhere else). ``up`` gives the Git service the files
of a fleet made for this very sandbox (``story_fleet``: its chart repository, kube context,
pools, forge), so ``gitopsbot run`` works against it as is; since those URLs change with every
start, such a repository is made anew on each start. Without files, the repository is made
from ``examples/fleet`` once and kept under the state directory (``--fresh`` starts it over).
"""

from __future__ import annotations

import secrets
import shutil
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gitopsbot.sandbox.forges.github import GitHubForge
from gitopsbot.sandbox.gitremote import GitRemote, create_fleet_repo

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_FLEET = ROOT / "examples" / "fleet"
FLEET_REPO = "fleet"
# The forge's repository: examples/fleet/gitopsbot.yaml names it, and so does the fleet `up` makes.
OWNER, REPO = "example-org", "gpu-fleet"
# The user name `gitopsbot run` sends with $GITOPSBOT_GIT_TOKEN (adapters.git.HttpsToken), so
# the bot reaches the remote with the generated password as its token.
GIT_USER = "x-access-token"


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


# The forge service of each set of credentials, so the Git service started with the same
# ones can hand it the repository (weak: a stopped sandbox's forge is not kept alive).
_FORGES: weakref.WeakValueDictionary[FleetCredentials, FleetForgeService] = (
    weakref.WeakValueDictionary()
)


class FleetGitService:
    """The Git remote; ``url`` is the fleet repository's clone URL once started."""

    def __init__(
        self,
        root: Path,
        credentials: FleetCredentials,
        *,
        source: Path = EXAMPLE_FLEET,
        files: Mapping[str, str] | None = None,
    ) -> None:
        self.root = root
        self.source = source
        self.files = files
        self.remote = GitRemote(
            root, username=credentials.git_username, password=credentials.git_password
        )
        self.credentials = credentials
        self.url = ""

    def start(self) -> FleetGitService:
        self.remote.start()
        try:
            bare = self.root / f"{FLEET_REPO}.git"
            if self.files is not None:
                shutil.rmtree(bare, ignore_errors=True)  # it names the last start's URLs
                create_fleet_repo(self.root, FLEET_REPO, self._write_source(self.files))
            elif not bare.exists():
                create_fleet_repo(self.root, FLEET_REPO, self.source)
        except BaseException:
            self.remote.stop()
            raise
        self.url = self.remote.repo_url(FLEET_REPO)
        forge = _FORGES.get(self.credentials)
        if forge is not None:
            forge.follow(self.remote, bare)
        return self

    def _write_source(self, files: Mapping[str, str]) -> Path:
        source = self.root.parent / "fleet-source"
        shutil.rmtree(source, ignore_errors=True)
        for path, text in files.items():
            target = source / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        return source

    def stop(self) -> None:
        self.remote.stop()


class FleetForgeService:
    """The local GitHub API for ``example-org/gpu-fleet``; ``url`` is its API root."""

    def __init__(self, credentials: FleetCredentials) -> None:
        self.forge = GitHubForge(token=credentials.forge_token, owner=OWNER, repo=REPO)
        self.url = ""
        _FORGES[credentials] = self

    def follow(self, remote: GitRemote, bare: Path) -> None:
        """Track the fleet repository ``bare``, served by ``remote``."""
        self.forge.attach_repo(bare)
        remote.on_push.append(lambda name: self.forge.pushed() if name == bare.name else None)

    def start(self) -> FleetForgeService:
        self.forge.start()
        self.url = self.forge.api_url
        return self

    def stop(self) -> None:
        self.forge.stop()
