"""The Cluster adapter's CRD checks: applied CRDs Established, then their kinds served."""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from gitopsbot.adapters.kube_access import KubeAccess
from gitopsbot.core.charts.kube_objects import condition_status
from gitopsbot.core.charts.observed import CrdApplyResult

CRD_API_VERSION = "apiextensions.k8s.io/v1"


class KubeCrds(KubeAccess):
    """``wait_established`` and ``wait_served``, after ``apply_crds`` (kube.py)."""

    def wait_served(
        self, results: builtins.list[CrdApplyResult], crds: Iterable[Mapping[str, Any]]
    ) -> builtins.list[CrdApplyResult]:
        """Poll discovery until each Established CRD's kind is served in every served version.

        A real kube-apiserver reports Established a few milliseconds before discovery lists
        the new kind (tests/executor/adapters/test_cluster_contract.py shows it); a step that
        uses the kind at once would find it "not served". A CRD whose kind is still missing at
        the deadline is reported not established, naming what is missing."""
        wanted: dict[str, builtins.list[tuple[str, str]]] = {}
        for crd in crds:
            spec = crd.get("spec") or {}
            kind = str((spec.get("names") or {}).get("kind") or "")
            group = str(spec.get("group") or "")
            wanted[str(crd["metadata"]["name"])] = [
                (f"{group}/{v['name']}", kind)
                for v in spec.get("versions") or []
                if isinstance(v, Mapping) and v.get("served", True) and kind and group
            ]
        deadline = self._monotonic() + self._crd_timeout
        missing: dict[str, builtins.list[str]] = {}
        while True:
            missing.clear()
            for result in results:
                for api_version, kind in wanted.get(result.name, []) if result.ok else []:
                    self._discovery.pop(api_version, None)
                    if self._resource_cached(api_version, kind) is None:
                        missing.setdefault(result.name, []).append(f"{kind} in {api_version}")
            if not missing or self._monotonic() >= deadline:
                break
            self._sleep(self._poll)
        return [
            replace(
                r,
                established=False,
                message=f"Established, but not served after {self._crd_timeout:g}s: "
                + ", ".join(missing[r.name]),
            )
            if r.name in missing
            else r
            for r in results
        ]

    def wait_established(self, applied: Mapping[str, str]) -> builtins.list[CrdApplyResult]:
        """Poll each applied CRD (name → apply error, "" when applied) until Established."""
        deadline = self._monotonic() + self._crd_timeout
        pending = {name for name, error in applied.items() if not error}
        seen: dict[str, dict[str, Any]] = {}
        while True:
            for name in sorted(pending):
                crd = self.get(CRD_API_VERSION, "CustomResourceDefinition", None, name)
                if crd is not None:
                    seen[name] = crd
                    if condition_status(crd, "Established") == "True":
                        pending.discard(name)
            if not pending or self._monotonic() >= deadline:
                break
            self._sleep(self._poll)
        results = []
        for name, error in sorted(applied.items()):
            crd = seen.get(name, {})
            stored = tuple((crd.get("status") or {}).get("storedVersions") or ())
            if error:
                results.append(CrdApplyResult(name, False, False, stored, error))
            elif name in pending:
                message = f"not Established after {self._crd_timeout:g}s"
                results.append(CrdApplyResult(name, True, False, stored, message))
            else:
                results.append(CrdApplyResult(name, True, True, stored))
        return results
