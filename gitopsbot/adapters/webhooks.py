"""The webhook receiver: a bounded server that verifies deliveries, answers, and nudges.

It listens on ``POST /webhooks/<provider>`` (github, gitlab, gitea) and faces the forge, so
every request is treated as hostile until its signature checks out, and what a request may
cost is bounded *before* anything is read. Work for a delivery stops at verifying and parsing
it: the answer goes out first (GitHub gives up after 10 s and never redelivers), then
``nudge(event)`` is called, which should only wake the reconcile loop. Polling remains the
safety net.

**The server is waitress** (pure Python, no C extension, no dependency of its own, kept by
the Pylons project). The standard library's ``http.server`` cannot do this cleanly: it runs
one thread per connection, so 300 slow clients hold 300 threads; its socket timeout restarts
with every byte received, so a client sending a byte a second is never dropped; and bounding
its threads queues the forge's delivery behind the slow clients. waitress reads every
connection on one I/O thread and hands only *complete* requests to a fixed pool of worker
threads, and its request parser already enforces what we want:

* ``Content-Length`` must be digits only: ``-1``, ``abc`` or two differing lengths are
  answered **400** without reading the body;
* a declared length over the body cap is answered **413** without reading the body;
* request line and headers together are capped (**431** past the cap).

On top of it this module adds, through waitress's own extension points (the channel's
``parser_class`` and ``error_task_class``, the server's ``handle_accept`` and
``maintenance``):

* **411** for a body without ``Content-Length``, chunked included: every forge sends a
  length, so ``Transfer-Encoding: chunked`` is refused at the headers rather than bounded
  while it streams;
* a **request deadline**: a request not complete ``request_seconds`` after its first byte
  is dropped with its connection, however often it sends a byte (waitress's own
  ``channel_timeout`` only closes *idle* connections, which a slow-loris never is); a
  connection idle that long is closed too;
* a **connection bound**: past ``connections`` open connections, the oldest one still
  sending its request is closed to admit the new one (the new one itself when every open
  connection has a complete request in service), so slow clients cannot lock the forge out
  and cost one socket each, never a thread;
* a **JSON depth bound**: a verified body nested deeper than ``json_depth`` is answered
  **400** before it reaches the JSON parser;
* **one-line logs**: every refusal and every dropped connection is one log line (the
  connections dropped in a second are counted on one line); waitress's own log records lose
  their traceback and keep the exception's type and message. Nothing logs a body or a secret.

A replayed delivery (same body, same signature: the forges' signatures carry no timestamp)
verifies again and nudges again, and that is all it can do. A nudge only moves the clusters'
next pass to now (gitopsbot.bot.scheduler); nudges that arrive while a pass runs coalesce
into one more pass, so however fast replays come, a cluster has one pass running and at most
one waiting; and the pass reads Git itself, never the delivery's branch or SHAs. Deliveries
are not de-duplicated by id: a redelivery from the forge's own page must still wake the bot.
"""

from __future__ import annotations

import heapq
import logging
import re
import threading
import time
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from itertools import accumulate
from typing import TYPE_CHECKING, Any, cast

from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser
from waitress.task import ErrorTask, ThreadedTaskDispatcher
from waitress.utilities import Error

from gitopsbot.adapters.waitress_server import ClosableServer, ServedOnThread
from gitopsbot.core.forge.webhook_events import (
    PayloadError,
    WebhookEvent,
    WebhookProvider,
    delivery_id,
    event_name,
    parse,
    verify,
)

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

log = logging.getLogger("gitopsbot.webhooks")

Nudge = Callable[[WebhookEvent], None]

# Methods that carry a body here: they must declare its length.
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


