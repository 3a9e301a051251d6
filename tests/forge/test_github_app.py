"""GitHub App authentication (adapters/forge/github_app.py) against the local GitHub forge over
real HTTP: the JWT, the installation found from the repository, installation tokens cached,
refreshed before expiry and at once on a 401; and each way it goes wrong at start as one
line naming what to fix.

The forge's clock (``apps.now``) and the bot's are moved by hand, so expiry happens without
waiting."""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from gitopsbot.adapters.forge.connect import AppForge, connect_github_app
from gitopsbot.adapters.forge.github_app import (
    InstallationTokens,
    app_jwt,
    load_app_key,
)
from gitopsbot.adapters.redaction import KnownSecrets
from gitopsbot.core.forge.forge_types import CommitState, CommitStatus
from gitopsbot.errors import ConfigError, ForgeUnauthorized
from gitopsbot.sandbox.forges.github import GitHubForge as GitHubServer

APP_ID = 31337
TOKEN = "ghp_fixed_token_not_used_here_0123"
REPO = "acme/fleet"


def _pem(key: rsa.RSAPrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


def _public(key: rsa.RSAPrivateKey) -> str:
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


@pytest.fixture(scope="module")
def app_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def other_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@dataclass
class MovableClock:
    """Real time plus an offset the test moves (the forge's ``apps.now`` may share it)."""

    offset: float = 0.0

    def now(self) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=self.offset)

    def sleep(self, seconds: float) -> None:
        self.offset += seconds

    def monotonic(self) -> float:
        return self.offset


@pytest.fixture
def server(app_key: rsa.RSAPrivateKey) -> Iterator[GitHubServer]:
    with GitHubServer(token=TOKEN, owner="acme", repo="fleet", token_lifetime=3600) as srv:
        assert isinstance(srv, GitHubServer)
        srv.register_app(APP_ID, _public(app_key), installation_id=77)
        yield srv


def _connect(
    server: GitHubServer, key: rsa.RSAPrivateKey, clock: MovableClock, **kw: object
) -> AppForge:
    return connect_github_app(
        url=server.api_url,
        repository=REPO,
        app_id=int(kw.pop("app_id", APP_ID)),  # type: ignore[call-overload]
        private_key=_pem(key),
        clock=clock,
        installation=int(kw.pop("installation", 0)),  # type: ignore[call-overload]
    )


# -- the JWT --------------------------------------------------------------------------------


def test_jwt_is_rs256_backdated_a_minute_and_lives_ten(app_key: rsa.RSAPrivateKey) -> None:
    now = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    token = app_jwt(APP_ID, app_key, now)
    assert jwt.get_unverified_header(token)["alg"] == "RS256"
    claims = jwt.decode(
        token, app_key.public_key(), algorithms=["RS256"], options={"verify_exp": False}
    )
    assert claims["iss"] == str(APP_ID)
    assert claims["iat"] == int(now.timestamp()) - 60
    assert claims["exp"] - claims["iat"] <= 600
    assert claims["exp"] > int(now.timestamp())


# -- the token cache (fake clock, fake mint) --------------------------------------------------


@dataclass
class FakeMint:
    clock: MovableClock
    lifetime: float = 3600.0
    calls: int = 0

    def __call__(self, installation: int) -> tuple[str, datetime]:
        self.calls += 1
        return f"ghs_tok{self.calls}_{installation}", self.clock.now() + timedelta(
            seconds=self.lifetime
        )


def test_tokens_are_cached_per_installation_and_refreshed_before_expiry() -> None:
    clock = MovableClock()
    mint = FakeMint(clock)
    known = KnownSecrets()
    tokens = InstallationTokens(mint, clock, known=known)
    assert tokens.token(1) == "ghs_tok1_1"
    assert tokens.token(1) == "ghs_tok1_1"  # cached
    assert tokens.token(2) == "ghs_tok2_2"  # another installation, its own token
    clock.offset += 3600 - 301  # more than five minutes left: still good
    assert tokens.token(1) == "ghs_tok1_1"
    clock.offset += 2  # five minutes before expiry: minted anew, before GitHub refuses it
    assert tokens.token(1) == "ghs_tok3_1"
    assert mint.calls == 3
    # Every token handed out is masked in log lines.
    assert known.redact("x ghs_tok1_1 ghs_tok3_1") == "x *** ***"


