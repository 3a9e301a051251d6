"""Chat notifications, sent: a ``Listener`` that posts notable happenings to the webhooks of
``notifications:`` in gitopsbot.yaml (docs/notifications.md).

What is decided (which events, which clusters, the payloads, the token bucket, coalescing) is
pure and lives in ``core.notices.notifications``; this module redacts, queues and posts.

**Why httpx and not apprise.** apprise (2.2, evaluated in docs/notifications.md) is the
well-kept notification library, but it does not fit: its Slack plugin posts only to
``hooks.slack.com`` from a ``slack://T/B/C`` token triple, so a Slack-compatible endpoint at
another URL (Mattermost, Rocket.Chat, a local receiver) is out of reach; its ``json://``
plugin posts apprise's own flat body (``version``, ``title``, ``message``, ``type``) and
cannot send our versioned payload; it neither retries nor honours ``Retry-After``; its plugins
log the request URL (which embeds the webhook's token) at debug level; and it brings requests,
requests-oauthlib, oauthlib, click and Markdown (14 MB) to send one JSON POST. httpx is already
the bot's HTTP client.

**Never waits, never leaks.** ``Notifier.happened`` is called on a pass's thread: it only
builds the message and appends it to the target's bounded queue; each target has its own
thread that gathers, rate-limits and posts. A webhook URL is a secret (it embeds a token): it
is used for the request only, never logged, never put in an exception; messages name the
target (``gitopsbot.yaml:12: notifications[0] (slack)``). A failure's detail is run through
``redaction.redact_secrets`` with the secrets resolved for the cluster (``SecretMemory``), the
webhook URLs and any other secret the bot knows, before it is queued.

**What is dropped, and said once.** (1) When a target's queue is full the oldest messages are
dropped; one warning when that starts, and the next post says how many. (2) A post that still
fails after its bounded retries is dropped with one warning (the journal on the state branch
keeps the record). (3) On shutdown, what is still queued after the timeout is dropped with one
warning. Identical messages are never dropped: they are coalesced into one line with ``×N``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Protocol

import httpx

from gitopsbot.adapters.redaction import redact_secrets
from gitopsbot.core.fleet.model import BotSettings, ForgeSettings, NotificationTarget, SecretRef
from gitopsbot.core.notices.happenings import Happening
from gitopsbot.core.notices.notifications import (
    Message,
    RateLimit,
    coalesce,
    full,
    matches,
    message_of,
    pull_request_url,
    slack_payload,
    take,
    webhook_payload,
)
from gitopsbot.errors import ConfigError, NotificationFailed, SecretUnavailable
from gitopsbot.ports.observers import Listener

log = logging.getLogger(__name__)

USER_AGENT = "gitopsbot-notifications"


class _Resolver(Protocol):
    def resolve(self, ref: SecretRef) -> str: ...


class _SecretSource(Protocol):
    def resolve_all(self, refs: Sequence[SecretRef]) -> dict[str, str]: ...


# -- the secrets a cluster's messages must not carry ---------------------------------------------


class SecretMemory:
    """The secret values resolved for each cluster this run (to mask them in notifications).
    Held in memory only, never written anywhere."""

    def __init__(self) -> None:
        self._values: dict[str, set[str]] = {}
        self._lock = threading.Lock()

    def remember(self, cluster: str, values: Iterable[str]) -> None:
        with self._lock:
            self._values.setdefault(cluster, set()).update(v for v in values if v)

    def values(self, cluster: str) -> tuple[str, ...]:
        with self._lock:
            return tuple(self._values.get(cluster, ()))

    def recording(self, cluster: str, source: _SecretSource) -> RecordingSecrets:
        """``source`` (a ``SecretResolver``), remembering what it resolves for ``cluster``."""
        return RecordingSecrets(source, self, cluster)


class RecordingSecrets:
    """A secret source that tells a ``SecretMemory`` what it resolved."""

    def __init__(self, source: _SecretSource, memory: SecretMemory, cluster: str) -> None:
        self._source = source
        self._memory = memory
        self._cluster = cluster

    def resolve_all(self, refs: Sequence[SecretRef]) -> dict[str, str]:
        found = self._source.resolve_all(refs)
        self._memory.remember(self._cluster, found.values())
        return found


# -- posting -------------------------------------------------------------------------------------


class _HideUrls(logging.Filter):
    """httpx logs each request's URL at INFO (``HTTP Request: POST https://…``): a webhook URL
    embeds its token, so the notification URLs are masked in httpx's records."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        urls = tuple(self.urls)
        if urls and isinstance(record.args, tuple):
            record.args = tuple(
                redact_secrets(a, urls) if isinstance(a, str) else _masked(a, urls)
                for a in record.args
            )
        return True


