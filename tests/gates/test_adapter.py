"""adapters.prometheus over real HTTP against the Prometheus-compatible test server: each
answer Prometheus documents, each failure mapped to our errors, the token never shown."""

from __future__ import annotations

import logging
import math
import socket
from collections.abc import Iterator

import pytest

from gitopsbot.adapters.prometheus import HttpPrometheus, from_endpoint
from gitopsbot.core.rollouts.gates import PrometheusEndpoint, Sample
from gitopsbot.errors import PermanentError, SecretUnavailable, TransientError
from gitopsbot.ports.prometheus import PrometheusRefused, PrometheusUnavailable
from tests.gates.promserver import PromServer

CANARY = "tok-CANARY-5f2a9c1e77"
Q = "sum(rate(http_errors_total[5m]))"


@pytest.fixture
def server() -> Iterator[PromServer]:
    with PromServer(token=CANARY) as s:
        yield s


@pytest.fixture
def prom(server: PromServer) -> Iterator[HttpPrometheus]:
    client = HttpPrometheus(server.url, token=CANARY, timeout=2)
    yield client
    client.close()


def test_vector_sorted_with_labels_and_the_token_as_bearer(
    server: PromServer, prom: HttpPrometheus
) -> None:
    server.vector(Q, ({"pod": "b"}, 0.25), ({"pod": "a"}, 1))
    assert prom.query(Q) == (Sample({"pod": "a"}, 1.0), Sample({"pod": "b"}, 0.25))
    assert server.requests[-1].path == "/api/v1/query"
    assert server.requests[-1].query == Q
    assert server.requests[-1].authorization == f"Bearer {CANARY}"


def test_scalar_empty_and_special_values(server: PromServer, prom: HttpPrometheus) -> None:
    server.scalar("scalar(1)", 3.5)
    assert prom.query("scalar(1)") == (Sample({}, 3.5),)
    assert prom.query("absent_series") == ()
    server.vector("specials", ({"k": "nan"}, math.nan), ({"k": "pinf"}, math.inf))
    got = {s.labels["k"]: s.value for s in prom.query("specials")}
    assert math.isnan(got["nan"]) and got["pinf"] == math.inf


def test_matrix_is_refused(server: PromServer, prom: HttpPrometheus) -> None:
    server.matrix("up[5m]", {"job": "x"}, 1, 1)
    with pytest.raises(PrometheusRefused, match="matrix result"):
        prom.query("up[5m]")


def test_error_status_bad_data_is_permanent(server: PromServer, prom: HttpPrometheus) -> None:
    server.error("sum(", "bad_data", "parse error: unclosed left parenthesis")
    with pytest.raises(PrometheusRefused) as info:
        prom.query("sum(")
    assert isinstance(info.value, PermanentError)
    assert "HTTP 400: bad_data: parse error: unclosed left parenthesis" in str(info.value)
    assert "sum(" in str(info.value)


def test_error_status_timeout_is_transient(server: PromServer, prom: HttpPrometheus) -> None:
    server.error("heavy", "timeout", "query timed out in expression evaluation", status=503)
    with pytest.raises(PrometheusUnavailable, match="timeout: query timed out") as info:
        prom.query("heavy")
    assert isinstance(info.value, TransientError)


@pytest.mark.parametrize("status", [500, 502, 503])
def test_http_5xx_is_transient(server: PromServer, prom: HttpPrometheus, status: int) -> None:
    server.http("q", status, b"<html>bad gateway</html>")
    with pytest.raises(PrometheusUnavailable, match=f"HTTP {status}"):
        prom.query("q")


def test_garbage_with_200_is_refused(server: PromServer, prom: HttpPrometheus) -> None:
    server.http("q", 200, b"<html>login page</html>")
    with pytest.raises(PrometheusRefused, match="not a Prometheus API answer"):
        prom.query("q")


def test_wrong_token_is_permanent_and_never_shows_a_token(server: PromServer) -> None:
    wrong = "tok-WRONG-9999999999"
    with pytest.raises(PrometheusRefused, match="HTTP 401") as info:
        HttpPrometheus(server.url, token=wrong).query("q")
    assert wrong not in str(info.value)


def test_timeout_is_transient(server: PromServer) -> None:
    server.slow("slow", 2.0)
    with pytest.raises(PrometheusUnavailable, match=r"no answer in 0\.3s"):
        HttpPrometheus(server.url, token=CANARY, timeout=0.3).query("slow")


def test_connection_refused_is_transient() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(PrometheusUnavailable, match="ConnectError"):
        HttpPrometheus(f"http://127.0.0.1:{port}", token=CANARY, timeout=1).query("up")


def test_alerts_firing_and_pending(server: PromServer, prom: HttpPrometheus) -> None:
    server.alert({"alertname": "GPUDown", "severity": "critical"})
    server.alert({"alertname": "Soon", "severity": "warning"}, state="pending")
    got = prom.alerts()
    assert [(a.labels["alertname"], a.state) for a in got] == [
        ("GPUDown", "firing"),
        ("Soon", "pending"),
    ]
    assert got[0].active_at != "" and got[0].value == "1"
    assert server.requests[-1].path == "/api/v1/alerts"


def test_token_canary_never_in_errors_or_logs(
    server: PromServer, prom: HttpPrometheus, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    # A proxy that echoes the Authorization header into its error text.
    server.error("echo", "bad_data", f"header was Bearer {CANARY}")
    server.http("boom", 500, f"Authorization: Bearer {CANARY}".encode())
    server.slow("slow", 2)
    messages = []
    for query, client in (
        ("echo", prom),
        ("boom", prom),
        ("slow", HttpPrometheus(server.url, token=CANARY, timeout=0.2)),
    ):
        with pytest.raises(Exception) as info:
            client.query(query)
        messages.append(str(info.value))
    assert "header was Bearer ***" in messages[0]
    for text in [*messages, caplog.text]:
        assert CANARY not in text


def test_from_endpoint_reads_the_token_variable(server: PromServer) -> None:
    endpoint = PrometheusEndpoint(server.url, "PROM_TOKEN", 5)
    client = from_endpoint(endpoint, {"PROM_TOKEN": CANARY})
    assert client.query("nothing") == ()
    with pytest.raises(SecretUnavailable, match="PROM_TOKEN is not set") as info:
        from_endpoint(endpoint, {})
    assert CANARY not in str(info.value)
    # No tokenEnv: no Authorization header (this server then says 401).
    with pytest.raises(PrometheusRefused, match="HTTP 401"):
        from_endpoint(PrometheusEndpoint(server.url), {"PROM_TOKEN": CANARY}).query("q")
    assert server.requests[-1].authorization == ""
