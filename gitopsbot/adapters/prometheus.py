"""``ports.prometheus.Prometheus`` over Prometheus's HTTP API with httpx.

Reads the documented JSON envelope (``status`` success|error, ``data``, ``errorType``,
``error``): ``/api/v1/query`` with ``resultType`` vector or scalar (matrix and string are
refused: a gate compares instant values), ``/api/v1/alerts``. The bearer token goes only in
the Authorization header; every message is built from the path, status and Prometheus's own
error text, redacted of the token all the same (a proxy may echo a header back).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from typing import Any

import httpx

from gitopsbot.adapters.redaction import redact_secrets
from gitopsbot.core.rollouts.gates import Alert, PrometheusEndpoint, Sample
from gitopsbot.errors import SecretUnavailable
from gitopsbot.ports.prometheus import Prometheus, PrometheusRefused, PrometheusUnavailable

log = logging.getLogger(__name__)

# Prometheus errorType values that are about the server's state, not the query.
_TRANSIENT_TYPES = frozenset({"timeout", "canceled", "unavailable", "internal"})
_MAX_ERROR_TEXT = 300


def from_endpoint(
    endpoint: PrometheusEndpoint, environ: Mapping[str, str], *, client: httpx.Client | None = None
) -> HttpPrometheus:
    """The adapter for a cluster's ``prometheus:`` block; the token read from the variable
    ``tokenEnv`` names (SecretUnavailable, naming the variable, when it is unset)."""
    token = None
    if endpoint.token_env:
        token = environ.get(endpoint.token_env)
        if not token:
            raise SecretUnavailable(
                f"prometheus.tokenEnv: environment variable {endpoint.token_env} is not set"
            )
    return HttpPrometheus(
        endpoint.url, token=token, timeout=endpoint.timeout_seconds, client=client
    )


def _float(text: Any) -> float:
    # Prometheus writes sample values as strings: "1", "NaN", "+Inf", "-Inf".
    if isinstance(text, str | int | float) and not isinstance(text, bool):
        try:
            return float(text)
        except ValueError:
            pass
    raise ValueError("a sample value is not a number")


def _labels(raw: Any) -> dict[str, str]:
    if not isinstance(raw, dict):
        raise ValueError("labels are not an object")
    return {str(k): str(v) for k, v in raw.items()}


class HttpPrometheus(Prometheus):
    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        timeout: float = 10.0,
        client: httpx.Client | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self._token = token
        self._timeout = timeout
        self._client = client or httpx.Client(timeout=timeout, follow_redirects=False)

    def close(self) -> None:
        self._client.close()

    def _clean(self, text: str) -> str:
        text = text if len(text) <= _MAX_ERROR_TEXT else text[:_MAX_ERROR_TEXT] + "…"
        return redact_secrets(text, [self._token]) if self._token else text

    def _get(self, path: str, params: Mapping[str, str], what: str) -> Any:
        headers = {"Accept": "application/json"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        where = f"prometheus {self.url}{path} ({what})"
        try:
            resp = self._client.get(
                f"{self.url}{path}", params=dict(params), headers=headers, timeout=self._timeout
            )
        except httpx.TimeoutException:
            raise PrometheusUnavailable(
                self._clean(f"{where}: no answer in {self._timeout:g}s")
            ) from None
        except httpx.HTTPError as exc:
            # The exception text names the URL, never headers; cleaned all the same.
            raise PrometheusUnavailable(
                self._clean(f"{where}: {type(exc).__name__}: {exc}")
            ) from None
        body: Any = None
        try:
            body = resp.json()
        except (json.JSONDecodeError, UnicodeDecodeError, ValueError):
            body = None
        envelope = body if isinstance(body, dict) else {}
        if envelope.get("status") == "error" or resp.status_code >= 400:
            etype = str(envelope.get("errorType") or "")
            etext = str(envelope.get("error") or "") or resp.reason_phrase
            msg = self._clean(
                f"{where}: HTTP {resp.status_code}: {etype + ': ' if etype else ''}{etext}"
            )
            retry_after = _retry_after(resp.headers.get("Retry-After"))
            if resp.status_code >= 500 or resp.status_code == 429 or etype in _TRANSIENT_TYPES:
                raise PrometheusUnavailable(msg, retry_after=retry_after)
            raise PrometheusRefused(msg)
        if envelope.get("status") != "success" or "data" not in envelope:
            raise PrometheusRefused(
                self._clean(f"{where}: HTTP {resp.status_code}: not a Prometheus API answer")
            )
        for warning in envelope.get("warnings") or []:
            log.warning("%s: warning: %s", where, self._clean(str(warning)))
        return envelope["data"]

    def query(self, expr: str) -> tuple[Sample, ...]:
        data = self._get("/api/v1/query", {"query": expr}, f"query {expr!r}")
        where = f"prometheus {self.url}/api/v1/query (query {expr!r})"
        kind = data.get("resultType") if isinstance(data, dict) else None
        result = data.get("result") if isinstance(data, dict) else None
        try:
            if kind == "scalar" and isinstance(result, list) and len(result) == 2:
                return (Sample({}, _float(result[1])),)
            if kind == "vector" and isinstance(result, list):
                samples = [
                    Sample(_labels(item.get("metric", {})), _float(item["value"][1]))
                    for item in result
                ]
                return tuple(sorted(samples, key=lambda s: sorted(s.labels.items())))
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise PrometheusRefused(self._clean(f"{where}: malformed {kind}: {exc}")) from None
        if kind in ("matrix", "string"):
            raise PrometheusRefused(
                self._clean(f"{where}: a {kind} result; a gate needs an instant vector or scalar")
            )
        raise PrometheusRefused(self._clean(f"{where}: unknown resultType {kind!r}"))

    def alerts(self) -> tuple[Alert, ...]:
        data = self._get("/api/v1/alerts", {}, "alerts")
        raw = data.get("alerts") if isinstance(data, dict) else None
        if not isinstance(raw, list):
            raise PrometheusRefused(
                self._clean(f"prometheus {self.url}/api/v1/alerts: no alerts list in the answer")
            )
        out: list[Alert] = []
        try:
            for item in raw:
                out.append(
                    Alert(
                        _labels(item.get("labels", {})),
                        str(item.get("state", "")),
                        str(item.get("activeAt", "")),
                        str(item.get("value", "")),
                    )
                )
        except (ValueError, AttributeError) as exc:
            raise PrometheusRefused(
                self._clean(f"prometheus {self.url}/api/v1/alerts: malformed alert: {exc}")
            ) from None
        return tuple(out)


def _retry_after(value: str | None) -> float | None:
    try:
        seconds = float(value) if value else None
    except ValueError:
        return None
    return seconds if seconds is not None and math.isfinite(seconds) and seconds >= 0 else None
