"""Run one step of an operation through the ports and say how it went.

Every step is idempotent or recognises its own earlier effect, so a restart after a kill
never repeats one that took effect: the Helm upgrade finds its revision by the description
it gave it (``gitopsbot op=<id> step=helm-upgrade``), a rollback finds helm's own
``Rollback to <n>`` revision, a controller restart stamps the step's start time (a repeat
writes the same annotation and starts no new rollout).

Outcomes are values (``StepOutcome``): SUCCEEDED / SKIPPED / FAILED, or RUNNING with a
``retry_after`` when the world needs more time. Exceptions from the ports are mapped in one
place (``run``): TransientError → RUNNING (retry), PermanentError → FAILED.
No adapter is imported here: ports are injected (``app.py`` wires them).
"""

from __future__ import annotations

import hashlib
import json
import logging
import tempfile
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, Protocol

from gitopsbot.core import chart as chart_mod
from gitopsbot.core import journal as journal_mod
from gitopsbot.core import operation, rollout
from gitopsbot.core import secrets as secrets_mod
from gitopsbot.core.journal import Effect, Journal, RollbackPoint, Step, StepKind, StepState
from gitopsbot.core.model import ClusterSpec, Component, SecretRef
from gitopsbot.errors import GitOpsBotError, HelmReleaseLocked, PermanentError, TransientError
from gitopsbot.ports.cluster import Cluster
from gitopsbot.ports.helm import ChartRef, Helm

log = logging.getLogger(__name__)

GROUP = "tensor-fusion.ai"
# Pods of the client component, as the controller counts them (facts §3.6).
CLIENT_SELECTOR = f"{GROUP}/enabled=true"
WORKER_SELECTOR = f"{GROUP}/component=worker"
TF = f"{GROUP}/v1"
CRD_API = "apiextensions.k8s.io/v1"
# R6: the TensorFusion resources backed up before an upgrade.
BACKUP_KINDS = (
    "TensorFusionCluster",
    "GPUPool",
    "GPUNode",
    "GPU",
    "WorkloadProfile",
    "TensorFusionWorkload",
    "TensorFusionConnection",
)
SWITCH = {
    Component.HYPERVISOR: "autoUpdateHypervisor",
    Component.WORKER: "autoUpdateWorker",
    Component.CLIENT: "autoUpdateClient",
}
VERIFY_TIMEOUT_SECONDS = 600
CheckMode = Literal["verify", "images", "canary", "running"]
RETRY = 5.0


class SecretSource(Protocol):
    """Narrow port: values path → secret value (``adapters.secrets.SecretResolver``)."""

    def resolve_all(self, refs: Sequence[SecretRef]) -> dict[str, str]: ...


@dataclass(frozen=True, slots=True)
class StepOutcome:
    state: StepState
    detail: str = ""
    effect: Effect | None = None
    rollback_point: RollbackPoint | None = None
    retry_after: float | None = None
    # Extra files for the state branch (backups), committed with the transition.
    files: Mapping[str, bytes] = field(default_factory=dict)


def tfc_name(spec: ClusterSpec) -> str:
    """The chart renders the TensorFusionCluster as ``cluster.name`` (default tensor-fusion)."""
    cluster = spec.values.get("cluster")
    name = cluster.get("name") if isinstance(cluster, Mapping) else None
    return str(name or "tensor-fusion")


def gpupool_name(spec: ClusterSpec, pool: str) -> str:
    """The controller derives GPUPool ``<tfc>-<pool>`` from the TFC template (R11)."""
    return f"{tfc_name(spec)}-{pool}"


def controller_name(spec: ClusterSpec) -> str:
    return f"{spec.release.release_name}-controller"


