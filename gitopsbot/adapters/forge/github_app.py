"""Authenticating as a GitHub App: the app's JWT, its installation on the fleet repository,
and installation access tokens minted and refreshed before they expire.

As GitHub documents it (docs.github.com, "Authenticating as a GitHub App installation"):

* the app signs a JWT with its private key (RS256): ``iss`` the App ID, ``iat`` 60 s in the
  past (clock drift), ``exp`` at most 10 minutes after that. It authenticates the app's own
  calls only: ``GET /app``, ``GET /repos/{owner}/{repo}/installation`` (which installation
  serves the fleet repository), ``POST /app/installations/{id}/access_tokens``;
* an installation token (``ghs_…``) is what every other call and Git over HTTPS
  (``x-access-token:<token>``) carry; it expires an hour after it is minted (``expires_at``).

``InstallationTokens`` keeps one token per installation, refreshed ``REFRESH_BEFORE`` ahead of
its expiry (a quarter of its lifetime when that is shorter) and at once when the forge
answers 401 to it; one lock guards minting, so the many threads that share the client mint
once. The private key lives in this process's memory only; every token minted is masked in
log lines (``adapters.redaction.KNOWN``) and in this package's messages.

``GitHubApp.start`` turns the ways this goes wrong at start into one line each, naming what to
fix: a key that is not a key, a key that is not the app's, a clock off by more than the JWT's
window, an app not installed on the repository.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime

import httpx
import jwt
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from gitopsbot.adapters.forge._http import ForgeHttp
from gitopsbot.adapters.redaction import KNOWN, KnownSecrets
from gitopsbot.errors import ConfigError, ForgeError, ForgeNotFound, ForgeUnauthorized
from gitopsbot.ports.clock import Clock

log = logging.getLogger("gitopsbot.forge")

JWT_BACKDATE = timedelta(seconds=60)  # GitHub: iat 60 s in the past, against clock drift
JWT_LIFETIME = timedelta(minutes=10)  # GitHub: exp no more than 10 minutes after iat
JWT_REUSE = timedelta(minutes=5)  # a JWT is signed anew once this old
REFRESH_BEFORE = timedelta(minutes=5)
# A clock this far from the forge's makes GitHub refuse the JWT (iat in the future or exp
# in the past): said as such rather than as a wrong key.
SKEW_LIMIT = timedelta(seconds=30)


def load_app_key(pem: str, *, label: str = "forge.app.privateKey") -> RSAPrivateKey:
    """The app's RSA private key from its PEM text; ConfigError naming ``label`` otherwise
    (the message never quotes the text)."""
    try:
        key = load_pem_private_key(pem.encode(), password=None)
    except (ValueError, TypeError):
        raise ConfigError(
            f"{label}: not a PEM private key: give the .pem file GitHub generated on the "
            "app's settings page (Private keys), unencrypted"
        ) from None
    if not isinstance(key, RSAPrivateKey):
        raise ConfigError(f"{label}: not an RSA key: GitHub Apps sign with RS256")
    return key


def app_jwt(app_id: int, key: RSAPrivateKey, now: datetime) -> str:
    """The app's JWT for ``now``: iat 60 s back, exp 10 minutes after iat (RS256)."""
    iat = now - JWT_BACKDATE
    claims = {
        "iat": int(iat.timestamp()),
        "exp": int((iat + JWT_LIFETIME).timestamp()),
        "iss": str(app_id),
    }
    return jwt.encode(claims, key, algorithm="RS256")


class AppJwt:
    """The ``TokenSource`` of the app's own calls: a JWT, signed anew every few minutes."""

    def __init__(self, app_id: int, key: RSAPrivateKey, clock: Clock) -> None:
        self._app_id = app_id
        self._key = key
        self._clock = clock
        self._lock = threading.Lock()
        self._jwt = ""
        self._signed = datetime.min.replace(tzinfo=UTC)

    def current(self) -> str:
        with self._lock:
            now = self._clock.now()
            if not self._jwt or now - self._signed >= JWT_REUSE or now < self._signed:
                self._jwt, self._signed = app_jwt(self._app_id, self._key, now), now
            return self._jwt

    def refused(self, token: str) -> None:
        with self._lock:
            if token == self._jwt:
                self._jwt = ""

    def known(self) -> tuple[str, ...]:
        return (self._jwt,) if self._jwt else ()


@dataclass(frozen=True, slots=True)
class Minted:
    token: str
    expires_at: datetime
    minted_at: datetime

    def due(self, now: datetime) -> bool:
        """Time to mint the next one: ``REFRESH_BEFORE`` ahead of expiry, or a quarter of
        the token's lifetime when that is shorter (tests mint tokens that live seconds)."""
        margin = min(REFRESH_BEFORE, (self.expires_at - self.minted_at) / 4)
        return now >= self.expires_at - margin

    def __repr__(self) -> str:
        return f"Minted(token=***, expires_at={self.expires_at.isoformat()})"


