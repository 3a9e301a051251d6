"""GitHub Apps on the local GitHub forge, as docs.github.com documents them.

* ``GET /app``: the app the JWT names;
* ``GET /repos/{owner}/{repo}/installation``: the app's installation on the repository, 404
  when the app is not installed there;
* ``POST /app/installations/{id}/access_tokens``: a new installation token (``ghs_…``) and its
  ``expires_at``, ``token_lifetime`` seconds ahead (GitHub: one hour; tests: seconds).

Those three take the app's JWT (``Authorization: Bearer <jwt>``), verified with the app's
public key: 401 "A JSON web token could not be decoded" for a bad signature or an unknown
``iss``, and GitHub's own words for a JWT outside its window (``iat`` in the future, ``exp``
past, or ``exp`` more than 10 minutes after ``iat``). Every other endpoint takes a live
installation token as it takes the forge's fixed token; an expired one is 401 "Bad
credentials". ``now`` is the forge's clock (real time unless a test moves it).
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey
from cryptography.hazmat.primitives.serialization import load_pem_public_key

Json = Any
DOCS = "https://docs.github.com/rest"
MAX_JWT_LIFETIME = 600  # seconds from iat to exp, as GitHub allows
PERMISSIONS = {
    "contents": "write",
    "pull_requests": "write",
    "issues": "write",
    "statuses": "write",
    "metadata": "read",
}


def new_app_key() -> tuple[str, str]:
    """A GitHub App key pair made for a test or a story: (private PEM, public PEM), as the
    app's settings page hands out the private one."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private, public.decode()


class AppRefused(Exception):
    """A request the forge answers with ``status`` and GitHub's ``message``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message

    def body(self) -> Json:
        return {"message": self.message, "documentation_url": DOCS, "status": str(self.status)}


@dataclass(slots=True)
class LocalApp:
    app_id: int
    public_key: RSAPublicKey
    installation_id: int
    installed: bool = True
    slug: str = "gitopsbot"


@dataclass(slots=True)
class IssuedToken:
    installation_id: int
    expires_at: datetime


def _utc_now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


@dataclass(slots=True)
class LocalApps:
    """The apps a local forge knows and the installation tokens it issued."""

    owner: str
    repo: str
    token_lifetime: float = 3600.0
    now: Callable[[], datetime] = _utc_now
    apps: dict[int, LocalApp] = field(default_factory=dict)
    issued: dict[str, IssuedToken] = field(default_factory=dict)
    minted: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def register(
        self, app_id: int, public_key_pem: str, *, installation_id: int, installed: bool = True
    ) -> LocalApp:
        key = load_pem_public_key(public_key_pem.encode())
        assert isinstance(key, RSAPublicKey)
        app = LocalApp(app_id, key, installation_id, installed)
        with self.lock:
            self.apps[app_id] = app
        return app

    # -- authentication --------------------------------------------------------------------
    def verify_jwt(self, token: str) -> LocalApp:
        """The app whose valid JWT ``token`` is; AppRefused(401) otherwise."""
        bad = AppRefused(401, "A JSON web token could not be decoded")
        try:
            claims = jwt.decode(token, options={"verify_signature": False})
            app = self.apps.get(int(claims.get("iss", "")))
        except (jwt.InvalidTokenError, ValueError, TypeError):
            raise bad from None
        if app is None:
            raise bad
        try:
            claims = jwt.decode(
                token,
                app.public_key,
                algorithms=["RS256"],
                options={"verify_exp": False, "verify_iat": False, "require": ["iat", "exp"]},
            )
        except jwt.InvalidTokenError:
            raise bad from None
        iat, exp = claims.get("iat"), claims.get("exp")
        now = self.now().timestamp()
        if not isinstance(iat, int) or iat > now:
            raise AppRefused(
                401,
                "'Issued at' claim ('iat') must be an Integer representing the time that the "
                "assertion was issued",
            )
        if not isinstance(exp, int) or exp <= now:
            raise AppRefused(
                401,
                "'Expiration time' claim ('exp') must be a numeric value representing the "
                "future time at which the assertion expires",
            )
        if exp - iat > MAX_JWT_LIFETIME:
            raise AppRefused(401, "'Expiration time' claim ('exp') is too far in the future")
        return app

    def installation_token_ok(self, token: str) -> bool | None:
        """True: a live installation token; False: one that expired; None: not one."""
        with self.lock:
            issued = self.issued.get(token)
        if issued is None:
            return None
        return self.now() < issued.expires_at

    def expire_tokens(self) -> None:
        """Every token issued so far expires now (as an hour passing would, for the tokens
        only: the app's JWTs stay in their window)."""
        with self.lock:
            for issued in self.issued.values():
                issued.expires_at = min(issued.expires_at, self.now())

    # -- endpoints -------------------------------------------------------------------------
    def app_json(self, app: LocalApp, base_url: str) -> Json:
        return {
            "id": app.app_id,
            "slug": app.slug,
            "node_id": f"A_{app.app_id}",
            "client_id": f"Iv1.{app.app_id:016x}",
            "owner": {"login": self.owner, "id": 1, "type": "Organization"},
            "name": app.slug,
            "description": "",
            "external_url": base_url,
            "html_url": f"{base_url}/apps/{app.slug}",
            "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z",
            "permissions": dict(PERMISSIONS),
            "events": ["pull_request", "issue_comment", "push"],
        }

    def installation_json(self, app: LocalApp, api_url: str, base_url: str) -> Json:
        if not app.installed:
            raise AppRefused(404, "Not Found")
        iid = app.installation_id
        return {
            "id": iid,
            "account": {"login": self.owner, "id": 1, "type": "Organization"},
            "app_id": app.app_id,
            "app_slug": app.slug,
            "target_id": 1,
            "target_type": "Organization",
            "repository_selection": "selected",
            "access_tokens_url": f"{api_url}/app/installations/{iid}/access_tokens",
            "repositories_url": f"{api_url}/installation/repositories",
            "html_url": f"{base_url}/organizations/{self.owner}/settings/installations/{iid}",
            "permissions": dict(PERMISSIONS),
            "events": ["pull_request", "issue_comment", "push"],
            "single_file_name": None,
            "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z",
            "suspended_by": None,
            "suspended_at": None,
        }

    def mint(self, app: LocalApp, installation_id: int) -> Json:
        if not app.installed or installation_id != app.installation_id:
            raise AppRefused(404, "Not Found")
        token = "ghs_" + secrets.token_urlsafe(27)[:36]
        expires = self.now() + timedelta(seconds=self.token_lifetime)
        with self.lock:
            self.issued[token] = IssuedToken(installation_id, expires)
            self.minted += 1
        return {
            "token": token,
            "expires_at": expires.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "permissions": dict(PERMISSIONS),
            "repository_selection": "selected",
        }