def digest(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _strip(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    return {**obj, "metadata": meta}


class Executor:
    """Runs steps against one cluster's ports. ``now`` comes from the caller's clock."""

    def __init__(
        self,
        *,
        cluster: Cluster,
        helm: Helm,
        secrets: SecretSource,
        smoke_test_timeout: int = 300,
    ) -> None:
        self.cluster = cluster
        self.helm = helm
        self.secrets = secrets
        self.smoke_test_timeout = smoke_test_timeout

    # -- the one place exceptions become outcomes -----------------------------------------

    def run(
        self,
        step: Step,
        journal: Journal,
        spec: ClusterSpec,
        *,
        now: datetime,
        rollback_to: RollbackPoint | None = None,
    ) -> StepOutcome:
        handlers: dict[StepKind, Callable[[], StepOutcome]] = {
            StepKind.BACKUP: lambda: self.backup(journal, spec),
            StepKind.CRDS: lambda: self.crds(journal, spec),
            StepKind.HELM_UPGRADE: lambda: self.helm_upgrade(journal, spec),
            StepKind.CONTROLLER_READY: lambda: self.controller_ready(step, spec, now),
            StepKind.CONTROLLER_RESTART: lambda: self.controller_restart(step, spec, now),
            StepKind.VERIFY: lambda: self.verify(step, spec, now, rolled=_rolled(journal)),
            StepKind.ROLLBACK: lambda: self.rollback(journal, spec, rollback_to),
        }
        handler = handlers.get(step.kind)
        if handler is None:
            return StepOutcome(StepState.FAILED, f"{step.kind} is not run by the executor")
        try:
            return handler()
        except HelmReleaseLocked as e:
            return StepOutcome(StepState.FAILED, f"{e} (resolve the release by hand)")
        except TransientError as e:
            return StepOutcome(StepState.RUNNING, f"retrying: {e}", retry_after=e.retry_after)
        except (PermanentError, GitOpsBotError) as e:
            return StepOutcome(StepState.FAILED, str(e))

    # -- R6 backup ------------------------------------------------------------------------

    def backup(self, journal: Journal, spec: ClusterSpec) -> StepOutcome:
        rel = spec.release
        status = self.helm.status(rel.release_name, rel.namespace)
        values = self.helm.get_values(rel.release_name, rel.namespace) if status else {}
        masked = secrets_mod.mask(values, spec.credentials.secret_paths)
        state: list[dict[str, Any]] = []
        for kind in BACKUP_KINDS:
            state.extend(_strip(o) for o in self.cluster.list(TF, kind))
        masked_state = [secrets_mod.mask(o, spec.credentials.secret_paths) for o in state]
        base = f"clusters/{spec.name}/backups/{journal.op_id}"
        files = {
            f"{base}/values.yaml": journal_mod.dump_yaml(masked).encode(),
            f"{base}/tf-state.yaml": journal_mod.dump_yaml(
                {"apiVersion": "v1", "kind": "List", "items": masked_state}
            ).encode(),
        }
        point = RollbackPoint(
            helm_revision=status.revision if status else 0,
            chart_version=status.chart_version if status else "",
            values_digest=digest(masked),
            crd_bundle_digest=self._crd_digest(),
            images=self._pool_images(spec),
        )
        detail = (
            f"helm revision {point.helm_revision} (chart {point.chart_version}), "
            f"{len(state)} TensorFusion objects"
            if status
            else "nothing deployed yet"
        )
        return StepOutcome(StepState.SUCCEEDED, detail, rollback_point=point, files=files)

    def _crd_digest(self) -> str:
        crds = [
            (c["metadata"]["name"], c.get("spec", {}))
            for c in self.cluster.list(CRD_API, "CustomResourceDefinition")
            if c.get("spec", {}).get("group") == GROUP
        ]
        return digest(sorted(crds, key=lambda x: x[0])) if crds else ""

    def _pool_images(self, spec: ClusterSpec) -> dict[str, dict[str, str]]:
        tfc = self.cluster.get(TF, "TensorFusionCluster", None, tfc_name(spec))
        out: dict[str, dict[str, str]] = {}
        for pool in ((tfc or {}).get("spec") or {}).get("gpuPools") or []:
            config = ((pool.get("specTemplate") or {}).get("componentConfig")) or {}
            images = {
                str(c): str(config[str(c)]["image"])
                for c in Component
                if isinstance(config.get(str(c)), Mapping) and config[str(c)].get("image")
            }
            if images:
                out[str(pool.get("name"))] = images
        return out

    # -- R7 / R16 CRDs --------------------------------------------------------------------

    def crds(self, journal: Journal, spec: ClusterSpec) -> StepOutcome:
        point = journal.rollback_point
        target = spec.release.version
        before = point.chart_version if point else ""
        if chart_mod.is_version(before) and (
            chart_mod.semver_key(target) < chart_mod.semver_key(before)
        ):
            return StepOutcome(
                StepState.SKIPPED,
                f"target {target} is older than {before}: CRDs are never downgraded (R16)",
            )
        with tempfile.TemporaryDirectory(prefix="gitopsbot-chart-") as tmp:
            chart_dir = self.helm.pull(ChartRef.of(spec.release), target, Path(tmp))
            crd_dir = chart_dir / "crds"
            docs = {
                p.name: p.read_text(encoding="utf-8")
                for p in sorted(crd_dir.glob("*.y*ml"))
                if p.is_file()
            }
        if not docs:
            return StepOutcome(StepState.SKIPPED, f"chart {target} has no crds/")
        refused = self._dropped_stored_versions(docs)
        if refused:
            return StepOutcome(StepState.FAILED, "refused (R7): " + "; ".join(refused))
        results = self.cluster.apply_crds(docs)
        bad = [f"{r.name}: {r.message or 'not established'}" for r in results if not r.ok]
        if bad:
            return StepOutcome(StepState.FAILED, "CRDs not applied: " + "; ".join(bad))
        return StepOutcome(
            StepState.SUCCEEDED,
            f"{len(results)} CRDs server-side applied and established",
            effect=Effect(description=self._crd_digest()),
        )

    def _dropped_stored_versions(self, docs: Mapping[str, str]) -> list[str]:
        problems = []
        for text in docs.values():
            for doc in journal_mod.load_all_yaml(text):
                if not isinstance(doc, Mapping) or doc.get("kind") != "CustomResourceDefinition":
                    continue
                name = str((doc.get("metadata") or {}).get("name", ""))
                served = {str(v.get("name")) for v in (doc.get("spec") or {}).get("versions") or []}
                live = self.cluster.get(CRD_API, "CustomResourceDefinition", None, name)
                stored = ((live or {}).get("status") or {}).get("storedVersions") or []
                dropped = [v for v in stored if v not in served]
                if dropped:
                    problems.append(
                        f"{name}: version(s) {', '.join(dropped)} still in status.storedVersions "
                        "would be dropped; migrate the stored objects first"
                    )
        return problems

    # -- R8 helm upgrade ------------------------------------------------------------------

    def own_revision(self, spec: ClusterSpec, description: str) -> int:
        for info in reversed(self.helm.history(spec.release.release_name, spec.release.namespace)):
            if info.description == description and not info.status.pending:
                return info.revision
        return 0

    def _refuse_locked(self, spec: ClusterSpec) -> None:
        """R8: a release stuck in pending-* (a killed helm) is reported, never forced."""
        rel = spec.release
        latest = self.helm.status(rel.release_name, rel.namespace)
        if latest is not None and latest.status.pending:
            raise HelmReleaseLocked(
                f"release {rel.namespace}/{rel.release_name} revision {latest.revision} is "
                f"{latest.status} ({latest.description or 'no description'}); not forcing it"
            )

    def helm_upgrade(
        self, journal: Journal, spec: ClusterSpec, *, version: str | None = None
    ) -> StepOutcome:
        rel = spec.release
        description = operation.helm_description(journal.op_id)
        done = self.own_revision(spec, description)
        if done:  # a restart: this operation's upgrade already took effect
            return StepOutcome(
                StepState.SUCCEEDED,
                f"revision {done} already made by this operation",
                effect=Effect(helm_revision=done, description=description),
            )
        self._refuse_locked(spec)
        resolved = self.secrets.resolve_all(list(spec.credentials.secrets))
        values = secrets_mod.merge_secrets(spec.values, resolved)  # secrets exist only here
        info = self.helm.upgrade(
            release=rel.release_name,
            namespace=rel.namespace,
            chart=ChartRef.of(rel),
            version=version or rel.version,
            values=values,
            description=description,
            post_render_policy=spec.rollout,  # F1: Git policy, every switch closed
        )
        return StepOutcome(
            StepState.SUCCEEDED,
            f"revision {info.revision}: chart {info.chart_version} (app {info.app_version})",
            effect=Effect(helm_revision=info.revision, description=description),
        )

    # -- controller -----------------------------------------------------------------------

    def controller_ready(self, step: Step, spec: ClusterSpec, now: datetime) -> StepOutcome:
        name = controller_name(spec)
        ready = self.cluster.deployment_ready(spec.release.namespace, name)
        if ready:
            return StepOutcome(StepState.SUCCEEDED, f"deploy/{name} rolled out")
        waited = (now - (step.started_at or now)).total_seconds()
        limit = spec.rollout.controller_ready_timeout_seconds
        if waited >= limit:
            return StepOutcome(
                StepState.FAILED, f"deploy/{name} not ready after {limit}s: {ready.message}"
            )
        return StepOutcome(StepState.RUNNING, f"waiting for deploy/{name}", retry_after=RETRY)

    def controller_restart(self, step: Step, spec: ClusterSpec, now: datetime) -> StepOutcome:
        # R24. The annotation value is the step's start: a repeat after a kill is a no-op.
        at = step.started_at or now
        self.cluster.restart_deployment(spec.release.namespace, controller_name(spec), at=at)
        return StepOutcome(StepState.SUCCEEDED, f"restarted deploy/{controller_name(spec)} (R24)")

    # -- R16 rollback ---------------------------------------------------------------------

    def rollback(
        self, journal: Journal, spec: ClusterSpec, point: RollbackPoint | None
    ) -> StepOutcome:
        if point is None or point.helm_revision == 0:
            return StepOutcome(StepState.FAILED, "no recorded rollback point to return to")
        rel = spec.release
        history = self.helm.history(rel.release_name, rel.namespace)
        start = journal.rollback_point.helm_revision if journal.rollback_point else 0
        mine = f"Rollback to {point.helm_revision}"
        for info in history:
            if info.revision > start and info.description == mine and not info.status.pending:
                return StepOutcome(
                    StepState.SUCCEEDED,
                    f"revision {info.revision} already rolled back by this operation",
                    effect=Effect(helm_revision=info.revision, description=mine),
                )
        self._refuse_locked(spec)
        if any(i.revision == point.helm_revision for i in history):
            info = self.helm.rollback(
                release=rel.release_name,
                namespace=rel.namespace,
                revision=point.helm_revision,
                description=operation.helm_description(journal.op_id),
            )
            return StepOutcome(
                StepState.SUCCEEDED,
                f"helm rollback to revision {point.helm_revision} → revision {info.revision}; "
                "CRDs untouched (R16)",
                effect=Effect(helm_revision=info.revision, description=info.description),
            )
        # The revision aged out of helm history: upgrade to the recorded version with the
        # values Git holds now (the revert restored them).
        outcome = self.helm_upgrade(journal, spec, version=point.chart_version)
        return StepOutcome(
            outcome.state,
            f"revision {point.helm_revision} is gone; upgraded to chart {point.chart_version} "
            f"instead: {outcome.detail}",
            effect=outcome.effect,
        )

    # -- pools ----------------------------------------------------------------------------

    def observe_pool(
        self, spec: ClusterSpec, pool: str, component: Component
    ) -> rollout.PoolObservation | None:
        tfc = self.cluster.get(TF, "TensorFusionCluster", None, tfc_name(spec))
        gpupool = self.cluster.get(TF, "GPUPool", None, gpupool_name(spec, pool))
        if tfc is None or gpupool is None:
            return None
        status = (gpupool.get("status") or {}).get("componentStatus") or {}
        progress = status.get(f"{component}UpdateProgress")
        nodes = self.cluster.list(
            TF, "GPUNode", label_selector=f"{GROUP}/pool-{gpupool_name(spec, pool)}=true"
        )
        pending = tuple(
            n["metadata"]["name"]
            for n in nodes
            if (n.get("status") or {}).get("phase", "Pending") == "Pending"
        )
        policy = _rolling_policy(tfc, pool)
        image = self._pool_images(spec).get(pool, {}).get(str(component))
        template_hash = _status_hash(gpupool, component)
        current = image is None or not self._stale(spec, pool, component, image, template_hash)
        return rollout.PoolObservation(
            progress=None if progress is None else int(progress),
            synced=bool(status.get(f"{component}ConfigSynced", False)),
            switch_open=bool(policy.get(SWITCH[component], False)),
            nodes=len(nodes),
            pending_nodes=pending,
            current=current,
        )

    def _stale(
        self,
        spec: ClusterSpec,
        pool: str,
        component: Component,
        image: str,
        template_hash: str | None = None,
    ) -> list[str]:
        """The pool's pods of ``component`` not on ``image`` (observe_pool's ``current``)."""
        if component is Component.HYPERVISOR:
            return self._check_nodes(spec, pool, image, mode="images")
        gp_name = gpupool_name(spec, pool)
        if component is Component.WORKER:
            workers = self.cluster.list("v1", "Pod", None, label_selector=WORKER_SELECTOR)
            pods = _worker_pods(gp_name, self.cluster.list(TF, "TensorFusionWorkload"), workers)
            return _check_pods(component, pool, pods, image, mode="images")
        enabled = self.cluster.list("v1", "Pod", None, label_selector=CLIENT_SELECTOR)
        pods = _client_pods(gp_name, enabled)
        return _check_pods(component, pool, pods, image, mode="images", template_hash=template_hash)

    def set_switch(
        self,
        spec: ClusterSpec,
        pool: str,
        component: Component,
        *,
        open_: bool,
        batch_percentage: int | None = None,
    ) -> None:
        """Open or close one switch in the TFC's pool template (F1: the only place the bot
        turns a rollout on). A merge patch replaces the whole gpuPools list, so it carries
        the resourceVersion read: a concurrent writer makes it fail with KubeConflict."""
        name = tfc_name(spec)
        tfc = self.cluster.get(TF, "TensorFusionCluster", None, name)
        if tfc is None:
            raise PermanentError(f"TensorFusionCluster {name} not found")
        pools = [dict(p) for p in (tfc.get("spec") or {}).get("gpuPools") or []]
        for entry in pools:
            if entry.get("name") != pool:
                continue
            template = dict(entry.get("specTemplate") or {})
            manager = dict(template.get("nodeManagerConfig") or {})
            policy = dict(manager.get("nodePoolRollingUpdatePolicy") or {})
            policy[SWITCH[component]] = open_
            if batch_percentage is not None:
                policy["batchPercentage"] = batch_percentage
            manager["nodePoolRollingUpdatePolicy"] = policy
            template["nodeManagerConfig"] = manager
            entry["specTemplate"] = template
            break
        else:
            raise PermanentError(f"pool {pool} is not in TensorFusionCluster {name}")
        version = (tfc.get("metadata") or {}).get("resourceVersion")
        patch: dict[str, Any] = {"spec": {"gpuPools": pools}}
        if version:
            patch["metadata"] = {"resourceVersion": version}
        self.cluster.patch_merge(TF, "TensorFusionCluster", None, name, patch)

    # -- R15 verification -----------------------------------------------------------------

    def check(
        self,
        spec: ClusterSpec,
        pools: Sequence[str] | None = None,
        *,
        canary: bool = False,
        component: Component | None = None,
        rolled: Mapping[str, Collection[Component]] | None = None,
    ) -> list[str]:
        """Problems found (empty: verified). ``pools`` limits the check.

        ``canary``: after a canary batch of ``component`` (None: the one the GPUPool shows
        mid-rollout, see ``_canary_component``): most of its pods are still on the old image
        and the pool may be Updating; the other components are only checked for Running.
        ``rolled``: pool → components this operation rolled (its POOL_PHASE steps, see
        ``_rolled``); None when not known."""
        problems: list[str] = []
        name = tfc_name(spec)
        tfc = self.cluster.get(TF, "TensorFusionCluster", None, name)
        if tfc is None:
            return [f"TensorFusionCluster {name} not found"]
        if pools is None and (tfc.get("status") or {}).get("phase") != "Running":
            problems.append(f"TensorFusionCluster {name} is {_phase(tfc)}")
        wanted = pools if pools is not None else [p.name for p in spec.rollout.pools]
        images = self._pool_images(spec)
        # Listed once for every pool: worker and client pods live in the apps' namespaces.
        workloads = self.cluster.list(TF, "TensorFusionWorkload")
        workers = self.cluster.list("v1", "Pod", None, label_selector=WORKER_SELECTOR)
        clients = self.cluster.list("v1", "Pod", None, label_selector=CLIENT_SELECTOR)
        for pool in wanted:
            gp_name = gpupool_name(spec, pool)
            gp = self.cluster.get(TF, "GPUPool", None, gp_name)
            if gp is None:
                problems.append(f"GPUPool {gp_name} not found")
                continue
            phase = (gp.get("status") or {}).get("phase")
            if phase != "Running" and not (canary and phase == "Updating"):
                problems.append(f"GPUPool {gp_name} is {_phase(gp)}")
            modes = _check_modes(
                pool,
                canary=canary,
                component=component or (_canary_component(gp) if canary else None),
                rolled=rolled,
            )
            pool_images = images.get(pool, {})
            problems += self._check_nodes(
                spec, pool, pool_images.get("hypervisor"), mode=modes[Component.HYPERVISOR]
            )
            problems += _check_pods(
                Component.WORKER,
                pool,
                _worker_pods(gp_name, workloads, workers),
                pool_images.get("worker"),
                mode=modes[Component.WORKER],
            )
            problems += _check_pods(
                Component.CLIENT,
                pool,
                _client_pods(gp_name, clients),
                pool_images.get("client"),
                mode=modes[Component.CLIENT],
                template_hash=_status_hash(gp, Component.CLIENT),
            )
        return problems

    def _check_nodes(
        self, spec: ClusterSpec, pool: str, image: str | None, *, mode: CheckMode = "verify"
    ) -> list[str]:
        """R15 per GPU node of ``pool``. ``mode``: "verify" reports everything; "images" only
        hypervisor pods on another image than ``image``; "canary" everything except pods
        still on the old image, and requires at least one on the new image; "running"
        everything except the image."""
        problems: list[str] = []
        stale: list[str] = []
        moved = 0
        label = f"{GROUP}/pool-{gpupool_name(spec, pool)}=true"
        nodes = self.cluster.list(TF, "GPUNode", label_selector=label)
        pods = self.cluster.list(
            "v1", "Pod", spec.release.namespace, label_selector=f"{GROUP}/component=hypervisor"
        )
        legacy = {
            p["metadata"]["name"] for p in self.cluster.list("v1", "Pod", spec.release.namespace)
        }
        for node in nodes:
            n = node["metadata"]["name"]
            if (node.get("status") or {}).get("phase") != "Running":
                problems.append(f"GPUNode {n} is {_phase(node)}")
            on_node = [p for p in pods if (p.get("spec") or {}).get("nodeName") == n]
            if f"tf-hypervisor-{n}" in legacy:
                on_node += [{"metadata": {"name": f"tf-hypervisor-{n}"}}]
            names = sorted({p["metadata"]["name"] for p in on_node})
            if len(names) != 1:
                why = (
                    " (F6: a tf-hypervisor-<node> pod from 2.0-2.13 is left)"
                    if any(x.startswith("tf-hypervisor-") for x in names)
                    else ""
                )
                problems.append(f"node {n}: {len(names)} hypervisor pods {names}{why}")
                continue
            pod = on_node[0]
            if (pod.get("status") or {}).get("phase") != "Running":
                problems.append(f"hypervisor pod {names[0]} is {_phase(pod)}")
            running = [c.get("image") for c in (pod.get("spec") or {}).get("containers") or []]
            if image and image not in running:
                stale.append(f"hypervisor pod {names[0]} runs {running}, expected {image}")
            else:
                moved += 1
        return _by_mode(
            mode,
            problems,
            stale,
            none_moved=bool(nodes) and not moved,
            what=(f"pool {pool}: no hypervisor on {image} after the canary batch"),
        )

    def verify(
        self,
        step: Step,
        spec: ClusterSpec,
        now: datetime,
        *,
        rolled: Mapping[str, Collection[Component]] | None = None,
    ) -> StepOutcome:
        problems = self.check(spec, rolled=rolled)
        if not problems and spec.smoke_test is not None:
            return self._smoke_test(step, spec, now)
        if not problems:
            # Wording kept: docs/sandbox.md and docs/demo.md quote it.
            return StepOutcome(StepState.SUCCEEDED, "TFC, pools, nodes and hypervisors Running")
        waited = (now - (step.started_at or now)).total_seconds()
        if waited >= VERIFY_TIMEOUT_SECONDS:
            return StepOutcome(
                StepState.FAILED, "verification failed (R15): " + "; ".join(problems)
            )
        return StepOutcome(StepState.RUNNING, "; ".join(problems), retry_after=RETRY)

    def _smoke_test(self, step: Step, spec: ClusterSpec, now: datetime) -> StepOutcome:
        assert spec.smoke_test is not None
        manifest = dict(spec.smoke_test.manifest)
        meta = dict(manifest.get("metadata") or {})
        meta.setdefault("namespace", spec.release.namespace)
        manifest["metadata"] = meta
        pod = self.cluster.get("v1", "Pod", meta["namespace"], str(meta.get("name")))
        if pod is None:
            self.cluster.create(manifest)
            return StepOutcome(StepState.RUNNING, "smoke test started", retry_after=RETRY)
        phase = (pod.get("status") or {}).get("phase", "Pending")
        if phase == "Succeeded":
            self.cluster.delete("v1", "Pod", meta["namespace"], str(meta.get("name")))
            return StepOutcome(StepState.SUCCEEDED, "verified; smoke test succeeded (R15)")
        waited = (now - (step.started_at or now)).total_seconds()
        if phase == "Failed" or waited >= spec.smoke_test.timeout_seconds:
            # Removed so the next operation's test starts fresh; the result is in the journal.
            self.cluster.delete("v1", "Pod", meta["namespace"], str(meta.get("name")))
            return StepOutcome(StepState.FAILED, f"smoke test {phase} after {int(waited)}s")
        return StepOutcome(StepState.RUNNING, f"smoke test {phase}", retry_after=RETRY)


def _rolled(journal: Journal) -> dict[str, frozenset[Component]]:
    """Pool → components this operation rolled: its POOL_PHASE steps (the plan has one only
    for a component whose switch the policy turns on, F3)."""
    out: dict[str, set[Component]] = {}
    for step in journal.steps:
        rolls = step.kind is StepKind.POOL_PHASE and step.state is not StepState.SKIPPED
        if rolls and step.component is not None:
            out.setdefault(step.pool, set()).add(step.component)
    return {pool: frozenset(components) for pool, components in out.items()}


def _canary_component(gpupool: Mapping[str, Any]) -> Component:
    """The component whose canary batch just ran, when the caller does not say: the first
    one with R14 progress strictly between 0 and 100 (phases of a pool run one at a time,
    hypervisor first, and a canary pause leaves the progress at the canary batch's share);
    the hypervisor when none is."""
    status = (gpupool.get("status") or {}).get("componentStatus") or {}
    for component in Component:
        progress = status.get(f"{component}UpdateProgress")
        if isinstance(progress, int | float) and 0 < progress < 100:
            return component
    return Component.HYPERVISOR


def _check_modes(
    pool: str,
    *,
    canary: bool,
    component: Component | None,
    rolled: Mapping[str, Collection[Component]] | None,
) -> dict[Component, CheckMode]:
    """How each component of ``pool`` is checked (see ``Executor.check``)."""
    if canary:
        # Only the component whose canary batch ran is judged on images; the final VERIFY
        # step checks the others.
        first = component or Component.HYPERVISOR
        return {c: "canary" if c is first else "running" for c in Component}
    done = rolled.get(pool, ()) if rolled is not None else ()
    return {
        # R15 names the hypervisor's image: it is always compared, as before.
        Component.HYPERVISOR: "verify",
        # F3: worker and client roll only when the bot turns them on. A component this
        # operation did not roll keeps its old image legitimately, so its pods are checked
        # for Running (R15) but kept out of the image check.
        Component.WORKER: "verify" if Component.WORKER in done else "running",
        Component.CLIENT: "verify" if Component.CLIENT in done else "running",
    }


def _worker_pods(
    gp_name: str, workloads: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """Worker pods of the GPUPool ``gp_name``: a TensorFusionWorkload names its pool in
    ``spec.poolName`` (the rollout counts it by its ``gpupool`` label, facts §3.5: either
    will do), its pods carry ``tensor-fusion.ai/workload=<name>`` in its namespace."""
    mine = {
        (str(w["metadata"].get("namespace") or ""), str(w["metadata"]["name"]))
        for w in workloads
        if gp_name in ((w.get("spec") or {}).get("poolName"), _labels(w).get(f"{GROUP}/gpupool"))
    }
    return [
        p
        for p in pods
        if (str(p["metadata"].get("namespace") or ""), _labels(p).get(f"{GROUP}/workload")) in mine
    ]


def _pod_images(component: Component, pod: Mapping[str, Any]) -> list[str]:
    """Images that show the pod's version: the worker's main container (``containers[0]``,
    where the controller puts ``componentConfig.worker.image``); for a client-injected app
    pod, the webhook's init container from ``componentConfig.client.image`` (facts §3.3,
    §3.6), listed first, then the app's own containers."""
    spec = pod.get("spec") or {}
    containers = list(spec.get("containers") or [])
    if component is Component.WORKER:
        containers = containers[:1]
    else:
        containers = list(spec.get("initContainers") or []) + containers
    return [str(c.get("image") or "") for c in containers]


def _client_pods(gp_name: str, enabled: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The client component's pods of the GPUPool ``gp_name``, as the controller counts them
    (facts §3.6): ``tensor-fusion.ai/enabled=true`` pods labelled with the pool, which include
    local-GPU app pods (their component label is ``worker``)."""
    return [p for p in enabled if _labels(p).get(f"{GROUP}/gpupool") == gp_name]


def _status_hash(gpupool: Mapping[str, Any], component: Component) -> str | None:
    status = (gpupool.get("status") or {}).get("componentStatus") or {}
    found = status.get(str(component))
    return str(found) if found else None


def _check_pods(
    component: Component,
    pool: str,
    pods: Sequence[Mapping[str, Any]],
    image: str | None,
    *,
    mode: CheckMode,
    template_hash: str | None = None,
) -> list[str]:
    """R15 for the worker or client pods of ``pool``, in the modes of ``_check_nodes``.
    Pods being deleted (the rollout replaces them) and finished ones are not judged."""
    problems: list[str] = []
    stale: list[str] = []
    moved = 0
    for pod in pods:
        meta = pod.get("metadata") or {}
        phase = (pod.get("status") or {}).get("phase")
        if meta.get("deletionTimestamp") or phase == "Succeeded":
            continue
        ref = f"{meta.get('namespace')}/{meta.get('name')}"
        if phase != "Running":
            problems.append(f"{component} pod {ref} is {_phase(pod)}")
        carried = _pod_images(component, pod)
        local_gpu = (
            component is Component.CLIENT and _labels(pod).get(f"{GROUP}/component") == "worker"
        )
        hashed = _labels(pod).get(f"{GROUP}/pod-template-hash")
        if image and not local_gpu and image not in carried:
            # A local-GPU pod runs no injected client image: the hash below judges it.
            stale.append(
                f"{component} pod {ref} runs {', '.join(carried) or 'no image'}, expected {image}"
            )
        elif template_hash and hashed != template_hash:
            # The controller's own outdated test (facts §3.6): the webhook stamps the
            # pool's client hash on every pod it injects, local-GPU ones included.
            stale.append(
                f"{component} pod {ref} has template hash {hashed or 'none'}, "
                f"expected {template_hash}"
            )
        else:
            moved += 1
    return _by_mode(
        mode,
        problems,
        stale,
        none_moved=bool(stale) and not moved,
        what=(f"pool {pool}: no {component} pod on {image} after the canary batch"),
    )


def _by_mode(
    mode: CheckMode, problems: list[str], stale: list[str], *, none_moved: bool, what: str
) -> list[str]:
    """What a check reports, per mode: "images" only the pods on another image; "canary"
    everything but those, plus ``what`` when no pod moved to the new image; "running"
    everything but the image; "verify" everything."""
    if mode == "images":
        return stale
    if mode == "canary":
        return [*problems, what] if none_moved else problems
    if mode == "running":
        return problems
    return problems + stale


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    found: Mapping[str, str] = (obj.get("metadata") or {}).get("labels") or {}
    return found


def _rolling_policy(tfc: Mapping[str, Any], pool: str) -> Mapping[str, Any]:
    for entry in (tfc.get("spec") or {}).get("gpuPools") or []:
        if entry.get("name") == pool:
            template = entry.get("specTemplate") or {}
            manager = template.get("nodeManagerConfig") or {}
            found: Mapping[str, Any] = manager.get("nodePoolRollingUpdatePolicy") or {}
            return found
    return {}


def _phase(obj: Mapping[str, Any]) -> str:
    return str((obj.get("status") or {}).get("phase") or "without a phase")