@dataclass(frozen=True, slots=True)
class ReceiverLimits:
    """What one request, and the receiver as a whole, may cost."""

    max_body_bytes: int = 25 * 1024 * 1024
    """Largest body accepted (GitHub caps deliveries at 25 MB); a larger declared length is
    413 before any of the body is read."""
    max_header_bytes: int = 64 * 1024
    """Request line plus headers; a forge sends a few KiB. Past it: 431."""
    request_seconds: int = 10
    """A request (headers and body) must be complete this many seconds after its first byte,
    or its connection is closed unanswered; an idle connection is closed after as long.
    GitHub itself waits 10 s for the answer."""
    connections: int = 200
    """Open connections at most; each costs one socket and its buffers, never a thread."""
    workers: int = 4
    """Threads that judge complete requests; with the I/O thread, the receiver's threads."""
    json_depth: int = 128
    """Deepest nesting of arrays and objects in a verified body; forge payloads use < 10."""


@dataclass(slots=True)
class WebhookStats:
    accepted: int = 0
    ignored: int = 0
    rejected: int = 0  # 401 (signature) and 400 (payload) after the request was read
    refused: int = 0  # answered from the request line and headers alone (400/404/405/411/...)
    dropped: int = 0  # connections closed unanswered: past the deadline or the bound


class WebhookReceiver(ServedOnThread["_Server"]):
    """``with WebhookReceiver({"github": secret}, nudge) as rx: rx.url`` → http://127.0.0.1:PORT."""

    def __init__(
        self,
        secrets: Mapping[str, str],
        nudge: Nudge,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        limits: ReceiverLimits | None = None,
    ) -> None:
        self._secrets = {WebhookProvider(k): v for k, v in secrets.items()}
        self._nudge = nudge
        self._address = (host, port)
        self.limits = limits or ReceiverLimits()
        self.stats = WebhookStats()
        self._lock = threading.Lock()

    def start(self) -> WebhookReceiver:
        self._serve(self._bind, threads=self.limits.workers, name="webhook-receiver")
        return self

    def _bind(self, socket_map: dict[int, Any], dispatcher: ThreadedTaskDispatcher) -> _Server:
        host, port = self._address
        limits = self.limits
        return _Server(
            self._wsgi,
            self,
            map=socket_map,
            dispatcher=dispatcher,
            host=host,
            port=port,
            threads=limits.workers,
            max_request_body_size=limits.max_body_bytes + 1,  # waitress refuses >= this
            max_request_header_size=limits.max_header_bytes,
            channel_timeout=limits.request_seconds,
            cleanup_interval=1,  # the deadline is checked every second
            # A backstop only: the bound is kept by shedding (see _Server.handle_accept).
            connection_limit=limits.connections + 16,
            asyncore_use_poll=True,  # select() stops at 1,024 descriptors
            ident="gitopsbot",
            expose_tracebacks=False,
        )

    @property
    def open_connections(self) -> int:
        """Connections open now: accepted and not yet closed (the bound is ``limits``)."""
        return 0 if self._server is None else len(self._server.channels())

    def count(self, field: str, n: int = 1) -> None:
        with self._lock:
            setattr(self.stats, field, getattr(self.stats, field) + n)

    # -- one delivery ----------------------------------------------------------------------
    def judge(
        self, path: str, headers: Mapping[str, str], body: bytes
    ) -> tuple[int, str, WebhookEvent | None]:
        """(HTTP status, short reason, event to nudge with) for one delivery."""
        name = path.rstrip("/").rsplit("/", 1)[-1]
        try:
            provider = WebhookProvider(name)
        except ValueError:
            self.count("refused")
            log.warning("webhook refused: 404 unknown path %s", _shown(path))
            return 404, "unknown webhook path", None
        reason = verify(provider, headers, body, self._secrets.get(provider, ""))
        event_id = delivery_id(provider, headers)
        meta = (
            f"{provider.value} event={_shown(event_name(provider, headers))} "
            f"delivery={_shown(event_id)}"
        )
        if reason:
            self.count("rejected")
            log.warning("webhook rejected: 401 %s: %s", meta, reason)  # never the body
            return 401, reason, None
        depth = json_depth(body)
        try:
            if depth > self.limits.json_depth:
                raise PayloadError(f"JSON nested deeper than {self.limits.json_depth} levels")
            event = parse(provider, headers, body)
        except PayloadError as err:
            self.count("rejected")
            log.warning("webhook rejected: 400 %s: %s", meta, err)
            return 400, str(err), None
        self.count("ignored" if event is None else "accepted")
        log.info("webhook accepted: %s%s", meta, "" if event else " (ignored)")
        return 202, "accepted", event

    def deliver(self, event: WebhookEvent) -> None:
        try:
            self._nudge(event)
        except Exception as err:  # noqa: BLE001  # a failing nudge must not kill the worker
            log.error(
                "webhook nudge failed for %s %s: %s: %s",
                event.provider,
                event.kind,
                type(err).__name__,
                err,
            )

    # -- the WSGI application --------------------------------------------------------------
    def _wsgi(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        event: WebhookEvent | None = None
        try:
            if environ.get("REQUEST_METHOD") != "POST":
                self.count("refused")
                log.warning(
                    "webhook refused: 405 %s %s",
                    _shown(str(environ.get("REQUEST_METHOD"))),
                    _shown(str(environ.get("PATH_INFO", ""))),
                )
                status, reason = 405, "POST webhooks here"
            else:
                # The parser checked the length (digits only, within the cap) and has read
                # exactly that many bytes: this read never waits on the client.
                length = int(environ.get("CONTENT_LENGTH") or 0)
                body = environ["wsgi.input"].read(length)
                headers = {
                    key[5:].replace("_", "-").lower(): str(value)
                    for key, value in environ.items()
                    if key.startswith("HTTP_")
                }
                status, reason, event = self.judge(str(environ.get("PATH_INFO", "")), headers, body)
        except Exception as err:  # noqa: BLE001  # a bug: 500 and one line, never a traceback
            log.error("webhook request failed: 500 %s", type(err).__name__)
            status, reason, event = 500, "internal error", None
        payload = reason.encode() + b"\n"
        start_response(
            f"{status} {HTTPStatus(status).phrase}",
            [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(payload)))],
        )
        return _Answer(payload, event, self)


