"""core.fleet.gates_file: the gates of a pool and the prometheus: block of rollout.yaml,
every wrong value a problem naming file, line and field."""

from __future__ import annotations

import textwrap

import pytest

from gitopsbot.core.fleet.fields import FieldReader
from gitopsbot.core.fleet.gates_file import (
    GATE_POOL_KEYS,
    GateSettings,
    read_gate_settings,
    read_gates,
    read_prometheus,
)
from gitopsbot.core.fleet.located_yaml import LocatedMap, read
from gitopsbot.core.rollouts.gates import AlertsGate, KubeGate, PrometheusEndpoint, PromQueryGate

FILE = "clusters/alpha/rollout.yaml"
EXAMPLE = """\
prometheus: {url: 'https://prom.example:9090', tokenEnv: PROM_TOKEN, timeout: 10s}
pools:
  gpu-a:
    gates:
      - name: error-rate
        prometheus: {query: 'sum(rate(http_errors_total[5m]))', below: 0.5}
      - name: no-alerts
        alerts: {matchers: {severity: critical}, includePending: false}
      - name: nodes-ready
        kubernetes: {check: no-pending-gpunodes}
      - name: apps-healthy
        kubernetes: {check: no-crashloop, selector: 'app=trainer', namespace: ml}
      - name: allocation
        kubernetes: {check: allocation-failures, max: 0}
      - name: latency
        prometheus: {query: 'p99', op: '>=', threshold: 3, onEmpty: pass}
      - name: throughput
        prometheus: {query: 'rate(x[1m])', above: 10}
    gateRetries: 3
    gateRetryInterval: 1m
"""


def parse(text: str) -> tuple[GateSettings, PrometheusEndpoint | None, list[str]]:
    doc, problems = read(textwrap.dedent(text), FILE)
    assert not problems, problems
    r = FieldReader(FILE)
    endpoint = read_prometheus(r, doc)
    pool = doc["pools"]["gpu-a"]
    settings = read_gate_settings(r, pool, "pools.gpu-a", endpoint)
    return settings, endpoint, [str(p) for p in r.problems]


def test_the_documented_example() -> None:
    settings, endpoint, problems = parse(EXAMPLE)
    assert problems == []
    assert endpoint == PrometheusEndpoint("https://prom.example:9090", "PROM_TOKEN", 10)
    assert settings.retries == 3 and settings.retry_interval_seconds == 60
    assert settings.gates == (
        PromQueryGate("error-rate", "sum(rate(http_errors_total[5m]))", "<", 0.5),
        AlertsGate("no-alerts", {"severity": "critical"}, False),
        KubeGate("nodes-ready", "no-pending-gpunodes"),
        KubeGate("apps-healthy", "no-crashloop", "app=trainer", "ml"),
        KubeGate("allocation", "allocation-failures", max=0),
        PromQueryGate("latency", "p99", ">=", 3.0, "pass"),
        PromQueryGate("throughput", "rate(x[1m])", ">", 10.0),
    )
    assert GATE_POOL_KEYS == ("gates", "gateRetries", "gateRetryInterval")


def test_defaults_without_gates_or_prometheus() -> None:
    settings, endpoint, problems = parse("pools:\n  gpu-a: {batchPercentage: 10}\n")
    assert (settings, endpoint, problems) == (GateSettings(), None, [])
    assert settings.retries == 3 and settings.retry_interval_seconds == 60


def pool(gates: str, extra: str = "") -> str:
    prom = "prometheus: {url: 'http://prom:9090'}\n"
    body = textwrap.indent(textwrap.dedent(gates), "      ")
    return f"{prom}pools:\n  gpu-a:\n    gates:\n{body}{extra}"


