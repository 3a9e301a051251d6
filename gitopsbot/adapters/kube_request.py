"""The one way a request reaches the API server through the official client's ``ApiClient``.

The cluster adapter (kube.py), the Lease adapter (leases.py) and the simulator's store
(kube_store.py) each map failures into their own errors; how a request is built and sent is
the same for all three, so it lives here.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kubernetes import config as kube_config
from kubernetes.client import ApiClient, Configuration


def send(
    client: ApiClient,
    method: str,
    path: str,
    *,
    query: Iterable[tuple[str, str]] = (),
    body: Any = None,
    content_type: str | None = None,
    timeout: float | tuple[float, float],
    accept: str = "application/json",
) -> Any:
    """Send one request (bearer token from the client's configuration) and return the
    client's response, unread. ``ApiException`` and transport errors reach the caller."""
    headers = {"Accept": accept}
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


def configuration_from_kubeconfig(path: Path | str, context: str = "") -> Configuration:
    """The client configuration of one kubeconfig context (the current one when ""), with
    urllib3's own retries off: it would retry 429/503 with Retry-After on its own, sleeping
    where nobody sees it; each adapter decides about retries itself. The client's
    ``ConfigException``, ``OSError`` or ``ValueError`` reaches the caller to word."""
    configuration = Configuration()
    kube_config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=str(path),
        context=context or None,
        client_configuration=configuration,
        persist_config=False,
    )
    configuration.retries = False
    return configuration


KUBECONFIG_ERRORS = (kube_config.ConfigException, OSError, ValueError)


def resource_path(
    api_version: str, plural: str, namespaced: bool, namespace: str | None, name: str | None
) -> str:
    """The REST path of a collection (``name`` None) or of one object."""
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    if namespaced and namespace:
        base += f"/namespaces/{namespace}"
    base += f"/{plural}"
    return f"{base}/{name}" if name else base