class _Answer:
    """The response body; its ``close`` (called once the answer is written) nudges."""

    def __init__(self, payload: bytes, event: WebhookEvent | None, rx: WebhookReceiver) -> None:
        self._payload = payload
        self._event = event
        self._rx = rx

    def __iter__(self) -> Iterator[bytes]:
        yield self._payload

    def close(self) -> None:
        if self._event is not None:
            self._rx.deliver(self._event)


_STRINGS = re.compile(rb'"[^"\\]*(?:\\[\s\S]?[^"\\]*)*(?:"|\Z)')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")


def json_depth(body: bytes) -> int:
    """The deepest nesting of arrays and objects in ``body``, in linear time.

    Strings are cut out first (an unterminated one runs to the end: the JSON parser stops
    there too), the brackets left become +1/-1 steps, and the deepest running sum is the
    depth. ``json.loads`` recurses once per level and raises ``RecursionError`` somewhere
    near 1,000; this answers before it is called.
    """
    steps = _STRINGS.sub(b"", body).translate(None, _NOT_BRACKETS).translate(_STEPS)
    return max(accumulate(array("b", steps)), default=0)


def _shown(text: str, limit: int = 80) -> str:
    """A client-chosen string as a log may show it: quoted, escaped, cut."""
    return repr(text[:limit] + ("…" if len(text) > limit else ""))


class _LengthRequired(Error):
    code = 411
    reason = "Length Required"


class _Parser(HTTPRequestParser):
    """waitress's parser, plus: a body must come with ``Content-Length``; and the time the
    request's first byte came (waitress makes a parser when a request starts)."""

    def __init__(self, adj: Adjustments) -> None:
        super().__init__(adj)
        self.started = time.time()  # the clock waitress's maintenance is given

    def parse_header(self, header_plus: bytes) -> None:
        super().parse_header(header_plus)
        method = cast(str, self.command)  # the stub says bytes; waitress 3 sets str
        if self.chunked:
            # Refused at the headers: no chunk is read. The request ends here.
            self.chunked = False
            self.body_rcv = None
            self.error = _LengthRequired("chunked bodies are not accepted: send Content-Length")
        elif method in _BODY_METHODS and "CONTENT_LENGTH" not in self.headers:
            self.error = _LengthRequired(f"{method} needs Content-Length")
        if self.error is not None:
            self.expect_continue = False  # no "100 Continue" for a body we will not read


