"""Discovery documents: legacy (APIVersions, APIGroupList, APIResourceList) and aggregated
(APIGroupDiscoveryList v2 and v2beta1, chosen by the Accept header as client-go does)."""

from __future__ import annotations

from typing import Any

from gitopsbot.sandbox.apiserver.resources import VERBS, Registry, ResourceType

Obj = dict[str, Any]

VERSION: Obj = {
    "major": "1",
    "minor": "33",
    "gitVersion": "v1.33.0",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2025-04-23T00:00:00Z",
    "goVersion": "go1.24.2",
    "compiler": "gc",
    "platform": "linux/amd64",
}
API_VERSIONS: Obj = {
    "kind": "APIVersions",
    "versions": ["v1"],
    "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}],
}
OPENAPI_V2_PROTOBUF = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
SUB_VERBS = ["get", "patch", "update"]


def wants_aggregated(accept: str) -> str | None:
    """'v2' or 'v2beta1' if the client takes aggregated discovery (first offer wins)."""
    for offer in accept.split(","):
        if "as=APIGroupDiscoveryList" in offer:
            if "v=v2beta1" in offer:
                return "v2beta1"
            if "v=v2" in offer:
                return "v2"
    return None


def aggregated_content_type(version: str) -> str:
    return f"application/json;g=apidiscovery.k8s.io;v={version};as=APIGroupDiscoveryList"


def _groups(reg: Registry) -> dict[str, list[ResourceType]]:
    out: dict[str, list[ResourceType]] = {}
    for rt in sorted(reg.types(), key=lambda r: (r.group, r.plural)):
        out.setdefault(rt.group, []).append(rt)
    return out


def _versions(rts: list[ResourceType]) -> list[str]:
    seen: list[str] = []
    for rt in rts:
        for v in rt.versions:
            if v not in seen:
                seen.append(v)
    return seen


def _sub_kind(rt: ResourceType, sub: str) -> tuple[str, str, str]:
    if sub == "scale":
        return "autoscaling", "v1", "Scale"
    return rt.group, "", rt.kind


def _aliases(rt: ResourceType) -> Obj:
    """The short names and categories (``kubectl get po``, ``kubectl get all``) a resource has,
    as both discovery documents list them: absent when it has none."""
    aliases: Obj = {}
    if rt.short_names:
        aliases["shortNames"] = list(rt.short_names)
    if rt.categories:
        aliases["categories"] = list(rt.categories)
    return aliases


def resource_list(reg: Registry, group: str, version: str) -> Obj:
    rts = [rt for rt in _groups(reg).get(group, []) if version in rt.versions]
    if not rts:
        from gitopsbot.sandbox.apiserver.errors import NotFound

        raise NotFound(f"the server could not find the requested resource ({group}/{version})")
    resources: list[Obj] = []
    for rt in rts:
        r: Obj = {
            "name": rt.plural,
            "singularName": rt.singular_name,
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": VERBS,
            **_aliases(rt),
        }
        resources.append(r)
        for sub in rt.subresources:
            g, v, k = _sub_kind(rt, sub)
            s: Obj = {
                "name": f"{rt.plural}/{sub}",
                "singularName": "",
                "namespaced": rt.namespaced,
                "kind": k,
                "verbs": SUB_VERBS,
            }
            if sub == "scale":
                s.update(group=g, version=v)
            resources.append(s)
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }


def _group_obj(name: str, rts: list[ResourceType]) -> Obj:
    versions = [{"groupVersion": f"{name}/{v}", "version": v} for v in _versions(rts)]
    return {"name": name, "versions": versions, "preferredVersion": versions[0]}


def group_list(reg: Registry) -> Obj:
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group_obj(g, rts) for g, rts in _groups(reg).items() if g],
    }


def group(reg: Registry, name: str) -> Obj:
    rts = _groups(reg).get(name)
    if not rts:
        from gitopsbot.sandbox.apiserver.errors import NotFound

        raise NotFound(f"the server could not find the requested resource (group {name})")
    return {"kind": "APIGroup", "apiVersion": "v1", **_group_obj(name, rts)}


def aggregated(reg: Registry, *, legacy: bool, version: str) -> Obj:
    items = []
    for g, rts in _groups(reg).items():
        if legacy != (g == ""):
            continue
        versions = []
        for v in _versions(rts):
            resources = []
            for rt in rts:
                if v not in rt.versions:
                    continue
                r: Obj = {
                    "resource": rt.plural,
                    "responseKind": {"group": rt.group, "version": v, "kind": rt.kind},
                    "scope": "Namespaced" if rt.namespaced else "Cluster",
                    "singularResource": rt.singular_name,
                    "verbs": VERBS,
                    **_aliases(rt),
                }
                subs = []
                for sub in rt.subresources:
                    sg, sv, sk = _sub_kind(rt, sub)
                    subs.append(
                        {
                            "subresource": sub,
                            "responseKind": {"group": sg, "version": sv or v, "kind": sk},
                            "verbs": SUB_VERBS,
                        }
                    )
                if subs:
                    r["subresources"] = subs
                resources.append(r)
            versions.append({"version": v, "resources": resources, "freshness": "Current"})
        items.append({"metadata": {"name": g} if g else {}, "versions": versions})
    return {
        "kind": "APIGroupDiscoveryList",
        "apiVersion": f"apidiscovery.k8s.io/{version}",
        "metadata": {},
        "items": items,
    }
