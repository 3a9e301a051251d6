"""The one HTTP choke point every forge provider goes through.

What it owns, so the providers do not have to:

* the httpx.Client (base URL, auth header, timeouts); the token lives only in that header,
  never in a URL, a log line or an exception (every message passes through ``redact``);
* write pacing: writes are serialised and drawn from a token bucket (burst ``burst``,
  refilled so that no 60-second window holds more than ``writes_per_minute``; GitHub's
  secondary limit is about 80 content-creating requests a minute), fed by the injected clock;
* conditional GETs: an ETag cache; a 304 answers from the cache and GitHub does not count it.
  Pagination headers come from the 304 itself when it has them (GitHub repeats Link); a
  cached page is never taken as the last one on the cache's word alone: a server whose ETag
  covers the body only would keep answering 304 for page 1 after a page 2 appeared, so a
  full cached page with no pagination on its 304 makes ``pages`` ask for the next page;
* retries: 5xx and transport failures with exponential backoff; 403/429 rate limits honour
  Retry-After (or X-RateLimit-Reset, or GitHub's "wait at least a minute") up to
  ``max_wait`` seconds, beyond which ``ForgeRateLimited(retry_after=...)`` is raised;
* pagination: Link rel="next" (GitHub, Gitea, GitLab) or GitLab's X-Next-Page, only ever
  followed on the same origin so the auth header never travels to another host;
* status → error mapping onto ``gitopsbot.errors``;
* tokens that change (a GitHub App's installation tokens expire hourly): with ``tokens``, each
  request carries the source's current token, and a 401 tells the source so (it mints
  anew) and the request is sent once more; a second 401 is the error;
* metrics: ``observe`` (when set) is told every request's provider, method, endpoint class,
  status and the rate-limit headers GitHub (``X-RateLimit-*``) and GitLab (``RateLimit-*``)
  send; Gitea sends none.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

import httpx

from gitopsbot.adapters.redaction import redact_secrets
from gitopsbot.errors import (
    ForgeConflict,
    ForgeError,
    ForgeFailed,
    ForgeNotFound,
    ForgeRateLimited,
    ForgeServerError,
    ForgeUnauthorized,
)
from gitopsbot.ports.clock import Clock

log = logging.getLogger("gitopsbot.forge")

Json = Any
WRITE_METHODS = frozenset({"POST", "PATCH", "PUT", "DELETE"})
_LINK_NEXT = re.compile(r'<([^>]+)>\s*;\s*rel="?next"?')
# Headers that say where a page sits in its list (GitHub/Gitea Link, GitLab X-* headers).
PAGINATION_HEADERS = frozenset(
    {"link", "x-next-page", "x-prev-page", "x-page", "x-per-page", "x-total", "x-total-pages"}
)
PAGE_SIZE_PARAMS = ("per_page", "limit")  # GitHub/GitLab, Gitea
# The words of the API paths the providers call: a request's endpoint class is the last one
# in its path, so a metric label never holds a number, a SHA or a repository name.
ENDPOINTS = frozenset(
    {"pulls", "issues", "comments", "labels", "reviews", "statuses", "merge_requests", "notes"}
    | {"approvals", "merge", "commits", "user"}
)


class TokenSource(Protocol):
    """Where the token of each request comes from, when it is not fixed (github_app.py)."""

    def current(self) -> str:
        """The token to send now (minted or refreshed when due)."""
        ...

    def refused(self, token: str) -> None:
        """The forge answered 401 to ``token``: drop it, the next ``current`` mints anew."""
        ...

    def known(self) -> tuple[str, ...]:
        """Every token handed out so far: masked in messages."""
        ...


class _TokenRefused(ForgeUnauthorized):
    """A 401 to a token from a ``TokenSource``: refreshed and retried once."""


@dataclass(frozen=True, slots=True)
class ForgeCall:
    """One request as the metrics see it: never its URL, body or headers."""

    provider: str
    method: str
    endpoint: str  # ``endpoint_class`` of its path
    status: int  # the HTTP status; 0: no answer (timeout, connection failed)
    rate_remaining: int | None = None  # X-RateLimit-Remaining (GitHub), RateLimit-Remaining
    rate_reset: float | None = None  # when the limit resets, UNIX seconds


def endpoint_class(url: str) -> str:
    """``repos/o/r/issues/12/comments`` → ``comments``; ``other`` for anything unknown."""
    words = [w for w in urlsplit(url).path.split("/") if w in ENDPOINTS]
    return words[-1] if words else "other"


def _rate(headers: Mapping[str, str], name: str) -> str:
    return headers.get(f"x-ratelimit-{name}") or headers.get(f"ratelimit-{name}") or ""


@dataclass(slots=True)
class HttpStats:
    """Counters for benchmarks and tests: what this client sent and what it cost."""

    requests: int = 0
    not_modified: int = 0  # 304s: free against GitHub's primary limit
    writes: int = 0
    retries: int = 0
    waited: float = 0.0

    @property
    def counted(self) -> int:
        return self.requests - self.not_modified


@dataclass(frozen=True, slots=True)
class HttpAnswer:
    status: int
    body: Json
    headers: Mapping[str, str] = field(default_factory=dict)
    # False for a page answered from the cache by a 304 that carried no pagination headers:
    # whether more pages follow is then unknown (the cached Link may be stale).
    paging_known: bool = True


class WriteBucket:
    """Token bucket for content-creating requests, on an injected clock.

    Capacity ``burst``; refill (limit - burst) per minute: over any 60 s window at most
    ``burst + (limit - burst) = limit`` writes go out.
    """

    def __init__(self, clock: Clock, *, per_minute: int = 80, burst: int = 8) -> None:
        if not 0 < burst < per_minute:
            raise ValueError("need 0 < burst < per_minute")
        self._clock = clock
        self._rate = (per_minute - burst) / 60.0
        self._capacity = float(burst)
        self._tokens = float(burst)
        self._last = clock.monotonic()

    def take(self) -> float:
        """Take one token, sleeping on the clock until one is there. Returns seconds slept."""
        now = self._clock.monotonic()
        self._tokens = min(self._capacity, self._tokens + (now - self._last) * self._rate)
        self._last = now
        waited = 0.0
        if self._tokens < 1.0:
            waited = (1.0 - self._tokens) / self._rate
            self._clock.sleep(waited)
            self._tokens = 1.0
            self._last = self._clock.monotonic()
        self._tokens -= 1.0
        return waited


class ForgeHttp:
    """A JSON client for one forge API root. Thread-safe for writes (serialised)."""

    def __init__(
        self,
        *,
        provider: str,
        base_url: str,
        token: str,
        auth_header: tuple[str, str],
        clock: Clock,
        extra_headers: Mapping[str, str] | None = None,
        timeout: float = 15.0,
        max_retries: int = 3,
        max_wait: float = 120.0,
        writes_per_minute: int = 80,
        write_burst: int = 8,
        transport: httpx.BaseTransport | None = None,
        etag_cache_size: int = 1024,
        tokens: TokenSource | None = None,
        auth_scheme: str = "Bearer",
    ) -> None:
        """``tokens``: the token comes from this source on every request (``token`` and
        ``auth_header`` are then unused); sent as ``Authorization: <auth_scheme> <token>``."""
        self.provider = provider
        self._tokens = tokens
        self._auth_scheme = auth_scheme
        self._secrets = tuple(s for s in {token, auth_header[1]} if s)
        self._clock = clock
        self._max_retries = max_retries
        self._max_wait = max_wait
        self._bucket = WriteBucket(clock, per_minute=writes_per_minute, burst=write_burst)
        self._write_lock = threading.Lock()
        self._etags: OrderedDict[str, tuple[str, Json, dict[str, str]]] = OrderedDict()
        self._etag_lock = threading.Lock()
        self._etag_cache_size = etag_cache_size
        self.base_url = base_url.rstrip("/")
        self._origin = _origin(self.base_url)
        self.stats = HttpStats()
        self.server_date = ""  # the Date header of the last answer (RFC 7231)
        self.observe: Callable[[ForgeCall], None] | None = None  # metrics, set by gitopsbot.app
        headers = {"User-Agent": "gitopsbot", "Accept": "application/json"}
        headers.update(extra_headers or {})
        if tokens is None:
            headers[auth_header[0]] = auth_header[1]
        self._client = httpx.Client(
            base_url=self.base_url + "/",
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            transport=transport,
            follow_redirects=False,  # a redirect could carry the auth header elsewhere
        )

    def close(self) -> None:
        self._client.close()

    # -- redaction -------------------------------------------------------------------------
    def redact(self, text: str) -> str:
        secrets = self._secrets if self._tokens is None else self._tokens.known()
        return redact_secrets(text, secrets)

    # -- public calls ----------------------------------------------------------------------
    def get(self, path: str, params: Mapping[str, str | int] | None = None) -> Json:
        return self.request("GET", path, params=params).body

    def send(self, method: str, path: str, json: Json = None) -> HttpAnswer:
        return self.request(method, path, json=json)

    def pages(
        self, path: str, params: Mapping[str, str | int] | None = None, *, max_pages: int = 50
    ) -> Iterator[Json]:
        """Items of a paginated list, page after page (stop iterating to stop fetching)."""
        url: str | None = path
        query: Mapping[str, str | int] | None = params
        for _ in range(max_pages):
            if url is None:
                return
            answer = self.request("GET", url, params=query)
            if not isinstance(answer.body, list):
                raise ForgeFailed(f"{self.provider} GET {_path(url)}: expected a list")
            yield from answer.body
            nxt, nxt_query = self._next_page(answer, url, query)
            if nxt is None and not answer.paging_known:
                nxt, nxt_query = _probe_next(url, query, len(answer.body))
            url, query = nxt, nxt_query

    def _next_page(
        self, answer: HttpAnswer, url: str, query: Mapping[str, str | int] | None
    ) -> tuple[str | None, Mapping[str, str | int] | None]:
        link = answer.headers.get("link", "")
        m = _LINK_NEXT.search(link)
        if m:
            nxt = m.group(1)
            if _origin(nxt) != self._origin:
                raise ForgeFailed(f"{self.provider}: pagination link leaves {self._origin}")
            return nxt, None
        next_page = answer.headers.get("x-next-page", "").strip()
        if next_page:
            return url, {**(query or {}), "page": next_page}
        return None, None

    # -- the choke point -------------------------------------------------------------------
    def request(
        self,
        method: str,
        url: str,
        *,
        params: Mapping[str, str | int] | None = None,
        json: Json = None,
    ) -> HttpAnswer:
        is_write = method in WRITE_METHODS
        if is_write:
            with self._write_lock:  # writes one at a time, paced (secondary limits)
                return self._with_retries(method, url, params, json, write=True)
        return self._with_retries(method, url, params, json, write=False)

    def _with_retries(
        self,
        method: str,
        url: str,
        params: Mapping[str, str | int] | None,
        json: Json,
        *,
        write: bool,
    ) -> HttpAnswer:
        attempt = 0
        refreshed = False
        while True:
            if write:
                self.stats.waited += self._bucket.take()
            token = self._tokens.current() if self._tokens is not None else None
            try:
                return self._once(method, url, params, json, token)
            except _TokenRefused:
                # An expired (or revoked) token: a fresh one, and the same request once more.
                if refreshed or token is None or self._tokens is None:
                    raise
                refreshed = True
                self._tokens.refused(token)
                log.info("%s refused its token (401): minted a new one, retrying", self.provider)
            except (ForgeRateLimited, ForgeServerError) as err:
                attempt += 1
                wait = err.retry_after if err.retry_after is not None else 2.0 ** (attempt - 1)
                if attempt > self._max_retries or wait > self._max_wait:
                    raise
                self.stats.retries += 1
                self.stats.waited += wait
                log.warning("%s; retrying in %.0fs", err, wait)
                self._clock.sleep(wait)

    def _once(
        self,
        method: str,
        url: str,
        params: Mapping[str, str | int] | None,
        json: Json,
        token: str | None = None,
    ) -> HttpAnswer:
        request = self._client.build_request(method, url, params=params, json=json)
        if token is not None:
            request.headers["Authorization"] = f"{self._auth_scheme} {token}"
        key = str(request.url)
        with self._etag_lock:
            cached = self._etags.get(key) if method == "GET" else None
        if cached is not None:
            request.headers["If-None-Match"] = cached[0]
        where = f"{self.provider} {method} {_path(key)}"
        self.stats.requests += 1
        if method in WRITE_METHODS:
            self.stats.writes += 1
        try:
            response = self._client.send(request)
        except httpx.TimeoutException as exc:
            self._observed(method, key, 0, {})
            raise ForgeServerError(
                self.redact(f"{where}: timed out ({type(exc).__name__})")
            ) from None
        except httpx.TransportError as exc:
            self._observed(method, key, 0, {})
            raise ForgeServerError(self.redact(f"{where}: {type(exc).__name__}: {exc}")) from None
        headers = {k.lower(): v for k, v in response.headers.items()}
        self.server_date = headers.get("date", "")  # a GitHub App's JWT: is the clock off?
        log.debug("%s -> %s", where, response.status_code)
        self._observed(method, key, response.status_code, headers)
        if response.status_code == 304 and cached is not None:
            self.stats.not_modified += 1
            fresh = {k: v for k, v in headers.items() if k in PAGINATION_HEADERS}
            if not fresh:  # the 304 says nothing about pages: keep cached ones, unsure
                return HttpAnswer(200, cached[1], cached[2], paging_known=False)
            kept = {k: v for k, v in cached[2].items() if k not in PAGINATION_HEADERS}
            return HttpAnswer(200, cached[1], {**kept, **fresh})
        body = _json_or_text(response)
        if response.status_code >= 300:
            raise self._error(where, response.status_code, body, headers)
        etag = headers.get("etag")
        if method == "GET" and etag:
            with self._etag_lock:
                self._etags[key] = (etag, body, headers)
                self._etags.move_to_end(key)
                while len(self._etags) > self._etag_cache_size:
                    self._etags.popitem(last=False)
        return HttpAnswer(response.status_code, body, headers)

    def _observed(self, method: str, url: str, status: int, headers: Mapping[str, str]) -> None:
        if self.observe is None:
            return
        remaining, reset = _rate(headers, "remaining"), _rate(headers, "reset")
        call = ForgeCall(
            self.provider,
            method,
            endpoint_class(url),
            status,
            int(remaining) if remaining.isdigit() else None,
            float(reset) if reset.isdigit() else None,
        )
        try:
            self.observe(call)
        except Exception:  # metrics never fail a forge call
            log.exception("forge metrics failed")

    def _error(self, where: str, status: int, body: Json, headers: Mapping[str, str]) -> ForgeError:
        message = self.redact(_message(body))[:300]
        text = f"{where}: {status} {message}".rstrip()
        retry_after = _retry_after(headers, self._clock)
        lowered = message.lower()
        if status == 429 or (
            status == 403
            and (
                "retry-after" in headers
                or headers.get("x-ratelimit-remaining") == "0"
                or "rate limit" in lowered
            )
        ):
            if retry_after is None:
                retry_after = 60.0  # GitHub: "wait for at least one minute before retrying"
            return ForgeRateLimited(text, retry_after=retry_after)
        if status == 401 and self._tokens is not None:
            return _TokenRefused(text)
        if status in (401, 403):
            return ForgeUnauthorized(text)
        if status == 404:
            return ForgeNotFound(text)
        if status == 409 or (status == 422 and "already exist" in lowered):
            return ForgeConflict(text)
        if status >= 500:
            return ForgeServerError(text, retry_after=retry_after)
        return ForgeFailed(text)


def _probe_next(
    url: str, query: Mapping[str, str | int] | None, count: int
) -> tuple[str | None, Mapping[str, str | int] | None]:
    """The next page after a cached one of ``count`` items, if that page was full.

    A short page is the last whatever the cache says; a full one may have grown a
    successor the (body-only) ETag did not reveal, so ask (one more conditional GET)."""
    params = dict(httpx.URL(url).params)
    params.update({k: str(v) for k, v in (query or {}).items()})
    size = next((params[k] for k in PAGE_SIZE_PARAMS if k in params), "")
    if not size.isdigit() or count < int(size) or count == 0:
        return None, None
    page = int(params["page"]) + 1 if params.get("page", "").isdigit() else 2
    if query is None:  # an absolute "next" link: the page is in its query
        return str(httpx.URL(url).copy_set_param("page", str(page))), None
    return url, {**query, "page": page}


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


def _path(url: str) -> str:
    """The path of a URL without its query (queries never carry tokens, but stay short)."""
    return urlsplit(url).path or url


def _json_or_text(response: httpx.Response) -> Json:
    if not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        return response.text[:500]


def _message(body: Json) -> str:
    """The human part of an error body in each provider's shape."""
    if isinstance(body, dict):
        parts = []
        msg = body.get("message") or body.get("error") or ""
        parts.append(msg if isinstance(msg, str) else str(msg))
        for err in body.get("errors") or []:
            if isinstance(err, dict):
                parts.append(str(err.get("message") or err.get("code") or ""))
            else:
                parts.append(str(err))
        return "; ".join(p for p in parts if p)
    return str(body or "")


def _retry_after(headers: Mapping[str, str], clock: Clock) -> float | None:
    value = headers.get("retry-after", "").strip()
    if value.isdigit():
        return float(value)
    if (
        headers.get("x-ratelimit-remaining") == "0"
        and headers.get("x-ratelimit-reset", "").isdigit()
    ):
        return max(float(headers["x-ratelimit-reset"]) - clock.now().timestamp(), 1.0)
    return None
