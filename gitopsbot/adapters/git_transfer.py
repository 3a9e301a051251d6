"""A fetch or push through libgit2: the credentials offered, and what its failures mean.

``TransferCallbacks`` offers the configured credentials once per transfer (a second request
means they were refused), checks the remote's identity and keeps the remote's own words;
``transfer_error`` reads a failure's text into the GitError the caller raises.
"""

from __future__ import annotations

import logging

import pygit2
from pygit2.enums import CredentialType

from gitopsbot.adapters import interrupts
from gitopsbot.adapters.git_credentials import (
    Credentials,
    HttpsToken,
    HttpsTokenSource,
    SshKey,
    redact,
)
from gitopsbot.errors import (
    GitAuthError,
    GitError,
    GitFailed,
    GitUnavailable,
    NonFastForward,
    PushRefused,
)

log = logging.getLogger(__name__)


class TransferCallbacks(pygit2.RemoteCallbacks):
    """Credentials offered once per operation: a second request means they were refused.

    Every callback first asks ``interrupts.check_transfer``: after a Ctrl-C that aborts, the
    transfer stops at its next callback, through pygit2's own error channel (see
    adapters/interrupts.py for why a signal must not raise in here by itself).
    ``said``: the remote's sideband text (a refused push's reason)."""

    def __init__(self, credentials: Credentials | None, where: str) -> None:
        super().__init__()
        self._credentials = credentials
        self._where = where
        self.asked = 0
        self.offered = ""  # the token from a HttpsTokenSource last offered
        self.rejected: list[tuple[str, str]] = []
        self.said: list[str] = []

    def sideband_progress(self, string: str) -> None:
        interrupts.check_transfer()
        self.said.append(string)

    def transfer_progress(self, stats: pygit2.remotes.TransferProgress) -> None:
        interrupts.check_transfer()

    def push_transfer_progress(
        self, objects_pushed: int, total_objects: int, bytes_pushed: int
    ) -> None:
        interrupts.check_transfer()

    def update_tips(self, refname: str, old: pygit2.Oid, new: pygit2.Oid) -> None:
        interrupts.check_transfer()

    def credentials(
        self, url: str, username_from_url: str | None, allowed_types: CredentialType
    ) -> pygit2.Username | pygit2.UserPass | pygit2.Keypair:
        interrupts.check_transfer()
        self.asked += 1
        cred = self._credentials
        if cred is None:
            raise GitAuthError(f"{self._where}: the remote asked for credentials; none configured")
        if isinstance(cred, HttpsTokenSource) and self.asked == 2 and self.offered:
            # The token expired (or was revoked) since it was minted: one fresh one.
            cred.source.refused(self.offered)
        elif self.asked > 1:
            # libgit2 would otherwise replay refused credentials up to 15 times.
            raise GitAuthError(f"{self._where}: the remote refused the configured credentials")
        if isinstance(cred, SshKey):
            if not allowed_types & CredentialType.SSH_KEY:
                raise GitAuthError(
                    f"{self._where}: an SSH key is configured; the remote takes none"
                )
            public = cred.public_key or cred.private_key.with_name(cred.private_key.name + ".pub")
            if not cred.private_key.is_file():
                raise GitAuthError(f"{self._where}: SSH private key not found: {cred.private_key}")
            if not public.is_file():
                raise GitAuthError(f"{self._where}: SSH public key not found: {public}")
            user = username_from_url or cred.username
            return pygit2.Keypair(user, str(public), str(cred.private_key), cred.passphrase)
        if not allowed_types & CredentialType.USERPASS_PLAINTEXT:
            raise GitAuthError(
                f"{self._where}: HTTPS credentials configured; the remote wants another kind"
            )
        if isinstance(cred, HttpsToken):
            return pygit2.UserPass(cred.username, cred.token)
        if isinstance(cred, HttpsTokenSource):
            self.offered = cred.source.current()
            return pygit2.UserPass(cred.username, self.offered)
        return pygit2.UserPass(cred.username, cred.password)

    def certificate_check(self, certificate: None, valid: bool, host: bytes) -> bool:
        interrupts.check_transfer()
        # libgit2 says whether the TLS certificate or SSH host key is trusted (for SSH: found
        # in ~/.ssh/known_hosts); pygit2 gives no certificate to check ourselves.
        if valid:
            return True
        name = host.decode(errors="replace")
        cred = self._credentials
        if isinstance(cred, SshKey) and not cred.verify_host:
            log.warning("%s: host key of %s not verified (verify_host off)", self._where, name)
            return True
        raise GitAuthError(
            f"{self._where}: the identity of {name} could not be verified "
            "(TLS certificate, or SSH host key missing from ~/.ssh/known_hosts)"
        )

    def push_update_reference(self, refname: str, message: str | None) -> None:
        if message:
            self.rejected.append((refname, message))


AUTH_HINTS = (
    "status code: 401",
    "status code: 403",
    "authentication",
    "credentials",
    "permission denied",
)
UNAVAILABLE_HINTS = (
    "failed to connect",
    "could not resolve",
    "connection refused",
    "timed out",
    "unexpected http status code: 5",
    "failed to resolve",
    "network",
    "couldn't connect",
)
NON_FF_HINTS = (
    "non-fast-forward",
    "fast-forward",
    "fastforward",  # libgit2: "cannot push non-fastforwardable reference"
    "not present locally",
    "fetch first",
    # git's receive-pack when another push holds the ref's lock or moved it under this one
    # (two writers of the state branch at once): the remote moved, so replay.
    "failed to update ref",
    "cannot lock ref",
)
# A remote refusing by policy (a pre-receive/update hook, GitHub's and GitLab's protected
# branches): permanent. Checked after the auth hints ("permission denied" is a login problem)
# and after the non-fast-forward ones (git's "denying non-fast-forward" is replayable).
REFUSED_HINTS = (
    "hook declined",
    "protected branch",
    "denied",
    "declined",
)
# Sideband text kept from a refused push (the hook's own words), at most this many characters.
REMOTE_TEXT_LIMIT = 1000


def transfer_error(where: str, text: str) -> GitError:
    """The GitError for a failed operation at ``where`` whose (redacted) error is ``text``."""
    low = text.lower()
    if any(h in low for h in AUTH_HINTS):
        return GitAuthError(f"{where}: authentication failed: {text}")
    if any(h in low for h in NON_FF_HINTS):
        return NonFastForward(f"{where}: {text}")
    if any(h in low for h in REFUSED_HINTS):
        return PushRefused(f"{where}: refused by the remote: {text}")
    if any(h in low for h in UNAVAILABLE_HINTS):
        return GitUnavailable(f"{where}: remote unavailable: {text}")
    return GitFailed(f"{where}: {text}")


def with_remote_text(message: str, said: list[str], secrets: tuple[str, ...]) -> str:
    """``message`` plus what the remote printed (redacted, bounded): a hook's reason."""
    lines = [ln.strip() for ln in "".join(said).splitlines()]
    text = redact(" | ".join(ln for ln in lines if ln), secrets)[:REMOTE_TEXT_LIMIT]
    return f"{message} (remote said: {text})" if text else message
