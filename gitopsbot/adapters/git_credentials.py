"""How the bot logs in to the fleet remote: the credential kinds, and messages without them.

A token, a password or a key's passphrase never reaches a log line or an exception:
``redact`` masks URL user info and the secrets given; each kind's ``repr`` hides its secret.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from gitopsbot.adapters.redaction import redact_secrets

_USERINFO = re.compile(r"(?<=://)[^/@\s]+@")


@dataclass(frozen=True, slots=True)
class HttpsToken:
    """HTTPS basic auth with an access token (GitHub: ``x-access-token``; GitLab: ``oauth2``)."""

    token: str
    username: str = "x-access-token"

    def __repr__(self) -> str:
        return f"HttpsToken(username={self.username!r}, token=***)"


@dataclass(frozen=True, slots=True)
class HttpsPassword:
    """HTTPS basic auth with a user name and password."""

    username: str
    password: str

    def __repr__(self) -> str:
        return f"HttpsPassword(username={self.username!r}, password=***)"


@dataclass(frozen=True, slots=True)
class SshKey:
    """An SSH key pair on disk; the public key defaults to ``<private>.pub``.

    ``verify_host``: the server's host key must be in ``~/.ssh/known_hosts`` (libgit2 checks
    it there); off only for throwaway sandboxes.
    """

    private_key: Path
    public_key: Path | None = None
    passphrase: str = ""
    username: str = "git"
    verify_host: bool = True

    def __repr__(self) -> str:
        return f"SshKey(private_key={str(self.private_key)!r}, username={self.username!r})"


class TokenSource(Protocol):
    """A token that changes (adapters.forge.github_app.InstallationToken)."""

    def current(self) -> str: ...

    def refused(self, token: str) -> None: ...

    def known(self) -> tuple[str, ...]: ...


@dataclass(frozen=True, slots=True)
class HttpsTokenSource:
    """HTTPS basic auth with a token that expires (a GitHub App's installation token): the
    source's current token at each transfer; when the remote refuses it, the source mints
    anew and the transfer offers the new one once."""

    source: TokenSource
    username: str = "x-access-token"

    def __repr__(self) -> str:
        return f"HttpsTokenSource(username={self.username!r}, token=***)"


Credentials = HttpsToken | HttpsPassword | SshKey | HttpsTokenSource


def redact(text: str, secrets: tuple[str, ...] = ()) -> str:
    """``text`` without URL user info and without any of ``secrets``."""
    return redact_secrets(_USERINFO.sub("***@", text), secrets)
