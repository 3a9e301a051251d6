"""Forge benchmark: rate-limit cost of an idle poll, and webhook delivery → nudge latency.

Run: ``python benchmarks/forge_bench.py``. Everything is on loopback, measured in this run:

1. Idle poll: against the local GitHub server, one poll cycle (find the open proposal, read it
   with its approvals, list merges since the last check) is warmed once, then repeated. The
   figure is requests per idle cycle that count against GitHub's limit (target 0: every
   request is conditional and answered 304).
2. Webhook: time from sending a signed GitHub push delivery to the ``nudge`` callback firing
   inside the receiver (target well under 100 ms), against a baseline of a bare loopback HTTP
   round trip to a trivial stdlib server through the same client; printed as a ratio.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

from gitopsbot.adapters.clock import SystemClock
from gitopsbot.adapters.forge.connect import connect
from gitopsbot.adapters.webhooks import WebhookReceiver
from gitopsbot.core.forge.forge_types import PullRequestDraft
from gitopsbot.core.forge.webhook_events import WebhookEvent, github_signature
from gitopsbot.sandbox.forges.github import GitHubForge as GitHubServer

TOKEN = "bench-token"
SECRET = "bench-secret"
CYCLES = 20
DELIVERIES = 300


def idle_poll() -> tuple[float, int, float]:
    """(counted requests per idle cycle, requests sent per cycle, ms per cycle)."""
    with GitHubServer(token=TOKEN, page_size=2) as srv:
        forge = connect(
            "github", url=srv.api_url, repository="acme/fleet", token=TOKEN, clock=SystemClock()
        )
        since = datetime.now(UTC) - timedelta(hours=1)
        prs = [
            forge.open_or_update_pull_request(
                PullRequestDraft(
                    branch=f"gitopsbot/c{i}",
                    base="main",
                    title=f"c{i}",
                    body="plan",
                    marker=f"c{i}/1",
                )
            )
            for i in range(5)
        ]
        for pr in prs[:3]:
            srv.merge(pr.number)
        open_pr = prs[4]

        def cycle() -> None:
            forge.find_pull_request(open_pr.branch, f"c{open_pr.number - 1}/1")
            forge.get_pull_request(open_pr.number)
            forge.list_merged_since(since)

        cycle()  # warm the ETag cache
        counted, sent = srv.counted_requests, forge.http.stats.requests
        start = time.perf_counter()
        for _ in range(CYCLES):
            cycle()
        elapsed = time.perf_counter() - start
        return (
            (srv.counted_requests - counted) / CYCLES,
            (forge.http.stats.requests - sent) // CYCLES,
            elapsed / CYCLES * 1000,
        )


class _Trivial(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(202)
        self.send_header("Content-Length", "0")
        self.end_headers()


def baseline_roundtrip(body: bytes) -> list[float]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Trivial)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host, port = server.server_address[:2]
    times = []
    with httpx.Client(base_url=f"http://{host!s}:{port}") as client:
        for _ in range(DELIVERIES):
            start = time.perf_counter()
            client.post("/", content=body)
            times.append(time.perf_counter() - start)
    server.shutdown()
    server.server_close()
    return times


def webhook_latency(body: bytes) -> list[float]:
    arrived = threading.Event()
    stamp: list[float] = []

    def nudge(event: WebhookEvent) -> None:
        stamp.append(time.perf_counter())
        arrived.set()

    headers = {"X-GitHub-Event": "push", "X-Hub-Signature-256": github_signature(SECRET, body)}
    times = []
    with WebhookReceiver({"github": SECRET}, nudge) as rx, httpx.Client(base_url=rx.url) as client:
        for _ in range(DELIVERIES):
            arrived.clear()
            stamp.clear()
            start = time.perf_counter()
            answer = client.post("/webhooks/github", content=body, headers=headers)
            if answer.status_code != 202 or not arrived.wait(5):
                raise SystemExit(f"delivery failed: {answer.status_code}")
            times.append(stamp[0] - start)
    return times


def _ms(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] * 1000 if q < 100 else max(values) * 1000


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None).parse_args(
        argv
    )
    counted, sent, cycle_ms = idle_poll()
    print(
        f"idle poll: {counted:.2f} counted requests/cycle (target 0); "
        f"{sent} conditional requests/cycle, all 304; {cycle_ms:.1f} ms/cycle"
    )
    payload = json.dumps({"ref": "refs/heads/main", "after": "a" * 40, "pad": "x" * 4000}).encode()
    base = baseline_roundtrip(payload)
    hook = webhook_latency(payload)
    b50, h50 = statistics.median(base) * 1000, statistics.median(hook) * 1000
    print(f"baseline loopback round trip: median {b50:.2f} ms, p95 {_ms(base, 95):.2f} ms")
    print(
        f"webhook delivery -> nudge:    median {h50:.2f} ms, p95 {_ms(hook, 95):.2f} ms, "
        f"max {_ms(hook, 100):.2f} ms (target < 100 ms)"
    )
    print(f"ratio webhook/baseline (median): {h50 / b50:.2f}x")
    ok = counted == 0 and _ms(hook, 95) < 100
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