class _ErrorTask(ErrorTask):
    """waitress's answer to a request its parser refused, with our one log line."""

    def execute(self) -> None:
        parser = cast(HTTPRequestParser, self.request)  # the stub says Error
        error = parser.error
        if error is not None:
            channel = cast(_Channel, self.channel)
            receiver = channel.receiver
            receiver.count("refused")
            detail = error.body
            if error.code == 413:  # waitress says "exceeds max_body of <cap + 1>"
                detail = (
                    f"Content-Length {parser.content_length} is over the cap of "
                    f"{receiver.limits.max_body_bytes} bytes"
                )
            log.warning(
                "webhook refused: %d %s: %s (from %s)",
                error.code,
                error.reason,
                detail,
                _peer(channel),
            )
        super().execute()


class _Channel(HTTPChannel):
    parser_class = _Parser
    error_task_class = _ErrorTask

    @property
    def receiver(self) -> WebhookReceiver:
        return cast(_Server, self.server).receiver


def _peer(channel: HTTPChannel) -> str:
    addr = channel.addr
    return str(addr[0]) if isinstance(addr, tuple) else str(addr)


class _Server(ClosableServer):
    """waitress's TCP server with a request deadline and a shedding connection bound."""

    channel_class = _Channel

    def __init__(self, app: Any, receiver: WebhookReceiver, **adjustments: Any) -> None:
        self.receiver = receiver
        self._expired = 0  # closed past the deadline since the last log line
        self._shed = 0  # closed at the bound since the last log line
        super().__init__(app, **adjustments)

    def handle_accept(self) -> None:
        super().handle_accept()
        limit = self.receiver.limits.connections
        channels = self.channels()
        excess = len(channels) - limit
        if excess <= 0:
            return
        # The oldest connections still sending their request go first; one whose request is
        # complete is in service and is never cut. The newest is a candidate too: when all
        # the others are in service, it is refused at once.
        waiting = [c for c in channels if not c.requests and not c.will_close]
        for victim in heapq.nsmallest(excess, waiting, key=lambda c: c.creation_time):
            victim.handle_close()
            self._shed += 1

    def maintenance(self, now: float) -> None:
        cutoff = now - self.receiver.limits.request_seconds
        for channel in self.channels():
            if channel.requests or channel.will_close:
                continue  # a complete request in service is never cut
            # A request under way is timed from its first byte, however often bytes come
            # since (waitress's own timeout restarts at every byte); an idle connection from
            # its last activity, like waitress's.
            partial = channel.request
            started = partial.started if isinstance(partial, _Parser) else channel.last_activity
            if started < cutoff:
                channel.will_close = True  # closed by the I/O loop on its next turn
                self._expired += 1
        super().maintenance(now)  # type: ignore[arg-type]  # stub: int; waitress: float
        if self._expired or self._shed:
            self.receiver.count("dropped", self._expired + self._shed)
            log.warning(
                "webhook connections dropped: %d past the %d s request deadline, "
                "%d at the bound of %d open connections",
                self._expired,
                self.receiver.limits.request_seconds,
                self._shed,
                self.receiver.limits.connections,
            )
            self._expired = self._shed = 0


class _OneLine(logging.Filter):
    """waitress logs socket and application errors with a traceback: keep one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            err = record.exc_info[1]
            record.msg = f"{record.getMessage()}: {type(err).__name__}: {err}"
            record.args = None
            record.exc_info = None
            record.exc_text = None
        record.stack_info = None
        return True


for _name in ("waitress", "waitress.queue"):
    logging.getLogger(_name).addFilter(_OneLine())
