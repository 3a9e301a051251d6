"""The one way a request reaches the API server through the official client's ``ApiClient``.

The cluster adapter (kube.py), the Lease adapter (leases.py) and the simulator's store
(kube_store.py) each map failures into their own errors; how a request is built and sent is
the same for all three, so it lives here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kubernetes.client import ApiClient


def send(
    client: ApiClient,
    method: str,
    path: str,
    *,
    query: Iterable[tuple[str, str]] = (),
    body: Any = None,
    content_type: str | None = None,
    timeout: float | tuple[float, float],
) -> Any:
    """Send one request (bearer token from the client's configuration) and return the
    client's response, unread. ``ApiException`` and transport errors reach the caller."""
    headers = {"Accept": "application/json"}
    if content_type:
        headers["Content-Type"] = content_type
    _, url, all_headers, serialized, _ = client.param_serialize(
        method=method,
        resource_path=path,
        query_params=list(query),
        header_params=headers,
        body=body,
        auth_settings=["BearerToken"],
    )
    return client.call_api(
        method, url, header_params=all_headers, body=serialized, _request_timeout=timeout
    )
