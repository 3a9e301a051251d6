"""Gates in ``clusters/<name>/rollout.yaml``: a pool's ``gates``, ``gateRetries`` and
``gateRetryInterval``, and the cluster's top-level ``prometheus:`` endpoint::

    prometheus: {url: https://prom.example:9090, tokenEnv: PROM_TOKEN, timeout: 10s}
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
        gateRetries: 3
        gateRetryInterval: 1m

A ``prometheus:`` gate takes exactly one of ``below: x`` (``<``), ``above: x`` (``>``) or
``op:`` + ``threshold:``, and ``onEmpty`` (inconclusive, pass, fail). Every wrong value is a
located problem on the ``FieldReader`` (``pools.gpu-a.gates[1].prometheus.threshold``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gitopsbot.core.fleet.fields import DNS_LABEL, ENV_VAR, FieldReader, join, kind_of
from gitopsbot.core.fleet.gate_specs import (
    GATE_RETRY_DEFAULT,
    GATE_RETRY_INTERVAL_DEFAULT,
    KUBE_CHECKS,
    ON_EMPTY,
    OPS,
    PROMETHEUS_TIMEOUT_DEFAULT,
    AlertsGate,
    Gate,
    KubeGate,
    PrometheusEndpoint,
    PromQueryGate,
    needs_prometheus,
)
from gitopsbot.core.fleet.located_yaml import LocatedMap

# The keys this file reads: the integrator adds them to rollout_file's known keys.
GATE_POOL_KEYS = ("gates", "gateRetries", "gateRetryInterval")
PROMETHEUS_KEY = "prometheus"

_KINDS = ("prometheus", "alerts", "kubernetes")
_GATE_KEYS = ("name", *_KINDS)
_PROM_KEYS = ("query", "below", "above", "op", "threshold", "onEmpty")
_ALERT_KEYS = ("matchers", "includePending")
_KUBE_KEYS = ("check", "selector", "namespace", "max")
_ENDPOINT_KEYS = ("url", "tokenEnv", "timeout")
# http(s), a host, a path; no user:password@ and no ?query (a credential, a token in a
# query string, must not be committed to Git: tokenEnv carries it).
_PROM_URL = re.compile(r"^https?://[^\s/@?#]+(/[^\s?#@]*)?$")
_SELECTOR = re.compile(r"^[A-Za-z0-9_./\-=!,() ]*$")


@dataclass(frozen=True, slots=True)
class GateSettings:
    gates: tuple[Gate, ...] = ()
    retries: int = GATE_RETRY_DEFAULT
    retry_interval_seconds: int = GATE_RETRY_INTERVAL_DEFAULT


def _number(r: FieldReader, node: LocatedMap, key: str, fld: str) -> float | None:
    value = node.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        hint = "write it without quotes" if isinstance(value, str) else ""
        r.add(
            r.value_at(node, key), join(fld, key), f"expected a number, got {kind_of(value)}", hint
        )
        return None
    return float(value)


def _prom_gate(r: FieldReader, name: str, node: LocatedMap, fld: str) -> PromQueryGate | None:
    r.known_keys(node, fld, _PROM_KEYS)
    query = r.string(node, "query", fld, required=True)
    given = [k for k in ("below", "above", "op") if k in node]
    hint = "give one of below: <number>, above: <number>, or op: and threshold:"
    if len(given) != 1:
        what = "none of" if not given else "more than one of"
        r.add(r.node_at(node), fld, f"{what} below, above, op is given", hint)
        return None
    if "threshold" in node and given != ["op"]:
        r.add(r.key_at(node, "threshold"), join(fld, "threshold"), "only goes with op:", hint)
        return None
    op: str
    if given == ["op"]:
        op = r.choice(node, "op", fld, "", OPS, required=True)
        if "threshold" not in node:
            r.add(r.node_at(node), join(fld, "threshold"), "required key is missing")
            return None
        threshold = _number(r, node, "threshold", fld)
    else:
        op = "<" if given == ["below"] else ">"
        threshold = _number(r, node, given[0], fld)
    on_empty = r.choice(node, "onEmpty", fld, "inconclusive", ON_EMPTY)
    if not query or not op or threshold is None:
        return None
    return PromQueryGate(name, query, op, threshold, on_empty)  # type: ignore[arg-type]


def _alerts_gate(r: FieldReader, name: str, node: LocatedMap, fld: str) -> AlertsGate:
    r.known_keys(node, fld, _ALERT_KEYS)
    return AlertsGate(
        name, r.labels(node, "matchers", fld), r.boolean(node, "includePending", fld, False)
    )


def _kube_gate(r: FieldReader, name: str, node: LocatedMap, fld: str) -> KubeGate | None:
    r.known_keys(node, fld, _KUBE_KEYS)
    check = r.choice(node, "check", fld, "", KUBE_CHECKS, required=True)
    selector = r.string(node, "selector", fld, pattern=_SELECTOR, what="label selector")
    namespace = r.string(node, "namespace", fld, pattern=DNS_LABEL, what="namespace") or None
    maximum = 0.0
    if "max" in node:
        got = _number(r, node, "max", fld)
        if got is not None and got < 0:
            r.add(r.value_at(node, "max"), join(fld, "max"), "must not be negative")
        maximum = got if got is not None and got >= 0 else 0.0
    # Keys that mean nothing for the chosen check are refused, not silently ignored.
    used = {"no-crashloop": ("selector", "namespace"), "allocation-failures": ("max",)}
    for key in ("selector", "namespace", "max"):
        if check and key in node and key not in used.get(check, ()):
            r.add(r.key_at(node, key), join(fld, key), f"does not apply to check '{check}'")
    if not check:
        return None
    return KubeGate(name, check, selector, namespace, maximum)  # type: ignore[arg-type]


def _gate(r: FieldReader, node: Any, fld: str, at: tuple[int, int]) -> Gate | None:
    m = r.mapping(node, fld, at, _GATE_KEYS)
    if m is None:
        return None
    name = r.string(
        m, "name", fld, required=True, pattern=DNS_LABEL, what="gate name (a-z, 0-9, -)"
    )
    kinds = [k for k in _KINDS if k in m]
    if len(kinds) != 1:
        what = "no kind" if not kinds else f"more than one kind ({', '.join(kinds)})"
        r.add(at, fld, f"gate has {what}", f"give exactly one of {', '.join(_KINDS)}")
        return None
    kind = kinds[0]
    body = r.mapping(m[kind], join(fld, kind), r.value_at(m, kind))
    if body is None or not name:
        return None
    sub = join(fld, kind)
    if kind == "prometheus":
        return _prom_gate(r, name, body, sub)
    if kind == "alerts":
        return _alerts_gate(r, name, body, sub)
    return _kube_gate(r, name, body, sub)


def read_gates(
    r: FieldReader, node: LocatedMap, fld: str, prometheus: PrometheusEndpoint | None = None
) -> tuple[Gate, ...]:
    """The ``gates`` list of a pool mapping ``node`` (``fld``: ``pools.<pool>``). A gate
    that reads Prometheus needs the cluster's ``prometheus:`` block: pass what
    ``read_prometheus`` gave (None: such a gate is a problem naming it)."""
    key = join(fld, "gates")
    gates: list[Gate] = []
    seen: dict[str, int] = {}
    for i, (item, at) in enumerate(r.entries(node, "gates", fld)):
        gfld = f"{key}[{i}]"
        gate = _gate(r, item, gfld, at)
        if gate is None:
            continue
        if gate.name in seen:
            r.add(
                r.value_at(item, "name"),
                join(gfld, "name"),
                f"gate name '{gate.name}' is used twice (also {key}[{seen[gate.name]}])",
            )
            continue
        seen[gate.name] = i
        if needs_prometheus(gate) and prometheus is None:
            r.add(
                at,
                gfld,
                f"gate '{gate.name}' reads Prometheus but rollout.yaml has no prometheus: block",
                "add prometheus: {url: ...} at the top of rollout.yaml",
            )
            continue
        gates.append(gate)
    return tuple(gates)


def read_gate_settings(
    r: FieldReader, node: LocatedMap, fld: str, prometheus: PrometheusEndpoint | None = None
) -> GateSettings:
    """A pool's ``gates``, ``gateRetries`` (0..100, default 3) and ``gateRetryInterval``
    (a duration, default 60s)."""
    return GateSettings(
        gates=read_gates(r, node, fld, prometheus),
        retries=r.integer(node, "gateRetries", fld, GATE_RETRY_DEFAULT, low=0, high=100),
        retry_interval_seconds=r.duration(
            node, "gateRetryInterval", fld, GATE_RETRY_INTERVAL_DEFAULT, minimum=1
        ),
    )


def read_prometheus(r: FieldReader, top: LocatedMap, prefix: str = "") -> PrometheusEndpoint | None:
    """The ``prometheus:`` block of the rollout.yaml mapping ``top``; None when absent."""
    if top.get(PROMETHEUS_KEY) is None:
        return None
    fld = join(prefix, PROMETHEUS_KEY)
    m = r.mapping(top[PROMETHEUS_KEY], fld, r.value_at(top, PROMETHEUS_KEY), _ENDPOINT_KEYS)
    if m is None:
        return None
    url = r.string(
        m,
        "url",
        fld,
        required=True,
        pattern=_PROM_URL,
        what="Prometheus URL (http(s)://host[:port][/path], no credentials)",
    )
    token_env = r.string(m, "tokenEnv", fld, pattern=ENV_VAR, what="environment variable name")
    timeout = r.duration(m, "timeout", fld, PROMETHEUS_TIMEOUT_DEFAULT, minimum=1)
    if not url:
        return None
    return PrometheusEndpoint(url.rstrip("/"), token_env or None, timeout)


__all__ = [
    "GATE_POOL_KEYS",
    "PROMETHEUS_KEY",
    "GateSettings",
    "read_gate_settings",
    "read_gates",
    "read_prometheus",
]
