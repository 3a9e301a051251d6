"""Git over HTTPS with a GitHub App's installation tokens (adapters.git.HttpsTokenSource),
against the smart-HTTP remote: the source's current token is offered; a refused one (it
expired since it was minted) is replaced once, in the same transfer or by running the
transfer again (libgit2 cannot replay a POST that met the 401); a source whose every token is
refused is an auth error that names no token."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gitopsbot.adapters.git import GitRepo, GitSettings
from gitopsbot.adapters.git_credentials import HttpsTokenSource
from gitopsbot.errors import GitAuthError
from gitopsbot.sandbox.gitremote import GitRemote


@dataclass
class Tokens:
    """A token source whose tokens the test marks live or dead."""

    live: set[str] = field(default_factory=set)
    uses: dict[str, int] = field(default_factory=dict)  # requests a token is good for
    minted: list[str] = field(default_factory=list)
    refused_seen: list[str] = field(default_factory=list)
    good: bool = True  # whether newly minted tokens are live

    def _mint(self) -> str:
        token = f"ghs_CANARY_token_{len(self.minted)}"
        self.minted.append(token)
        if self.good:
            self.live.add(token)
        return token

    def accepts(self, token: str) -> bool:
        if token not in self.live:
            return False
        left = self.uses.get(token)
        if left is not None:
            if left <= 1:
                self.live.discard(token)  # this was its last request
            self.uses[token] = left - 1
        return True

    def current(self) -> str:
        return self.minted[-1] if self.minted else self._mint()

    def refused(self, token: str) -> None:
        self.refused_seen.append(token)
        if self.minted and token == self.minted[-1]:
            self._mint()

    def known(self) -> tuple[str, ...]:
        return tuple(self.minted)


@pytest.fixture
def remote(tmp_path: Path, fleet_source: Path) -> Iterator[tuple[GitRemote, Tokens, str]]:
    tokens = Tokens()
    with GitRemote(tmp_path / "remote", username="someone", password="not-the-token") as srv:
        srv.accepts_token = tokens.accepts
        url = srv.create_fleet_repo("fleet", fleet_source)
        yield srv, tokens, url


def _repo(url: str, tmp_path: Path, tokens: Tokens) -> GitRepo:
    return GitRepo(
        GitSettings(
            url=url,
            mirror_dir=tmp_path / "mirror",
            credentials=HttpsTokenSource(tokens),
            author_name="gitopsbot",
            author_email="bot@example.com",
        )
    )


def test_fetch_and_push_with_the_current_token(
    remote: tuple[GitRemote, Tokens, str], tmp_path: Path
) -> None:
    _, tokens, url = remote
    repo = _repo(url, tmp_path, tokens)
    repo.fetch()
    head = repo.head("main")
    assert head is not None
    repo.commit_files("main", {"note.txt": b"x"}, "a note", parent=head)
    repo.push("main")
    assert tokens.minted == ["ghs_CANARY_token_0"] and not tokens.refused_seen


def test_an_expired_token_is_replaced_and_the_transfer_goes_through(
    remote: tuple[GitRemote, Tokens, str], tmp_path: Path
) -> None:
    _, tokens, url = remote
    repo = _repo(url, tmp_path, tokens)
    repo.fetch()
    tokens.live.clear()  # the token expired at the forge; the source does not know yet
    repo.fetch()
    assert tokens.refused_seen == ["ghs_CANARY_token_0"]
    head = repo.head("main")
    assert head is not None
    tokens.live.clear()  # and again before a push
    repo.commit_files("main", {"note.txt": b"x"}, "a note", parent=head)
    repo.push("main")
    assert tokens.refused_seen == ["ghs_CANARY_token_0", "ghs_CANARY_token_1"]


def test_a_token_expiring_between_the_requests_of_one_transfer(
    remote: tuple[GitRemote, Tokens, str], tmp_path: Path
) -> None:
    _, tokens, url = remote
    first = tokens.current()
    tokens.uses[first] = 1  # good for the ref advertisement, expired by the pack request
    repo = _repo(url, tmp_path, tokens)
    repo.fetch()  # libgit2 cannot replay that POST: the whole fetch runs again
    assert repo.head("main") is not None
    assert tokens.refused_seen == [first]


def test_tokens_refused_again_and_again_are_an_auth_error_naming_none(
    remote: tuple[GitRemote, Tokens, str], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    _, tokens, url = remote
    tokens.good = False  # e.g. the app lost access to the repository
    repo = _repo(url, tmp_path, tokens)
    with pytest.raises(GitAuthError) as info:
        repo.fetch()
    assert "refused" in str(info.value)
    assert len(tokens.minted) <= 4  # one retry per request and per transfer: no loop
    shown = str(info.value) + caplog.text
    assert "CANARY" not in shown
