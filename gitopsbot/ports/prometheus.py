"""A cluster's Prometheus as rollout gates read it: one instant query, the active alerts.

Implemented by ``gitopsbot.adapters.prometheus.HttpPrometheus`` (the HTTP API, httpx); the
sandbox's ``gitopsbot.sandbox.prometheus.PromServer`` serves the same API for tests.

Errors (``PrometheusError``): ``PrometheusUnavailable`` (transient: connection refused,
timeout, HTTP 5xx or 429, Prometheus's own ``timeout``/``unavailable``/``internal`` errors),
``PrometheusRefused`` (permanent: HTTP 4xx, a query Prometheus refuses as ``bad_data``/
``execution``, a range vector or string where an instant vector or scalar was wanted, an
answer that is not Prometheus's JSON). Messages name the URL path and the query, never the
bearer token.
"""

from __future__ import annotations

from typing import Protocol

from gitopsbot.core.rollouts.gates import Alert, Sample
from gitopsbot.errors import GitOpsBotError, PermanentError, TransientError


class PrometheusError(GitOpsBotError):
    """Family: a cluster's Prometheus HTTP API."""


class PrometheusUnavailable(PrometheusError, TransientError):
    """Prometheus could not answer now (transport, timeout, 5xx, 429, overloaded)."""


class PrometheusRefused(PrometheusError, PermanentError):
    """Prometheus (or what stands at its URL) refused the request or answered nonsense."""


class Prometheus(Protocol):
    def query(self, expr: str) -> tuple[Sample, ...]:
        """``GET /api/v1/query``: an instant vector's samples (sorted by labels), or the
        scalar as one sample without labels. Empty when the vector is."""
        ...

    def alerts(self) -> tuple[Alert, ...]:
        """``GET /api/v1/alerts``: every firing and pending alert."""
        ...
