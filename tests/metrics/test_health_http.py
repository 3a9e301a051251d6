"""``/healthz`` and ``/readyz`` over real HTTP (adapters/metrics_server.py, bot/health.py,
core/replicas/health.py; docs/metrics.md "Health").

Aspects: before the loop starts neither answers 200; once it ticks ``/healthz`` is 200 but
``/readyz`` waits for the first pass without error (a failed pass keeps it 503 and says so);
a heartbeat that stops ticking makes ``/healthz`` 503 and a good pass grown old makes
``/readyz`` 503; a stopped loop is neither alive nor ready; replicas that share the fleet are
ready while they wait for a Lease, not once the lease keeper stopped; ``/metrics`` answers in
the Prometheus text format; unknown paths are 404.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gitopsbot.adapters.metrics import BotMetrics
from gitopsbot.adapters.metrics_server import MetricsServer
from gitopsbot.bot.announcer import Announcer
from gitopsbot.bot.health import HealthWatch
from gitopsbot.bot.reconciler import PassResult
from gitopsbot.bot.scheduler import Scheduler
from gitopsbot.core.replicas.health import Verdict
from gitopsbot.errors import GitError

pytestmark = pytest.mark.timeout(60)


@dataclass
class Clock:
    """Real time, plus a jump for the monotonic clock (the heartbeat's and the passes')."""

    jumped: float = 0.0

    def now(self) -> datetime:
        return datetime.now(UTC)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def monotonic(self) -> float:
        return time.monotonic() + self.jumped


class Passes:
    """A reconcile that tells the announcer how its pass ended, as the reconciler does."""

    def __init__(self, announcer: Announcer) -> None:
        self.announcer = announcer
        self.fail = True
        self.count = 0

    def __call__(self, cluster: str) -> PassResult:
        self.count += 1
        if self.fail:
            self.announcer.pass_finished(
                cluster, action="", detail="", error="git fetch: refused", seconds=0.01
            )
            raise GitError("git fetch: refused")
        self.announcer.pass_finished(cluster, action="idle", detail="", error="", seconds=0.01)
        return PassResult(cluster, "idle")


@dataclass
class Served:
    url: str
    clock: Clock
    scheduler: Scheduler
    passes: Passes


def _serve(
    leases_running: Callable[[], bool] | None = None, holding: Callable[[], int] | None = None
) -> Iterator[Served]:
    clock = Clock()
    metrics = BotMetrics(clock)
    announcer = Announcer()
    passes = Passes(announcer)
    scheduler = Scheduler(
        reconcile=passes, clock=clock, interval_seconds=3600, jitter_seconds=0,
        workers=1, heartbeat_seconds=0.2,
    )  # fmt: skip
    health = HealthWatch(
        scheduler, clock, poll_interval_seconds=30, leases_running=leases_running, holding=holding
    )
    announcer.pass_listeners.extend([metrics, health])
    with MetricsServer(metrics.registry, health.alive, health.ready) as server:
        try:
            yield Served(server.url, clock, scheduler, passes)
        finally:
            scheduler.shutdown(wait=True, timeout=5)


@pytest.fixture
def served() -> Iterator[Served]:
    yield from _serve()


def get(served: Served, path: str) -> tuple[int, str]:
    r = httpx.get(served.url + path, timeout=5)
    return r.status_code, r.text.strip()


def until(served: Served, path: str, status: int, timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        code, text = get(served, path)
        if code == status:
            return text
        assert time.monotonic() < deadline, f"{path}: still {code} {text!r}"
        time.sleep(0.05)


def test_ready_only_after_the_first_good_pass_and_not_once_stopped(served: Served) -> None:
    assert get(served, "/healthz") == (
        503,
        "the reconcile loop is not running (not started, or stopping)",
    )
    assert get(served, "/readyz")[0] == 503

    served.scheduler.set_clusters(["lab"])
    served.scheduler.start()  # its first pass fails: Git refuses
    assert until(served, "/healthz", 200) == "ok"
    deadline = time.monotonic() + 10
    while served.passes.count == 0:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert get(served, "/readyz") == (
        503,
        "the fleet repository has not answered: the last pass failed",
    )

    served.passes.fail = False
    served.scheduler.nudge("lab")
    assert until(served, "/readyz", 200) == "ok"

    # The good pass grows old (the poll interval is 30 s: the limit is 90 s).
    served.clock.jumped += 120
    until(served, "/healthz", 200)  # the next heartbeat: the loop itself is fine
    code, text = get(served, "/readyz")
    assert code == 503 and text.startswith("no pass ended without error for 12"), text
    served.scheduler.nudge("lab")
    until(served, "/readyz", 200)

    served.scheduler.shutdown(wait=True, timeout=5)
    assert get(served, "/healthz")[0] == 503
    assert get(served, "/readyz") == (
        503,
        "the reconcile loop is not running (not started, or stopping)",
    )


def test_a_heartbeat_that_stops_ticking_is_not_alive(served: Served) -> None:
    served.scheduler.start()
    until(served, "/healthz", 200)
    served.scheduler._scheduler.pause_job("heartbeat")  # the loop stops dispatching it
    served.clock.jumped += 60
    code, text = get(served, "/healthz")
    assert code == 503 and text.startswith("the reconcile loop last ticked 60s ago"), text
    served.scheduler._scheduler.resume_job("heartbeat")
    assert until(served, "/healthz", 200) == "ok"


def test_replicas_are_ready_while_they_wait_for_a_lease() -> None:
    state = {"running": True, "holding": 0}
    gen = _serve(lambda: state["running"], lambda: state["holding"])
    served = next(gen)
    try:
        served.scheduler.start()
        assert until(served, "/readyz", 200) == "ok: waiting for cluster leases"
        state["holding"] = 1  # a Lease taken: now its passes must answer
        assert get(served, "/readyz") == (
            503,
            "the fleet repository has not answered: no pass has finished yet",
        )
        state.update(running=False, holding=0)
        assert get(served, "/readyz") == (503, "the lease keeper is not running")
    finally:
        gen.close()


def test_metrics_in_the_text_format_and_unknown_paths(served: Served) -> None:
    served.passes.fail = False
    served.scheduler.set_clusters(["lab"])
    served.scheduler.start()
    until(served, "/readyz", 200)
    r = httpx.get(served.url + "/metrics", timeout=5)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    names = {f.name for f in text_string_to_metric_families(r.text)}
    assert "gitopsbot_reconcile_last_success_timestamp_seconds" in names
    assert get(served, "/nope")[0] == 404


def test_metrics_answer_with_more_than_1024_descriptors_open() -> None:
    """#29: a replica holding 1,000 clusters holds thousands of sockets; waitress's default
    select() loop stops past descriptor 1,024, and /metrics with it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if min(soft, hard) < 1200:
        pytest.skip(f"needs 1,200 descriptors, the limit is {soft}")
    pipes = [os.pipe() for _ in range(560)]  # the server's sockets come after these
    try:
        ok = Verdict(True, "ok")
        metrics = BotMetrics(Clock())
        with MetricsServer(metrics.registry, lambda: ok, lambda: ok) as server:
            answer = httpx.get(f"{server.url}/metrics", timeout=10)
            assert answer.status_code == 200, answer.text
            assert "gitopsbot_" in answer.text
    finally:
        for r, w in pipes:
            os.close(r)
            os.close(w)