def _masked(arg: object, urls: tuple[str, ...]) -> object:
    text = str(arg)
    return redact_secrets(text, urls) if any(u in text for u in urls) else arg


_HIDDEN = _HideUrls()
logging.getLogger("httpx").addFilter(_HIDDEN)


def hide_in_logs(url: str) -> None:
    """Mask ``url`` wherever httpx would log it."""
    _HIDDEN.urls.add(url)


def retry_after_seconds(value: str | None, now: datetime) -> float | None:
    """``Retry-After`` as seconds (delta-seconds or an HTTP date), None when absent or bad."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - now).total_seconds())


class WebhookClient:
    """POSTs JSON with short timeouts and bounded retries: 429 and 5xx (and a request that
    never completed) are tried again up to ``attempts`` times, after ``Retry-After`` when the
    receiver gives one (up to ``max_retry_after`` seconds; longer is given up), else after
    1, 2, 4 … × ``backoff_seconds``. Any other status is a refusal, not retried. Raises
    ``NotificationFailed`` naming ``label`` only: neither the URL nor the response body."""

    def __init__(
        self,
        *,
        attempts: int = 4,
        timeout: httpx.Timeout | None = None,
        backoff_seconds: float = 1.0,
        max_retry_after: float = 60.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.attempts = max(1, attempts)
        self.backoff_seconds = backoff_seconds
        self.max_retry_after = max_retry_after
        self._client = httpx.Client(
            timeout=timeout or httpx.Timeout(5.0, connect=3.0),
            transport=transport,
            follow_redirects=False,
            headers={"User-Agent": USER_AGENT},
        )

    def close(self) -> None:
        self._client.close()

    def post(
        self, label: str, url: str, payload: Mapping[str, Any], *, stop: threading.Event
    ) -> None:
        hide_in_logs(url)
        reason = ""
        for attempt in range(self.attempts):
            wait = self.backoff_seconds * (2**attempt)
            try:
                response = self._client.post(url, json=payload)
            except httpx.TimeoutException:
                reason = "timed out"
            except httpx.HTTPError as e:
                # The exception's text may hold the URL: name only its type.
                reason = f"request failed ({type(e).__name__})"
            else:
                status = response.status_code
                if 200 <= status < 300:
                    return
                reason = f"HTTP {status}"
                if status != 429 and status < 500:
                    raise NotificationFailed(f"{label}: refused: {reason}")
                asked = retry_after_seconds(response.headers.get("Retry-After"), _utcnow())
                if asked is not None:
                    if asked > self.max_retry_after:
                        raise NotificationFailed(
                            f"{label}: {reason}, Retry-After {asked:.0f}s is past the "
                            f"{self.max_retry_after:.0f}s the bot waits"
                        )
                    wait = asked
            if attempt + 1 == self.attempts:
                break
            if stop.wait(wait):
                raise NotificationFailed(f"{label}: {reason}; not retried, the bot is stopping")
        raise NotificationFailed(f"{label}: {reason} ({self.attempts} attempts)")


def _utcnow() -> datetime:
    return datetime.now(UTC)


# -- one webhook: a bounded queue and its thread -------------------------------------------------


class _Channel:
    def __init__(
        self,
        target: NotificationTarget,
        url: str,
        client: WebhookClient,
        *,
        limit: RateLimit,
        queue_size: int,
        monotonic: Callable[[], float],
    ) -> None:
        self.target = target
        self._url = url
        self._client = client
        self._limit = limit
        self._size = max(1, queue_size)
        self._monotonic = monotonic
        self._queue: deque[Message] = deque()
        self._cond = threading.Condition()
        self._dropped = 0
        self._overflowing = False
        self._busy = False
        self._closing = False
        self._stop = threading.Event()
        self._bucket = full(limit, monotonic())
        self.posts = 0  # successful posts (for tests and metrics)
        self._thread = threading.Thread(
            target=self._loop, name=f"notify-{target.index}", daemon=True
        )
        self._thread.start()

    def put(self, message: Message) -> None:
        with self._cond:
            if self._closing:
                return
            if len(self._queue) >= self._size:
                self._queue.popleft()
                self._dropped += 1
                if not self._overflowing:
                    self._overflowing = True
                    log.warning(
                        "%s: queue full (%d): dropping the oldest notifications until it "
                        "drains; the next post says how many",
                        self.target.label,
                        self._size,
                    )
            self._queue.append(message)
            self._cond.notify_all()

    def flush(self, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and not self._busy, timeout)

    def close(self, timeout: float) -> None:
        drained = self.flush(timeout)
        with self._cond:
            self._closing = True
            left = len(self._queue)
            self._queue.clear()
            self._cond.notify_all()
        self._stop.set()
        self._thread.join(timeout=5.0)
        if not drained and left:
            log.warning("%s: %d notification(s) not posted: stopping", self.target.label, left)

    def _loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._queue) or self._closing)
                if self._closing:
                    return
                self._busy = True
            try:
                self._post_batch()
            except Exception:  # a bug here must not end the thread
                log.exception("%s: posting crashed", self.target.label)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _post_batch(self) -> None:
        # A pass tells its happenings within milliseconds: gather them into one post.
        self._stop.wait(self._limit.gather_seconds)
        while True:
            self._bucket, wait = take(self._bucket, self._monotonic(), self._limit)
            if wait <= 0:
                break
            if self._stop.wait(wait):
                return
        with self._cond:
            batch = list(self._queue)
            self._queue.clear()
            dropped, self._dropped = self._dropped, 0
            self._overflowing = False
        if not batch:
            return
        told = coalesce(batch)
        if self.target.kind == "slack":
            payload = slack_payload(told, dropped=dropped)
        else:
            payload = webhook_payload(told, dropped=dropped)
        try:
            self._client.post(self.target.label, self._url, payload, stop=self._stop)
        except NotificationFailed as e:
            log.warning("%s; %d notification(s) not delivered", e, len(batch))
            return
        self.posts += 1


# -- the listener --------------------------------------------------------------------------------


class Notifier(Listener):
    """Tells each matching webhook of the notable happenings.

    ``targets`` pairs each ``notifications[i]`` entry with its resolved URL. ``secrets_for``
    gives the secret values resolved for a cluster (``SecretMemory.values``); ``secrets`` are
    further values masked in every message (the forge token, for instance)."""

    def __init__(
        self,
        targets: Sequence[tuple[NotificationTarget, str]],
        *,
        forge: ForgeSettings | None = None,
        secrets_for: Callable[[str], Iterable[str]] = lambda cluster: (),
        secrets: Iterable[str] = (),
        limit: RateLimit | None = None,
        queue_size: int = 200,
        client: WebhookClient | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._forge = forge or ForgeSettings()
        self._secrets_for = secrets_for
        self._secrets = tuple({*secrets, *(url for _, url in targets)})
        self._client = client or WebhookClient()
        self._channels = [
            _Channel(
                target,
                url,
                self._client,
                limit=limit or RateLimit(),
                queue_size=queue_size,
                monotonic=monotonic,
            )
            for target, url in targets
        ]

    @property
    def posts(self) -> int:
        return sum(c.posts for c in self._channels)

    def happened(self, happening: Happening) -> None:
        if not happening.notable:
            return
        wanted = [c for c in self._channels if matches(c.target, happening)]
        if not wanted:
            return
        secrets = [*self._secrets, *self._secrets_for(happening.cluster)]
        message = message_of(
            happening,
            detail=redact_secrets(happening.detail, secrets),
            pr_url=pull_request_url(self._forge, happening.pr_number),
        )
        for channel in wanted:
            channel.put(message)

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until everything queued so far was posted (or given up)."""
        deadline = time.monotonic() + timeout
        return all(c.flush(max(0.0, deadline - time.monotonic())) for c in self._channels)

    def close(self, timeout: float = 10.0) -> None:
        """Post what is queued (for at most ``timeout`` seconds), then stop the threads."""
        deadline = time.monotonic() + timeout
        for channel in self._channels:
            channel.close(max(0.0, deadline - time.monotonic()))
        self._client.close()


def resolve_targets(
    targets: Sequence[NotificationTarget], resolver: _Resolver
) -> list[tuple[NotificationTarget, str]]:
    """Each target with its URL, read from its secret reference. A ConfigError names the
    target and the reference, never the value."""
    out: list[tuple[NotificationTarget, str]] = []
    for target in targets:
        try:
            url = resolver.resolve(target.url).strip()
        except SecretUnavailable as e:
            raise ConfigError(f"{target.label}: url: {e}") from None
        if not url.lower().startswith(("https://", "http://")):
            raise ConfigError(
                f"{target.label}: url: the value is not an http(s) URL "
                f"(read from {target.url.source} {target.url.name})"
            )
        out.append((target, url))
    return out


def from_settings(
    settings: BotSettings,
    resolver: _Resolver,
    *,
    secrets_for: Callable[[str], Iterable[str]] = lambda cluster: (),
    secrets: Iterable[str] = (),
) -> Notifier | None:
    """The notifier of ``settings.notifications`` (None when there is none)."""
    if not settings.notifications:
        return None
    targets = resolve_targets(settings.notifications, resolver)
    return Notifier(targets, forge=settings.forge, secrets_for=secrets_for, secrets=secrets)