class InstallationTokens:
    """Installation tokens, one per installation, minted by ``mint`` when due."""

    def __init__(
        self,
        mint: Callable[[int], tuple[str, datetime]],
        clock: Clock,
        *,
        known: KnownSecrets = KNOWN,
    ) -> None:
        self._mint = mint
        self._clock = clock
        self._known = known
        self._lock = threading.Lock()
        self._tokens: dict[int, Minted] = {}
        self._handed_out: list[str] = []
        self.minted = 0  # how many tokens were minted (tests, logs)

    def token(self, installation: int) -> str:
        with self._lock:  # one mint at a time: the threads that wait take its token
            now = self._clock.now()
            held = self._tokens.get(installation)
            if held is None or held.due(now):
                token, expires_at = self._mint(installation)
                self._known.add(token)  # masked in every log line from now on
                self._handed_out.append(token)
                del self._handed_out[:-4]  # the few that may still be in flight
                self._tokens[installation] = held = Minted(token, expires_at, now)
                self.minted += 1
                log.info(
                    "GitHub App installation %s: token minted, expires %s",
                    installation,
                    expires_at.isoformat(),
                )
            return held.token

    def refused(self, installation: int, token: str) -> None:
        with self._lock:
            held = self._tokens.get(installation)
            if held is not None and held.token == token:
                del self._tokens[installation]

    def known(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(self._handed_out)


@dataclass(frozen=True, slots=True)
class InstallationToken:
    """The ``TokenSource`` of one installation (the forge client and Git share it)."""

    tokens: InstallationTokens
    installation: int

    def current(self) -> str:
        return self.tokens.token(self.installation)

    def refused(self, token: str) -> None:
        self.tokens.refused(self.installation, token)

    def known(self) -> tuple[str, ...]:
        return self.tokens.known()


class GitHubApp:
    """A GitHub App at ``api_root`` (api.github.com, or ``https://HOST/api/v3``)."""

    def __init__(
        self,
        *,
        app_id: int,
        key: RSAPrivateKey,
        api_root: str,
        clock: Clock,
        transport: httpx.BaseTransport | None = None,
        known: KnownSecrets = KNOWN,
    ) -> None:
        self.app_id = app_id
        self._clock = clock
        self.http = ForgeHttp(
            provider="github",
            base_url=api_root,
            token="",
            auth_header=("Authorization", ""),
            extra_headers={
                "Accept": "application/vnd.github+json",
                "X-GitHub-Api-Version": "2022-11-28",
            },
            clock=clock,
            transport=transport,
            tokens=AppJwt(app_id, key, clock),
        )
        self.tokens = InstallationTokens(self._mint, clock, known=known)

    def close(self) -> None:
        self.http.close()

    def installation_for(self, repository: str) -> int:
        """The id of the app's installation that serves ``repository`` (owner/name)."""
        data = self.http.get(f"repos/{repository}/installation")
        return int(data["id"])

    def _mint(self, installation: int) -> tuple[str, datetime]:
        data = self.http.send("POST", f"app/installations/{installation}/access_tokens").body
        expires = datetime.fromisoformat(str(data["expires_at"]).replace("Z", "+00:00"))
        return str(data["token"]), expires

    def start(self, repository: str, installation: int = 0) -> InstallationToken:
        """The installation token source for ``repository``, its first token minted now: a
        wrong key, a skewed clock or a missing installation is a ConfigError here, at start."""
        where = f"app {self.app_id}"
        try:
            if not installation:
                try:
                    installation = self.installation_for(repository)
                except ForgeNotFound:
                    raise ConfigError(
                        f"forge.app: {where} is not installed on {repository}: install it on "
                        "that repository (the app's page, Install App) or fix forge.repository"
                    ) from None
            source = InstallationToken(self.tokens, installation)
            try:
                source.current()
            except ForgeNotFound:
                raise ConfigError(
                    f"forge.app.installationId: {where} has no installation {installation}: "
                    "fix it, or remove it to find the installation from forge.repository"
                ) from None
        except ForgeUnauthorized as err:
            raise ConfigError(self._refused(err)) from None
        except ForgeError as err:
            raise ConfigError(f"forge.app: {where}: {err}") from None
        return source

    def _refused(self, err: ForgeUnauthorized) -> str:
        """Why GitHub refused the JWT, as one line saying what to fix."""
        skew = self._skew()
        if skew is not None and abs(skew) > SKEW_LIMIT:
            ahead = "ahead of" if skew > timedelta(0) else "behind"
            return (
                f"forge.app: this machine's clock is {round(abs(skew.total_seconds()))} s {ahead} "
                f"the forge's ({self.http.base_url}), outside the app JWT's window: sync the "
                "clock (NTP)"
            )
        text = str(err)
        if "'iat'" in text or "'exp'" in text:  # GitHub's words for a JWT out of its window
            return (
                f"forge.app: the forge refused the app JWT's time window ({text}): "
                "sync this machine's clock (NTP)"
            )
        return (
            f"forge.app: the forge refused the JWT of app {self.app_id} ({text}): "
            "forge.app.privateKey is not a key of that app, or forge.app.appId is wrong; "
            "generate a key on the app's settings page"
        )

    def _skew(self) -> timedelta | None:
        """Our clock minus the forge's (its last Date header), when it sent one."""
        if not self.http.server_date:
            return None
        try:
            theirs = parsedate_to_datetime(self.http.server_date)
        except (TypeError, ValueError):
            return None
        return self._clock.now() - theirs.astimezone(UTC)
