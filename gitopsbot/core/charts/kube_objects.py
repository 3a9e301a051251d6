"""Pure judgments on Kubernetes objects the executor handles: CRD bundles, Deployment readiness.

Shared by the real adapters (``adapters.kube``, ``adapters.kubectl``) and the fakes in
``gitopsbot.testing``, so both judge the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gitopsbot.core.charts.chart import CRD_LIMITS
from gitopsbot.core.charts.observed import DeploymentReadiness
from gitopsbot.core.fleet import located_yaml
from gitopsbot.errors import FleetError


class CrdDocumentError(ValueError):
    """A CRD bundle holds something other than CustomResourceDefinitions, or bad YAML."""


def condition_status(obj: Mapping[str, Any], kind: str) -> str:
    """``status.conditions[type=kind].status`` ("True"/"False"/"Unknown"), "" when absent."""
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return str(condition.get("status", ""))
    return ""


def deployment_readiness(deployment: Mapping[str, Any]) -> DeploymentReadiness:
    """Judge a Deployment the way ``kubectl rollout status`` does."""
    meta = deployment.get("metadata") or {}
    spec = deployment.get("spec") or {}
    status = deployment.get("status") or {}
    generation = int(meta.get("generation") or 0)
    observed = int(status.get("observedGeneration") or 0)
    wanted = int(spec.get("replicas", 1) if spec.get("replicas") is not None else 1)
    replicas = int(status.get("replicas") or 0)
    updated = int(status.get("updatedReplicas") or 0)
    ready = int(status.get("readyReplicas") or 0)
    available = int(status.get("availableReplicas") or 0)
    message = ""
    for condition in status.get("conditions") or []:
        if (
            condition.get("type") == "Progressing"
            and condition.get("reason") == "ProgressDeadlineExceeded"
        ):
            message = "progress deadline exceeded"
    if not message:
        if observed < generation:
            message = "waiting for the controller to observe the new generation"
        elif updated < wanted:
            message = f"{updated} of {wanted} replicas updated"
        elif replicas > updated:
            message = f"{replicas - updated} old replicas pending termination"
        elif available < updated:
            message = f"{available} of {updated} updated replicas available"
    return DeploymentReadiness(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        ready=not message,
        generation=generation,
        observed_generation=observed,
        replicas=replicas,
        updated_replicas=updated,
        ready_replicas=ready,
        available_replicas=available,
        message=message,
    )


def parse_crd_documents(documents: Mapping[str, str]) -> list[dict[str, Any]]:
    """CRDs from file name → YAML text; anything else is refused, naming the file."""
    crds: list[dict[str, Any]] = []
    for file_name, text in sorted(documents.items()):
        try:
            docs = located_yaml.load_all(text, file_name, limits=CRD_LIMITS)
        except FleetError as e:
            raise CrdDocumentError(
                f"{file_name}: invalid YAML: {e.problems[0].message[:256]} "
                f"(line {e.problems[0].line})"
            ) from None
        for index, doc in enumerate(docs, start=1):
            if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
                kind = doc.get("kind") if isinstance(doc, dict) else type(doc).__name__
                raise CrdDocumentError(
                    f"{file_name}: document {index}: expected a CustomResourceDefinition, "
                    f"got {kind}"
                )
            if not (doc.get("metadata") or {}).get("name"):
                raise CrdDocumentError(f"{file_name}: document {index}: metadata.name is missing")
            crds.append(doc)
    return crds
