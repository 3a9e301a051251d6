"""Which kinds the emulator serves: the built-in table plus kinds registered by CRDs."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


@dataclass(frozen=True, slots=True)
class ResourceType:
    group: str
    versions: tuple[str, ...]  # served; the first is the preferred and stored version
    kind: str
    plural: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()  # "status", "scale"
    custom: bool = False
    singular: str = field(default="")
    printer_columns: tuple[tuple[str, str, str, int], ...] = ()  # name, type, jsonPath, priority

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.versions[0]}" if self.group else self.versions[0]

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources

    @property
    def singular_name(self) -> str:
        return self.singular or self.kind.lower()


def _b(
    group: str,
    version: str,
    kind: str,
    plural: str,
    namespaced: bool = True,
    short: tuple[str, ...] = (),
    cats: tuple[str, ...] = (),
    sub: tuple[str, ...] = ("status",),
) -> ResourceType:
    return ResourceType(group, (version,), kind, plural, namespaced, short, cats, sub)


ALL = ("all",)
BUILTINS: tuple[ResourceType, ...] = (
    _b("", "v1", "Namespace", "namespaces", False, ("ns",)),
    _b("", "v1", "Node", "nodes", False, ("no",)),
    _b("", "v1", "ConfigMap", "configmaps", short=("cm",), sub=()),
    _b("", "v1", "Secret", "secrets", sub=()),
    _b("", "v1", "Pod", "pods", short=("po",), cats=ALL),
    _b("", "v1", "Service", "services", short=("svc",), cats=ALL),
    _b("", "v1", "ServiceAccount", "serviceaccounts", short=("sa",), sub=()),
    _b("", "v1", "Event", "events", short=("ev",), sub=()),
    _b("", "v1", "Endpoints", "endpoints", short=("ep",), sub=()),
    _b("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", short=("pvc",)),
    _b("", "v1", "PersistentVolume", "persistentvolumes", False, ("pv",)),
    _b(
        "apps",
        "v1",
        "Deployment",
        "deployments",
        short=("deploy",),
        cats=ALL,
        sub=("status", "scale"),
    ),
    _b("apps", "v1", "ReplicaSet", "replicasets", short=("rs",), cats=ALL, sub=("status", "scale")),
    _b(
        "apps",
        "v1",
        "StatefulSet",
        "statefulsets",
        short=("sts",),
        cats=ALL,
        sub=("status", "scale"),
    ),
    _b("apps", "v1", "DaemonSet", "daemonsets", short=("ds",), cats=ALL),
    _b("apps", "v1", "ControllerRevision", "controllerrevisions", sub=()),
    _b("batch", "v1", "Job", "jobs", cats=ALL),
    _b("batch", "v1", "CronJob", "cronjobs", short=("cj",), cats=ALL),
    _b(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        False,
        ("crd", "crds"),
    ),
    _b("rbac.authorization.k8s.io", "v1", "Role", "roles", sub=()),
    _b("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", sub=()),
    _b("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", False, sub=()),
    _b(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        False,
        sub=(),
    ),
    _b("coordination.k8s.io", "v1", "Lease", "leases", sub=()),
    _b("events.k8s.io", "v1", "Event", "events", short=("ev",), sub=()),
    _b("networking.k8s.io", "v1", "Ingress", "ingresses", short=("ing",)),
    _b("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", short=("pdb",)),
    _b("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", False, ("pc",), sub=()),
    _b(
        "admissionregistration.k8s.io",
        "v1",
        "MutatingWebhookConfiguration",
        "mutatingwebhookconfigurations",
        False,
        sub=(),
    ),
    _b(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingWebhookConfiguration",
        "validatingwebhookconfigurations",
        False,
        sub=(),
    ),
    _b("storage.k8s.io", "v1", "StorageClass", "storageclasses", False, ("sc",), sub=()),
)


class Registry:
    """Kinds by (group, kind) and by (group, plural); CRDs add and remove kinds at runtime.

    Readers take an immutable snapshot (``types()``); writers swap dicts under a lock.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_kind: dict[tuple[str, str], ResourceType] = {}
        self._by_plural: dict[tuple[str, str], ResourceType] = {}
        self._schemas: dict[tuple[str, str, str], Obj | None] = {}
        for rt in BUILTINS:
            self._add(rt)

    def _add(self, rt: ResourceType) -> None:
        by_kind = dict(self._by_kind)
        by_plural = dict(self._by_plural)
        by_kind[(rt.group, rt.kind)] = rt
        by_plural[(rt.group, rt.plural)] = rt
        self._by_kind, self._by_plural = by_kind, by_plural

    def types(self) -> list[ResourceType]:
        return list(self._by_kind.values())

    def find(self, group: str, kind: str) -> ResourceType | None:
        return self._by_kind.get((group, kind))

    def get(self, group: str, kind: str) -> ResourceType:
        return self._by_kind[(group, kind)]

    def by_plural(self, group: str, version: str, plural: str) -> ResourceType | None:
        rt = self._by_plural.get((group, plural))
        if rt is None or version not in rt.versions:
            return None
        return rt

    def schema(self, rt: ResourceType, version: str) -> Obj | None:
        return self._schemas.get((rt.group, rt.kind, version or rt.versions[0]))

    def register_crd(self, crd: Obj) -> None:
        spec = crd["spec"]
        names = spec["names"]
        served = [v for v in spec.get("versions", []) if v.get("served", True)]
        storage = [v["name"] for v in served if v.get("storage")]
        order = storage + [v["name"] for v in served if v["name"] not in storage]
        if not order:
            return
        first = next(v for v in served if v["name"] == order[0])
        subs = tuple(sorted((first.get("subresources") or {}).keys()))
        cols = tuple(
            (
                c.get("name", ""),
                c.get("type", "string"),
                c.get("jsonPath", ""),
                int(c.get("priority", 0)),
            )
            for c in first.get("additionalPrinterColumns") or []
        )
        rt = ResourceType(
            group=spec["group"],
            versions=tuple(order),
            kind=names["kind"],
            plural=names["plural"],
            namespaced=spec.get("scope", "Namespaced") == "Namespaced",
            short_names=tuple(names.get("shortNames") or ()),
            categories=tuple(names.get("categories") or ()),
            subresources=subs,
            custom=True,
            singular=names.get("singular") or names["kind"].lower(),
            printer_columns=cols,
        )
        with self._lock:
            old = self._by_kind.get((rt.group, rt.kind))
            if old is not None and old.plural != rt.plural:
                self._remove(old)
            self._add(rt)
            for v in served:
                self._schemas[(rt.group, rt.kind, v["name"])] = (v.get("schema") or {}).get(
                    "openAPIV3Schema"
                )

    def _remove(self, rt: ResourceType) -> None:
        by_kind = dict(self._by_kind)
        by_plural = dict(self._by_plural)
        by_kind.pop((rt.group, rt.kind), None)
        by_plural.pop((rt.group, rt.plural), None)
        self._by_kind, self._by_plural = by_kind, by_plural

    def unregister_crd(self, crd: Obj) -> None:
        spec = crd["spec"]
        rt = self._by_kind.get((spec["group"], spec["names"]["kind"]))
        if rt is not None and rt.custom:
            with self._lock:
                self._remove(rt)
