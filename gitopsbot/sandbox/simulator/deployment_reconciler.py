"""The controller Deployment, as Kubernetes' Deployment and ReplicaSet controllers roll it out
on the emulator: readiness after a delay, the new ReplicaSet and its Pods (controller_pods.py,
agent.py); on a real server the real Deployment controller does it and this only reads.
"""

from __future__ import annotations

import copy
from datetime import datetime, timedelta

from gitopsbot.sandbox.apiserver.errors import ApiError
from gitopsbot.sandbox.apiserver.kubelet import (
    new_replica_set,
    owned_replica_sets,
    template_revision,
)
from gitopsbot.sandbox.simulator import agent, controller_pods, objects
from gitopsbot.sandbox.simulator.reconcile_core import (
    CONTROLLER_SELECTOR,
    DEFAULT_OPERATOR_NAMESPACE,
    Obj,
    ReconcilerCore,
    WorkloadStatusOwner,
    log,
)
from gitopsbot.sandbox.simulator.rollout import format_time


class DeploymentReconciler(ReconcilerCore):
    """The controller Deployment's rollout, ReplicaSets and Pods."""

    kubelet: WorkloadStatusOwner | None
    _deploy_seen: dict[tuple[str, str, int], datetime]
    _running_image: dict[tuple[str, str], str]

    def _controllers(self, now: datetime) -> tuple[bool, str, str]:
        """(a controller replica is ready, the running controller image, its namespace)."""
        ready_any = False
        image = ""
        namespace = DEFAULT_OPERATOR_NAMESPACE
        for dep in self.cache.list("apps/v1", "Deployment", labels=CONTROLLER_SELECTOR):
            meta = dep["metadata"]
            key = (meta.get("namespace", ""), meta["name"])
            namespace = key[0] or namespace
            if self.config.real_server:
                if _rolled_out(dep):  # by the real Deployment controller
                    self._running_image[key] = _container_image(dep)
            elif self.config.manage_controller_deployment:
                self._controller_readiness(dep, now)
                dep = self.cache.get("apps/v1", "Deployment", key[0], key[1]) or dep
            status = dep.get("status") or {}
            if int(status.get("readyReplicas") or 0) > 0:
                ready_any = True
                image = self._running_image.get(key) or _container_image(dep)
        return ready_any, image, namespace

    def _controller_readiness(self, dep: Obj, now: datetime) -> None:
        meta = dep["metadata"]
        gen = int(meta.get("generation") or 1)
        key = (meta.get("namespace", ""), meta["name"])
        if self.kubelet is not None:
            self.kubelet.exclude("Deployment", key[0], key[1])
        replicas = int((dep.get("spec") or {}).get("replicas", 1))
        old = dep.get("status") or {}
        if _rolled_out(dep):
            # Rolled out (by us, or by the emulator's kubelet before we took over).
            self._running_image[key] = _container_image(dep)
            self._controller_pods(dep, now)
            return
        seen = self._deploy_seen.setdefault((*key, gen), now)
        due = seen + timedelta(seconds=self.config.controller_ready_delay)
        pullable = _container_image(dep) not in self.config.unpullable_images
        done = pullable and now >= due
        if done:
            self._running_image[key] = _container_image(dep)
            self._replica_set(dep)
            self._controller_pods(dep, now)
            ready = updated = replicas
        else:
            if pullable:
                self._wake.append(due)
            # The old ReplicaSet's pods stay ready until the new ones are (RollingUpdate).
            ready = min(int(old.get("readyReplicas") or 0), replicas)
            updated = 0
        core = {
            "observedGeneration": gen,
            "replicas": max(replicas, ready),
            "updatedReplicas": updated,
            "readyReplicas": ready,
            "availableReplicas": ready,
        }
        if replicas - ready > 0:
            core["unavailableReplicas"] = replicas - ready
        core = {k: v for k, v in core.items() if v or k == "observedGeneration"}
        old_core = {k: v for k, v in old.items() if k != "conditions"}
        if old_core == core and old.get("conditions"):
            return
        stamp = format_time(now).split(".")[0] + "Z"
        available = ready >= replicas or (ready > 0 and replicas > 0)
        conditions = [
            {
                "type": "Available",
                "status": "True" if available else "False",
                "reason": "MinimumReplicasAvailable" if available else "MinimumReplicasUnavailable",
                "message": "Deployment has minimum availability."
                if available
                else "Deployment does not have minimum availability.",
                "lastUpdateTime": stamp,
                "lastTransitionTime": stamp,
            },
            {
                "type": "Progressing",
                "status": "True",
                "reason": "NewReplicaSetAvailable" if done else "ReplicaSetUpdated",
                "message": f'ReplicaSet "{meta["name"]}" '
                + ("has successfully progressed." if done else "is progressing."),
                "lastUpdateTime": stamp,
                "lastTransitionTime": stamp,
            },
        ]
        self._set_status(dep, {**core, "conditions": conditions})

    def _controller_pods(self, dep: Obj, now: datetime) -> None:
        """One Running Pod per replica of the rolled-out ReplicaSet, the older ones' Pods
        deleted (controller_pods.py); a cluster-agent container's log from agent.py."""
        meta = dep["metadata"]
        spec = dep.get("spec") or {}
        template = spec.get("template") or {}
        listed = self.cache.list("apps/v1", "ReplicaSet", meta["namespace"])
        rs, missing, delete = controller_pods.plan(
            owned_replica_sets(dep, listed),
            template_revision(dep),
            int(spec.get("replicas", 1)),
            self.cache.list("v1", "Pod", meta["namespace"]),
            rolled_out=True,
        )
        for pod in delete:
            self._delete(pod)
        if rs is None:
            return
        container = agent.agent_container(template.get("spec") or {})
        for _ in range(missing):
            annotations: dict[str, str] = {}
            if container is not None:
                annotations[agent.ANNOTATION] = agent.agent_log(
                    container,
                    meta["namespace"],
                    read_secret=self._read_secret,
                    console_tokens=self.config.console_tokens,
                    now=now,
                )
            self._create(controller_pods.new_pod(rs, now, annotations=annotations))

    def _read_secret(self, namespace: str, name: str) -> Obj | None:
        try:
            return self.store.get("v1", "Secret", namespace, name)
        except ApiError as e:
            log.debug("controller simulator: Secret %s/%s: %s", namespace, name, e.reason)
            return None

    def _replica_set(self, dep: Obj) -> None:
        """The new ReplicaSet, ready; older ones scaled to 0 (helm 3's legacy --wait needs it)."""
        name = template_revision(dep)
        listed = self.cache.list("apps/v1", "ReplicaSet", dep["metadata"]["namespace"])
        owned = owned_replica_sets(dep, listed)
        revisions = [
            int(objects.annotations_of(rs).get("deployment.kubernetes.io/revision", "0") or 0)
            for rs in owned
        ]
        for rs in owned:
            if rs["metadata"]["name"] != name and (rs.get("spec") or {}).get("replicas"):
                new = copy.deepcopy(rs)
                new["spec"]["replicas"] = 0
                self._update(new)
                self._set_status(new, {"replicas": 0, "observedGeneration": 1})
        if any(rs["metadata"]["name"] == name for rs in owned):
            return
        self._create(new_replica_set(dep, revision=1 + max(revisions, default=0)))


def _rolled_out(dep: Obj) -> bool:
    gen = int(dep["metadata"].get("generation") or 1)
    replicas = int((dep.get("spec") or {}).get("replicas", 1))
    status = dep.get("status") or {}
    return (
        int(status.get("observedGeneration") or 0) == gen
        and int(status.get("updatedReplicas") or 0) == replicas
        and int(status.get("readyReplicas") or 0) == replicas
    )


def _container_image(dep: Obj) -> str:
    containers = (((dep.get("spec") or {}).get("template") or {}).get("spec") or {}).get(
        "containers"
    ) or []
    return str(containers[0].get("image", "")) if containers else ""