def test_a_short_lived_token_is_refreshed_a_quarter_of_its_life_early() -> None:
    clock = MovableClock()
    mint = FakeMint(clock, lifetime=8.0)
    tokens = InstallationTokens(mint, clock, known=KnownSecrets())
    first = tokens.token(5)
    clock.offset += 5.9
    assert tokens.token(5) == first
    clock.offset += 0.2  # 6.1 s of 8: within the last quarter
    assert tokens.token(5) != first


def test_a_refused_token_is_minted_anew_at_once_and_only_once_for_many_threads() -> None:
    clock = MovableClock()
    mint = FakeMint(clock)
    tokens = InstallationTokens(mint, clock, known=KnownSecrets())
    first = tokens.token(1)
    tokens.refused(1, "ghs_some_older_token")  # not the current one: nothing happens
    assert tokens.token(1) == first
    tokens.refused(1, first)
    seen: list[str] = []
    threads = [threading.Thread(target=lambda: seen.append(tokens.token(1))) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert mint.calls == 2 and set(seen) == {"ghs_tok2_1"}


# -- against the local forge over HTTP ------------------------------------------------------


def test_the_provider_works_as_the_installation(
    server: GitHubServer, app_key: rsa.RSAPrivateKey
) -> None:
    forge = _connect(server, app_key, MovableClock())
    try:
        pr = server.new_pull(head="b", base="main", title="t", body="")
        forge.provider.upsert_comment(pr.number, marker="plan", body="hello")
        assert next(c.body for c in server.comments.values()).startswith("hello")
        paths = [(r.method, r.path, r.status) for r in server.log]
        assert paths[:2] == [
            ("GET", "/api/v3/repos/acme/fleet/installation", 200),
            ("POST", "/api/v3/app/installations/77/access_tokens", 201),
        ]
        assert server.apps.minted == 1
    finally:
        forge.close()


def test_an_expired_token_is_refreshed_on_the_401_and_the_request_retried(
    server: GitHubServer, app_key: rsa.RSAPrivateKey
) -> None:
    forge = _connect(server, app_key, MovableClock())
    try:
        pr = server.new_pull(head="b", base="main", title="t", body="")
        forge.provider.upsert_comment(pr.number, marker="plan", body="one")
        server.apps.expire_tokens()  # the forge sees the token expired; the bot does not know
        forge.provider.upsert_comment(pr.number, marker="plan", body="two")
        statuses = [r.status for r in server.log if "access_tokens" not in r.path]
        assert 401 in statuses  # the stale token was refused once ...
        assert server.apps.minted == 2  # ... a new one minted ...
        assert next(iter(server.comments.values())).body.startswith("two")  # ... and it went on
    finally:
        forge.close()


def test_a_token_due_for_refresh_is_replaced_before_the_forge_refuses_it(
    server: GitHubServer, app_key: rsa.RSAPrivateKey
) -> None:
    clock = MovableClock()
    server.apps.now = clock.now  # one clock for both: nothing is skewed
    forge = _connect(server, app_key, clock)
    try:
        pr = server.new_pull(head="b", base="main", title="t", body="")
        forge.provider.set_status("a" * 40, CommitStatus(CommitState.PENDING, "d"))
        clock.offset += 3600 - 120  # two minutes before expiry
        forge.provider.upsert_comment(pr.number, marker="plan", body="x")
        assert server.apps.minted == 2
        assert all(r.status != 401 for r in server.log)
    finally:
        forge.close()


def test_a_token_refused_twice_is_the_error(
    server: GitHubServer, app_key: rsa.RSAPrivateKey
) -> None:
    forge = _connect(server, app_key, MovableClock())
    try:
        server.apps.token_lifetime = -10  # every token the forge mints is already expired
        server.apps.expire_tokens()
        with pytest.raises(ForgeUnauthorized, match="401 Bad credentials"):
            forge.provider.get_pull_request(1)
    finally:
        forge.close()


def test_a_given_installation_id_skips_the_lookup(
    server: GitHubServer, app_key: rsa.RSAPrivateKey
) -> None:
    forge = _connect(server, app_key, MovableClock(), installation=77)
    forge.close()
    assert [r.path for r in server.log] == ["/api/v3/app/installations/77/access_tokens"]


# -- bad input: one line naming what to fix ---------------------------------------------------


def test_a_key_that_is_not_the_apps(server: GitHubServer, other_key: rsa.RSAPrivateKey) -> None:
    with pytest.raises(ConfigError) as e:
        _connect(server, other_key, MovableClock())
    text = str(e.value)
    assert "\n" not in text
    assert text.startswith(f"forge.app: the forge refused the JWT of app {APP_ID}")
    assert "forge.app.privateKey is not a key of that app, or forge.app.appId is wrong" in text


def test_an_app_id_the_forge_does_not_know(
    server: GitHubServer, app_key: rsa.RSAPrivateKey
) -> None:
    with pytest.raises(ConfigError, match=r"forge\.app\.appId is wrong"):
        _connect(server, app_key, MovableClock(), app_id=999)


def test_text_that_is_not_a_key() -> None:
    canary = "CANARY-not-a-key-9f8e7d"
    pem = f"-----BEGIN PRIVATE KEY-----\n{canary}\n-----END PRIVATE KEY-----\n"
    with pytest.raises(ConfigError) as e:
        load_app_key(pem)
    assert str(e.value).startswith("forge.app.privateKey: not a PEM private key: give the .pem")
    assert canary not in str(e.value) and e.value.__cause__ is None


def test_an_app_not_installed_on_the_repository(
    server: GitHubServer, app_key: rsa.RSAPrivateKey
) -> None:
    server.apps.apps[APP_ID].installed = False
    with pytest.raises(ConfigError) as e:
        _connect(server, app_key, MovableClock())
    assert str(e.value) == (
        f"forge.app: app {APP_ID} is not installed on {REPO}: install it on that repository "
        "(the app's page, Install App) or fix forge.repository"
    )


def test_an_installation_id_that_is_not_the_apps(
    server: GitHubServer, app_key: rsa.RSAPrivateKey
) -> None:
    with pytest.raises(ConfigError, match=r"forge.app.installationId: app 31337 has no inst"):
        _connect(server, app_key, MovableClock(), installation=78)


@pytest.mark.parametrize(("skew", "words"), [(900, "ahead of"), (-900, "behind")])
def test_a_clock_skewed_past_the_jwt_window(
    server: GitHubServer, app_key: rsa.RSAPrivateKey, skew: int, words: str
) -> None:
    with pytest.raises(ConfigError) as e:
        _connect(server, app_key, MovableClock(offset=skew))
    text = str(e.value)
    assert re.match(rf"forge\.app: this machine's clock is (899|900|901) s {words} the forge", text)
    assert text.endswith("outside the app JWT's window: sync the clock (NTP)")


def test_the_key_and_the_tokens_never_reach_logs_or_messages(
    server: GitHubServer, app_key: rsa.RSAPrivateKey, caplog: pytest.LogCaptureFixture
) -> None:
    pem = _pem(app_key)
    body_lines = [ln for ln in pem.splitlines() if "-----" not in ln]
    caplog.set_level(logging.DEBUG)
    forge = _connect(server, app_key, MovableClock())
    errors: list[str] = []
    try:
        pr = server.new_pull(head="b", base="main", title="t", body="")
        forge.provider.upsert_comment(pr.number, marker="plan", body="hello")
        server.apps.expire_tokens()
        forge.provider.upsert_comment(pr.number, marker="plan", body="again")
        server.apps.token_lifetime = -10
        server.apps.expire_tokens()
        try:
            forge.provider.get_pull_request(pr.number)
        except ForgeUnauthorized as err:
            errors.append(str(err))
    finally:
        forge.close()
    tokens = list(server.apps.issued) + list(forge.tokens.known())
    assert tokens and errors
    shown = "\n".join([caplog.text, *errors, *(c.body for c in server.comments.values())])
    for secret in [*tokens, *body_lines]:
        assert secret not in shown
