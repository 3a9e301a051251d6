"""The webhook receiver under hostile input: raw sockets against the real receiver.

Aspects, one table row each: a negative, non-numeric, doubled, missing or over-the-cap
``Content-Length``, a chunked or gzip transfer, a header flood, a garbage request line, the
wrong method or path, unsigned and forged deliveries, deep JSON (signed and unsigned), a
signed body that is not the event it claims, a body that never finishes. Each gets its status
(or, for the body that never finishes, a close at the deadline) and exactly one log line;
where the headers decide, the answer comes without the body being sent at all, and the
connection is closed rather than read on. No log record carries a traceback, a body or the
secret. Hundreds of slow connections cost no thread, stay within the connection bound and
do not delay a signed delivery; a replayed delivery only nudges, and the scheduler coalesces
the nudges into at most one extra pass.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from gitopsbot.adapters.clock import SystemClock
from gitopsbot.adapters.webhooks import ReceiverLimits, WebhookReceiver, json_depth
from gitopsbot.bot.pass_base import PassResult
from gitopsbot.bot.scheduler import Scheduler
from gitopsbot.core.forge.webhook_events import WebhookEvent, github_signature

SECRET = "whsec-CANARY-51d0"
CANARY = "BODY-CANARY-never-logged"
CAP = 1024 * 1024
DEADLINE = 3  # seconds: ReceiverLimits.request_seconds in these tests
ANSWER_WITHIN = 2.0  # seconds: under the deadline, so an answer did not wait for a body
LIMITS = ReceiverLimits(max_body_bytes=CAP, request_seconds=DEADLINE, connections=100)
PUSH = json.dumps({"ref": "refs/heads/main", "after": "a" * 40, "note": CANARY}).encode()
DEEP = b"[" * 50_000 + json.dumps(CANARY).encode() + b"]" * 50_000


def wait_for(check: Callable[[], bool], seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.05)
    return check()


def request(
    path: str = "/webhooks/github",
    *,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    length: str | None = "auto",
    method: str = "POST",
    send_body: bool = True,
) -> bytes:
    """The raw bytes of one request; ``length=None`` sends no Content-Length."""
    lines = [f"{method} {path} HTTP/1.1", "Host: forge.example"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    if length == "auto":
        length = str(len(body))
    if length is not None:
        lines.append(f"Content-Length: {length}")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head + (body if send_body else b"")


def github(body: bytes, secret: str = SECRET, event: str = "push") -> dict[str, str]:
    return {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": "d-1",
        "X-Hub-Signature-256": github_signature(secret, body),
    }


@dataclass(frozen=True)
class Case:
    id: str
    raw: bytes
    status: int | None  # None: closed unanswered at the deadline
    log: str  # the one log line from gitopsbot.webhooks contains this
    closes: bool = True  # the server closes the connection after answering


CASES = [
    Case(
        "content-length -1, body not sent",
        request(length="-1", send_body=False),
        400,
        "400 Bad Request: Content-Length is invalid",
    ),
    Case(
        "content-length abc",
        request(length="abc", send_body=False),
        400,
        "400 Bad Request: Content-Length is invalid",
    ),
    Case(
        "two different content-lengths",
        request(headers={"Content-Length": "3"}, length="5", send_body=False),
        400,
        "400 Bad Request: Content-Length is invalid",
    ),
    Case(
        "content-length missing, a body follows",
        request(body=PUSH, length=None),
        411,
        "411 Length Required: POST needs Content-Length",
    ),
    Case(
        "transfer-encoding chunked",
        request(
            headers={"Transfer-Encoding": "chunked", "Expect": "100-continue"},
            length=None,
            send_body=False,
        ),
        411,
        "411 Length Required: chunked bodies are not accepted",
    ),
    Case(
        "transfer-encoding gzip",
        request(headers={"Transfer-Encoding": "gzip"}, length=None, send_body=False),
        501,
        "501 Not Implemented: Transfer-Encoding requested is not supported",
    ),
    Case(
        "content-length one over the cap, body not sent",
        request(length=str(CAP + 1), send_body=False),
        413,
        f"413 Request Entity Too Large: Content-Length {CAP + 1} is over the cap of {CAP} bytes",
    ),
    Case(
        "content-length 1 PB, body not sent",
        request(length=str(10**15), send_body=False),
        413,
        f"413 Request Entity Too Large: Content-Length {10**15} is over",
    ),
    Case(
        "a 70 KiB header",
        request(headers={"X-Flood": "a" * 70_000}, send_body=False),
        431,
        "431 Request Header Fields Too Large",
    ),
    Case(
        "a TLS hello on the plain port",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 garbage\r\n\r\n",
        400,
        "400 Bad Request",
    ),
    Case("GET", request(method="GET", length=None), 405, "405 'GET'", closes=False),
    Case(
        "unknown path",
        request("/webhooks/bitbucket", body=PUSH),
        404,
        "404 unknown path '/webhooks/bitbucket'",
        closes=False,
    ),
    Case(
        "unsigned",
        request(body=PUSH, headers={"X-GitHub-Event": "push"}),
        401,
        "401 github event='push' delivery='': missing signature header",
        closes=False,
    ),
    Case(
        "signed with another secret",
        request(body=PUSH, headers=github(PUSH, secret="not-the-secret")),
        401,
        "bad signature",
        closes=False,
    ),
    Case(
        "JSON nested 50,000 deep, unsigned",
        request(body=DEEP, headers={"X-GitHub-Event": "push"}),
        401,
        "missing signature header",
        closes=False,
    ),
    Case(
        "JSON nested 50,000 deep, signed",
        request(body=DEEP, headers=github(DEEP)),
        400,
        "400 github event='push' delivery='d-1': JSON nested deeper than 128 levels",
        closes=False,
    ),
    Case(
        "signed, not JSON",
        request(body=CANARY.encode(), headers=github(CANARY.encode())),
        400,
        "body is not JSON",
        closes=False,
    ),
    Case(
        "signed pull_request without its fields",
        request(
            body=b'{"action": "closed"}',
            headers=github(b'{"action": "closed"}', event="pull_request"),
        ),
        400,
        "pull_request payload lacks",
        closes=False,
    ),
    Case(
        "a body that never finishes",
        request(body=PUSH, headers=github(PUSH))[:-10],
        None,
        f"1 past the {DEADLINE} s request deadline",
    ),
]


@pytest.fixture
def receiver() -> Iterator[tuple[WebhookReceiver, list[WebhookEvent]]]:
    events: list[WebhookEvent] = []
    with WebhookReceiver({"github": SECRET}, events.append, limits=LIMITS) as rx:
        yield rx, events


def port_of(rx: WebhookReceiver) -> int:
    return int(rx.url.rsplit(":", 1)[1])


def exchange(port: int, raw: bytes, seconds: float) -> tuple[bytes, bool, float]:
    """(status line or b"", whether the server closed the connection, seconds to the answer
    or to the close)."""
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.settimeout(seconds)
        s.sendall(raw)
        received = b""
        closed = False
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    closed = True
                    break
                received += chunk
                head, sep, rest = received.partition(b"\r\n\r\n")
                if sep and b"100 Continue" not in head.split(b"\r\n")[0]:
                    length = next(
                        (
                            int(line.split(b":", 1)[1])
                            for line in head.split(b"\r\n")
                            if line.lower().startswith(b"content-length:")
                        ),
                        0,
                    )
                    if len(rest) >= length:
                        break
        except TimeoutError:
            pass
        except ConnectionResetError:
            closed = True
        took = time.monotonic() - start
        if received and not closed:
            # Answered: is the connection closed after it, or kept for another request?
            s.settimeout(0.5)
            try:
                closed = s.recv(1) == b""
            except TimeoutError:
                closed = False
            except ConnectionResetError:
                closed = True
    lines = [line for line in received.split(b"\r\n") if line.startswith(b"HTTP/")]
    status = next((line for line in lines if b" 100 " not in line), b"")
    return status, closed, took


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_hostile_request(
    receiver: tuple[WebhookReceiver, list[WebhookEvent]],
    case: Case,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    rx, events = receiver
    wait = ANSWER_WITHIN if case.status is not None else DEADLINE + 3
    status, closed, took = exchange(port_of(rx), case.raw, wait)
    if case.status is None:
        assert status == b"" and closed, (status, closed)
        assert DEADLINE - 0.5 <= took <= DEADLINE + 2.5, took
    else:
        assert status.split(b" ")[1] == str(case.status).encode(), status
        assert took < ANSWER_WITHIN, f"answered after {took:.2f} s: it waited for a body"
        assert closed == case.closes
    assert not events
    assert wait_for(lambda: any(case.log in r.getMessage() for r in caplog.records), 2)
    ours = [r for r in caplog.records if r.name == "gitopsbot.webhooks"]
    assert len(ours) == 1, [r.getMessage() for r in ours]
    assert ours[0].levelno == logging.WARNING
    for record in caplog.records:
        text = record.getMessage()
        assert record.exc_info is None and "Traceback" not in text, text
        assert "\n" not in text and CANARY not in text and SECRET not in text, text


def test_a_refused_length_is_not_read_on(
    receiver: tuple[WebhookReceiver, list[WebhookEvent]],
) -> None:
    """Content-Length -1 once read to EOF: now 64 MiB streamed after it meet a closed door."""
    rx, _events = receiver
    sent = 0
    with socket.create_connection(("127.0.0.1", port_of(rx))) as s:
        s.settimeout(5)
        s.sendall(request(length="-1", send_body=False))
        assert s.recv(4096).startswith(b"HTTP/1.1 400 ")
        block = b"x" * 65536
        with pytest.raises(OSError):  # reset or broken pipe once the server has closed
            while sent < 64 * 1024 * 1024:
                s.sendall(block)
                sent += len(block)
    assert sent < 16 * 1024 * 1024, f"{sent} bytes went in after the refusal"


def test_a_signed_delivery_still_passes(
    receiver: tuple[WebhookReceiver, list[WebhookEvent]],
) -> None:
    rx, events = receiver
    status, _closed, _took = exchange(port_of(rx), request(body=PUSH, headers=github(PUSH)), 5)
    assert status.startswith(b"HTTP/1.1 202 ")
    assert wait_for(lambda: len(events) == 1, 5) and events[0].branch == "main"


def test_json_depth_is_linear_and_ignores_strings() -> None:
    assert json_depth(b'{"a": [1, {"b": "]]]}}}[[[["}]}') == 3
    assert json_depth(b'"[[[\\"[[["') == 0
    assert json_depth(b"[" * 50_000) == 50_000
    assert json_depth(b'[[ "unterminated [[[[') == 2
    assert json_depth(b"") == 0
    escaped = b'"' + b'\\"' * (2 * 1024 * 1024) + b"\\"  # no closing quote: still linear
    start = time.monotonic()
    assert json_depth(escaped) == 0
    assert time.monotonic() - start < 5


SLOW = 300


def test_slow_connections_cost_no_thread_and_do_not_delay_a_delivery(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """300 connections that each send a byte every half second: the receiver keeps its five
    threads and its bound of 100 connections, answers a signed delivery at once, and closes
    every slow connection by the deadline."""
    caplog.set_level(logging.INFO, logger="gitopsbot.webhooks")
    events: list[WebhookEvent] = []
    before = threading.active_count()
    with WebhookReceiver({"github": SECRET}, events.append, limits=LIMITS) as rx:
        started = threading.active_count()
        assert started - before == LIMITS.workers + 1  # the pool and the I/O thread
        port = port_of(rx)
        slow = [socket.create_connection(("127.0.0.1", port)) for _ in range(SLOW)]
        open_ = set(range(SLOW))
        stop = threading.Event()
        peak = {"threads": 0, "connections": 0}

        def trickle() -> None:
            for s in slow:
                s.setblocking(False)
            sent = 0
            while not stop.is_set() and open_:
                for i in sorted(open_):
                    try:
                        slow[i].send(
                            b"POST /webhooks/github HTTP/1.1\r\n"[sent % 32 : sent % 32 + 1]
                        )
                    except OSError:
                        open_.discard(i)
                sent += 1
                peak["threads"] = max(peak["threads"], threading.active_count())
                peak["connections"] = max(peak["connections"], rx.open_connections)
                stop.wait(0.5)

        attacker = threading.Thread(target=trickle, daemon=True)
        attacker.start()
        try:
            time.sleep(1.0)  # every slow connection accepted and trickling
            with httpx.Client(base_url=rx.url, timeout=5) as client:
                start = time.monotonic()
                answer = client.post("/webhooks/github", content=PUSH, headers=github(PUSH))
                took = time.monotonic() - start
            assert answer.status_code == 202
            assert took < 2.0, f"the signed delivery waited {took:.2f} s"  # deadline: 3 s
            assert wait_for(lambda: len(events) == 1, 2)
            # Every slow connection is closed by the deadline, however often it sends.
            assert wait_for(lambda: not open_, DEADLINE + 4), f"{len(open_)} still open"
        finally:
            stop.set()
            attacker.join(5)
            for s in slow:
                s.close()
        assert peak["threads"] <= started + 1  # + the attacker's own thread
        # + 1: the connection just accepted, in the instant before the oldest is shed.
        assert 0 < peak["connections"] <= LIMITS.connections + 1
        assert rx.stats.dropped >= SLOW
    messages = [r.getMessage() for r in caplog.records if r.name == "gitopsbot.webhooks"]
    assert any("at the bound of 100 open connections" in m for m in messages), messages
    assert any(f"past the {DEADLINE} s request deadline" in m for m in messages), messages
    # One line a second at most, not one a connection.
    assert len([m for m in messages if "dropped" in m]) < 20
    assert wait_for(lambda: threading.active_count() <= before, 5)


def test_a_replayed_delivery_only_nudges_and_the_nudges_coalesce() -> None:
    """30 replays of one signed push: 30 verified nudges, at most 2 extra passes (one moved to
    now, one more for the nudges that came while it ran); the payload itself is never acted
    on: the pass reads Git."""
    passes: list[str] = []
    delivered = threading.Event()  # every replay is in: the nudged pass may end

    def reconcile(cluster: str) -> PassResult:
        passes.append(cluster)
        if len(passes) == 2:  # the first nudge's pass lasts until every replay came (on a
            delivered.wait(30)  # loaded machine 30 posts outlasted a fixed 0.3 s pass)
        return PassResult(cluster, "idle")

    scheduler = Scheduler(
        reconcile=reconcile, clock=SystemClock(), interval_seconds=3600, jitter_seconds=0
    )
    scheduler.set_clusters(["prod-a"])
    scheduler.start()
    nudges: list[WebhookEvent] = []

    def nudge(event: WebhookEvent) -> None:
        nudges.append(event)
        scheduler.nudge()

    try:
        assert wait_for(lambda: len(passes) == 1, 5)  # the first pass at start
        time.sleep(0.5)
        with (
            WebhookReceiver({"github": SECRET}, nudge, limits=LIMITS) as rx,
            httpx.Client(base_url=rx.url, timeout=5) as client,
        ):
            headers = github(PUSH)
            answers = [
                client.post("/webhooks/github", content=PUSH, headers=headers).status_code
                for _ in range(30)
            ]
            assert answers == [202] * 30
            assert wait_for(lambda: len(nudges) == 30, 5)
            delivered.set()
        assert {e.delivery for e in nudges} == {"d-1"}
        time.sleep(1.5)  # every pass the nudges caused has run
        # The first nudge moves the pass to now; the 29 that come while it runs make one more.
        assert len(passes) - 1 == 2, passes
    finally:
        scheduler.shutdown(wait=True, timeout=10)


def test_a_taken_port_raises_and_leaves_nothing_behind() -> None:
    """waitress starts its pool and opens its trigger before it binds: none of it may stay."""
    fds = Path("/proc/self/fd")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        threads = threading.active_count()
        opened = len(list(fds.iterdir())) if fds.is_dir() else 0
        with pytest.raises(OSError):
            WebhookReceiver({"github": SECRET}, lambda _event: None, port=port).start()
        assert threading.active_count() == threads
        if fds.is_dir():
            assert len(list(fds.iterdir())) == opened