@pytest.mark.parametrize(
    ("gates", "expected"),
    [
        (
            "- name: a\n  prometheus: {query: q, below: 0.5, colour: red}\n",
            f"{FILE}:6:44: pools.gpu-a.gates[0].prometheus.colour: unknown key",
        ),
        (
            "- name: a\n  kubernetes: {check: no-pending-gpunodes}\n- name: b\n  graphite: {}\n",
            f"{FILE}:8:9: pools.gpu-a.gates[1].graphite: unknown key",
        ),
        (
            "- name: a\n  prometheus: {query: q, op: '=>', threshold: 1}\n",
            f"{FILE}:6:36: pools.gpu-a.gates[0].prometheus.op: '=>' is not one of <, <=, >, >=",
        ),
        (
            "- name: a\n  prometheus: {below: 1}\n",
            f"{FILE}:6:21: pools.gpu-a.gates[0].prometheus.query: required key is missing",
        ),
        (
            "- name: a\n  kubernetes: {check: no-pending-gpunodes}\n"
            "- name: b\n  prometheus: {query: q, op: '<', threshold: lots}\n",
            f"{FILE}:8:52: pools.gpu-a.gates[1].prometheus.threshold: expected a number",
        ),
        (
            "- name: a\n  prometheus: {query: q, below: '0.5'}\n",
            f"{FILE}:6:39: pools.gpu-a.gates[0].prometheus.below: expected a number, got string",
        ),
        (
            "- name: a\n  prometheus: {query: q, op: '<'}\n",
            f"{FILE}:6:21: pools.gpu-a.gates[0].prometheus.threshold: required key is missing",
        ),
        (
            "- name: a\n  prometheus: {query: q, below: 1, above: 0}\n",
            f"{FILE}:6:21: pools.gpu-a.gates[0].prometheus: more than one of below, above, op",
        ),
        (
            "- name: a\n  prometheus: {query: q}\n",
            f"{FILE}:6:21: pools.gpu-a.gates[0].prometheus: none of below, above, op",
        ),
        (
            "- name: same\n  kubernetes: {check: no-pending-gpunodes}\n"
            "- name: same\n  kubernetes: {check: no-crashloop}\n",
            f"{FILE}:7:15: pools.gpu-a.gates[1].name: gate name 'same' is used twice",
        ),
        (
            "- name: a\n  kubernetes: {check: no-pending-gpunode}\n",
            f"{FILE}:6:29: pools.gpu-a.gates[0].kubernetes.check: 'no-pending-gpunode' is not",
        ),
        (
            "- name: a\n  kubernetes: {check: no-pending-gpunodes, selector: 'app=x'}\n",
            f"{FILE}:6:50: pools.gpu-a.gates[0].kubernetes.selector: does not apply",
        ),
        (
            "- name: a\n  kubernetes: {check: allocation-failures, max: -1}\n",
            f"{FILE}:6:55: pools.gpu-a.gates[0].kubernetes.max: must not be negative",
        ),
        (
            "- name: a\n",
            f"{FILE}:5:9: pools.gpu-a.gates[0]: gate has no kind",
        ),
        (
            "- name: a\n  alerts: {}\n  kubernetes: {check: no-crashloop}\n",
            f"{FILE}:5:9: pools.gpu-a.gates[0]: gate has more than one kind (alerts, kubernetes)",
        ),
        (
            "- name: Bad_Name\n  alerts: {}\n",
            f"{FILE}:5:15: pools.gpu-a.gates[0].name: not a valid gate name",
        ),
        (
            "- prometheus: {query: q, below: 1}\n",
            f"{FILE}:5:9: pools.gpu-a.gates[0].name: required key is missing",
        ),
        (
            "- name: a\n  alerts: {matchers: {severity: 1}}\n",
            f"{FILE}:6:39: pools.gpu-a.gates[0].alerts.matchers.severity: a label value must be",
        ),
        (
            "- just-a-string\n",
            f"{FILE}:5:9: pools.gpu-a.gates[0]: expected a mapping, got string",
        ),
    ],
)
def test_bad_gates(gates: str, expected: str) -> None:
    _, _, problems = parse(pool(gates))
    assert any(p.startswith(expected) for p in problems), problems


def test_gates_not_a_list_and_bad_retry_settings() -> None:
    text = "pools:\n  gpu-a:\n    gates: {a: 1}\n    gateRetries: -1\n    gateRetryInterval: 60\n"
    settings, _, problems = parse(text)
    assert settings == GateSettings()
    assert problems[0] == f"{FILE}:3:12: pools.gpu-a.gates: expected a list, got mapping"
    assert problems[1].startswith(f"{FILE}:4:18: pools.gpu-a.gateRetries: -1 is outside 0..100")
    assert problems[2].startswith(
        f"{FILE}:5:24: pools.gpu-a.gateRetryInterval: expected a duration"
    )


def test_a_gate_reading_prometheus_needs_the_prometheus_block() -> None:
    text = """\
    pools:
      gpu-a:
        gates:
          - name: nodes-ready
            kubernetes: {check: no-pending-gpunodes}
          - name: error-rate
            prometheus: {query: q, below: 1}
          - name: no-alerts
            alerts: {}
          - name: allocation
            kubernetes: {check: allocation-failures}
    """
    settings, _, problems = parse(text)
    assert [g.name for g in settings.gates] == ["nodes-ready"]
    assert len(problems) == 3
    assert problems[0].startswith(
        f"{FILE}:6:9: pools.gpu-a.gates[1]: gate 'error-rate' reads Prometheus but"
        " rollout.yaml has no prometheus: block"
    )
    assert "gate 'no-alerts'" in problems[1] and "gate 'allocation'" in problems[2]


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        ("prometheus: {url: 'ftp://prom'}", "1:19: prometheus.url: not a valid Prometheus URL"),
        (
            "prometheus: {url: 'https://user:secret@prom'}",
            "1:19: prometheus.url: not a valid Prometheus URL",
        ),
        (
            "prometheus: {url: 'https://prom/api?token=secret'}",
            "1:19: prometheus.url: not a valid Prometheus URL",
        ),
        (
            "prometheus: {url: 'http://prom', tokenEnv: 'my-token'}",
            "prometheus.tokenEnv: not a valid",
        ),
        (
            "prometheus: {url: 'http://prom', timeout: 10}",
            "prometheus.timeout: expected a duration",
        ),
        ("prometheus: {url: 'http://prom', token: abc}", "1:34: prometheus.token: unknown key"),
        ("prometheus: {tokenEnv: X}", "prometheus.url: required key is missing"),
        ("prometheus: 'http://prom'", "1:13: prometheus: expected a mapping, got string"),
    ],
)
def test_bad_prometheus_block(block: str, expected: str) -> None:
    doc, _ = read(block + "\n", FILE)
    assert isinstance(doc, LocatedMap)
    r = FieldReader(FILE)
    read_prometheus(r, doc)
    assert any(expected in str(p) for p in r.problems), [str(p) for p in r.problems]
    assert all("secret" not in str(p) for p in r.problems)


def test_read_gates_alone_defaults_to_no_prometheus() -> None:
    doc, _ = read("gates:\n  - name: a\n    alerts: {}\n", FILE)
    r = FieldReader(FILE)
    assert read_gates(r, doc, "pools.gpu-a") == ()
    assert "gate 'a' reads Prometheus" in str(r.problems[0])
    endpoint = PrometheusEndpoint("http://prom")
    assert read_gates(FieldReader(FILE), doc, "pools.gpu-a", endpoint) == (AlertsGate("a"),)
