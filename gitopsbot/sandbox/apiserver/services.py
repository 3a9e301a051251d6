"""Service admission: cluster IP allocation and the defaults a real API server fills in.

A real API server gives every non-headless, non-ExternalName Service an address from the
service CIDR (``10.96.0.0/12`` in kubeadm clusters; ``10.96.0.1`` is the ``kubernetes``
Service) and keeps it for the Service's lifetime. helm 3's ``--wait`` treats a Service without
``spec.clusterIP`` as not ready, so the emulator must allocate one too.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Collection
from typing import Any

from gitopsbot.sandbox.apiserver.errors import Invalid

SERVICE_CIDR = ipaddress.IPv4Network("10.96.0.0/12")
_RESERVED = 2  # network address and the kubernetes Service's 10.96.0.1

Obj = dict[str, Any]


def _preferred_offset(namespace: str, name: str) -> int:
    # Derived from the Service's name so the same sandbox setup gets the same addresses
    # (readable in tests and docs); collisions probe onward.
    digest = hashlib.sha256(f"{namespace}/{name}".encode()).digest()
    span = SERVICE_CIDR.num_addresses - _RESERVED - 1  # minus the broadcast address
    return _RESERVED + int.from_bytes(digest[:8], "big") % span


def allocate_cluster_ip(namespace: str, name: str, in_use: Collection[str]) -> str:
    """A free address in SERVICE_CIDR, preferring one derived from namespace/name."""
    span = SERVICE_CIDR.num_addresses - _RESERVED - 1
    start = _preferred_offset(namespace, name) - _RESERVED
    base = int(SERVICE_CIDR.network_address)
    for step in range(span):
        ip = str(ipaddress.IPv4Address(base + _RESERVED + (start + step) % span))
        if ip not in in_use:
            return ip
    raise Invalid("spec.clusterIP: Internal error: the service IP range is full")


def admit_service(new: Obj, old: Obj | None, *, in_use: Collection[str]) -> None:
    """Default and allocate in place; ``in_use`` holds the other Services' cluster IPs."""
    meta = new.get("metadata") or {}
    spec = new.setdefault("spec", {})
    if not isinstance(spec, dict):
        return  # schema validation reports it
    svc_type = spec.setdefault("type", "ClusterIP") or "ClusterIP"
    spec["type"] = svc_type
    spec.setdefault("sessionAffinity", "None")
    for port in spec.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
            if "port" in port:
                port.setdefault("targetPort", port["port"])
    if svc_type == "ExternalName":
        spec.pop("clusterIP", None)
        spec.pop("clusterIPs", None)
        return
    spec.setdefault("internalTrafficPolicy", "Cluster")
    old_ip = str(((old or {}).get("spec") or {}).get("clusterIP") or "")
    ips = spec.get("clusterIPs") or []
    requested = str(spec.get("clusterIP") or (ips[0] if ips else "") or "")
    if old_ip:
        if requested and requested != old_ip:
            raise Invalid(
                f'Service "{meta.get("name")}" is invalid: spec.clusterIPs[0]: Invalid value: '
                f'["{requested}"]: may not change once set (field is immutable)'
            )
        ip = old_ip
    elif requested == "None":
        ip = "None"
    elif requested:
        try:
            addr = ipaddress.ip_address(requested)
        except ValueError:
            raise Invalid(
                f'Service "{meta.get("name")}" is invalid: spec.clusterIPs[0]: Invalid value: '
                f'"{requested}": must be a valid IP address or "None"'
            ) from None
        if addr not in SERVICE_CIDR:
            raise Invalid(
                f'Service "{meta.get("name")}" is invalid: spec.clusterIPs[0]: Invalid value: '
                f'"{requested}": provided IP is not in the valid range ({SERVICE_CIDR})'
            )
        if requested in in_use:
            raise Invalid(
                f'Service "{meta.get("name")}" is invalid: spec.clusterIPs[0]: Invalid value: '
                f'["{requested}"]: failed to allocate IP {requested}: provided IP is already '
                "allocated"
            )
        ip = requested
    else:
        ip = allocate_cluster_ip(str(meta.get("namespace") or ""), str(meta.get("name")), in_use)
    spec["clusterIP"] = ip
    spec["clusterIPs"] = [ip]
    if ip != "None":
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
