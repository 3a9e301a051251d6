"""A person's own ``helm upgrade`` after the bot, on the real server (issue 16 part 5b), with
real helm 3 and helm 4: what docs/helm.md "Break-glass" and docs/executor.md say happens.

The bot (its ServiceAccount, deploy/rbac/rules.yaml) upgrades the release with helm 4, its
post-renderer and ``--server-side=true --force-conflicts``, and turns a pool switch as a
rollout does (a merge patch of ``.spec.gpuPools``, then ``release_fields``). Then a person
(cluster admin) runs the product page's command, ``helm upgrade <release> <chart> -n <ns>
-f values.yaml``, changing a pool value (the hypervisor image, inside ``.spec.gpuPools``)."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gitopsbot.adapters.secrets import SecretResolver
from gitopsbot.bot.steps.executor import Executor
from gitopsbot.core.fleet.model import ClusterSpec, Component
from gitopsbot.core.operations import operation
from gitopsbot.core.records.journal import Journal, OperationKind, StepState
from gitopsbot.sandbox.chartrepo import ChartRepo
from tests.realkube import tf_support as tfs

pytestmark = [pytest.mark.realkube, pytest.mark.slow]

NEW_IMAGE = "tensorfusion/tensor-fusion-hypervisor:2.16.0"
T0 = datetime(2026, 12, 3, tzinfo=UTC)


@dataclass
class Scene:
    plane: Any
    ns: str
    tfc: str
    bot: tfs.Bot
    ex: Executor
    spec: ClusterSpec
    person_helm: list[str]
    person_env: dict[str, str]
    values: Path
    kubeconfig: Path
    kubectl: str
    major: str
    ops: int = 0

    def bot_upgrade(self) -> str:
        """The bot's helm-upgrade step of a new operation (same chart, Git's values)."""
        self.ops += 1
        journal: Journal = operation.new_operation(
            kind=OperationKind.ROLLOUT_ONLY,
            cluster=tfs.CLUSTER,
            desired_sha=f"{self.ops:012x}".ljust(40, "0"),  # the op id takes 12 characters
            created_at=T0,
            policy=self.spec.rollout,
        )
        out = self.ex.run(journal.step("helm-upgrade"), journal, self.spec, now=datetime.now(UTC))
        assert out.state is StepState.SUCCEEDED, out.detail
        return str(out.detail)

    def switch(self, open_: bool) -> None:
        self.ex.set_switch(self.spec, "shared", Component.HYPERVISOR, open_=open_)

    def person(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.person_helm, *args],
            env=self.person_env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def upgrade_by_hand(self, *flags: str) -> subprocess.CompletedProcess[str]:
        return self.person(
            "upgrade", tfs.RELEASE, str(tfs.EXAMPLE_CHART), "-n", self.ns, "-f", str(self.values),
            *flags,
        )  # fmt: skip

    def tfc_object(self) -> dict[str, Any]:
        found: dict[str, Any] = self.plane.request(
            "GET", f"/apis/tensor-fusion.ai/v1/tensorfusionclusters/{self.tfc}"
        )
        return found

    def pool(self) -> dict[str, Any]:
        pool: dict[str, Any] = self.tfc_object()["spec"]["gpuPools"][0]["specTemplate"]
        return pool

    def image(self) -> str:
        return str(self.pool()["componentConfig"]["hypervisor"]["image"])

    def policy(self) -> dict[str, Any]:
        policy: dict[str, Any] = self.pool()["nodeManagerConfig"]["nodePoolRollingUpdatePolicy"]
        return policy

    def pool_owners(self) -> list[tuple[str, str]]:
        return [
            (e["manager"], e["operation"])
            for e in self.tfc_object()["metadata"].get("managedFields") or []
            if "f:gpuPools" in (e.get("fieldsV1") or {}).get("f:spec", {})
        ]


@pytest.fixture
def scene(
    control_plane: Any,
    realkube_namespace: str,
    binaries: dict[str, Path],
    tensor_fusion: Path,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[Scene]:
    ns = realkube_namespace
    tfc = f"tfc-{ns}"
    with (
        ChartRepo(tfs.CHART_REPO) as repo,
        tfs.bot_as_service_account(control_plane, ns, binaries, tmp_path / "bot") as bot,
    ):
        assert all(r.ok for r in bot.kubectl.apply_crds(tfs.real_crds(tensor_fusion)))
        spec = tfs.fleet_spec(tmp_path / "fleet", namespace=ns, repo=repo, tfc=tfc)
        ex = Executor(cluster=bot.kube, helm=bot.helm, secrets=SecretResolver(bot.kube))
        values = tmp_path / "values.yaml"
        values.write_text(f"cluster:\n  name: {tfc}\n  hypervisorImage: {NEW_IMAGE}\n")
        admin = control_plane.write_kubeconfig(tmp_path / "person.kubeconfig")
        home = tmp_path / "person"
        home.mkdir()
        person_env = {"PATH": os.environ["PATH"], "HOME": str(home),
                      "XDG_CACHE_HOME": str(home / ".cache"),
                      "XDG_CONFIG_HOME": str(home / ".config"),
                      "XDG_DATA_HOME": str(home / ".local" / "share")}  # fmt: skip
        person_helm = [str(binaries[request.param]), "--kubeconfig", str(admin)]
        s = Scene(control_plane, ns, tfc, bot, ex, spec, person_helm, person_env, values,
                  admin, str(binaries["kubectl"]), request.param)  # fmt: skip
        try:
            s.bot_upgrade()  # the install, through the post-renderer: every switch closed
            assert s.policy()["autoUpdateHypervisor"] is False
            yield s
        finally:
            tfs.delete_cluster_objects(control_plane, tfc)


def _ok(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("scene", ["helm3", "helm4"], indirect=True)
def test_after_the_bots_rollout_a_plain_helm_upgrade_works(scene: Scene) -> None:
    s = scene
    s.switch(open_=True)
    s.switch(open_=False)
    assert s.pool_owners() == []  # the bot released its fields; helm lost them to its patch
    _ok(s.upgrade_by_hand())
    assert s.image() == NEW_IMAGE
    # No post-renderer: the chart's own pool policy is deployed, its switch on. The
    # TensorFusion controller would now roll every node on its own (F1) until the bot's next
    # upgrade closes it again.
    assert s.policy()["autoUpdateHypervisor"] is True
    s.bot_upgrade()
    assert s.policy()["autoUpdateHypervisor"] is False
    assert s.image() != NEW_IMAGE  # Git's values again: the person's change is undone


@pytest.mark.parametrize("scene", ["helm3", "helm4"], indirect=True)
def test_during_a_rollout_a_plain_helm_upgrade_works_and_reopens_nothing_of_the_bot(
    scene: Scene,
) -> None:
    """docs/helm.md said helm 4 conflicts while a switch is open; it does not: the bot
    releases its fields after opening a switch too."""
    s = scene
    s.switch(open_=True)
    assert s.policy()["autoUpdateHypervisor"] is True
    _ok(s.upgrade_by_hand())
    assert s.image() == NEW_IMAGE


@pytest.mark.parametrize("scene", ["helm3", "helm4"], indirect=True)
def test_fields_another_manager_took_conflict_with_helm4_only(scene: Scene) -> None:
    s = scene
    # ``kubectl edit`` of a pool value: an Update by manager "kubectl-edit" that takes the
    # whole atomic list .spec.gpuPools.
    tfc = s.tfc_object()
    tfc["spec"]["gpuPools"][0]["specTemplate"]["componentConfig"]["hypervisor"]["image"] = "x:1"
    query = urllib.parse.urlencode({"fieldManager": "kubectl-edit"})
    s.plane.request("PUT", f"/apis/tensor-fusion.ai/v1/tensorfusionclusters/{s.tfc}?{query}", tfc)
    assert ("kubectl-edit", "Update") in s.pool_owners()
    done = s.upgrade_by_hand()
    if s.major == "helm3":
        _ok(done)  # client-side: no field ownership is checked
        assert s.image() == NEW_IMAGE
        return
    assert done.returncode != 0
    assert 'conflict with "kubectl-edit"' in done.stderr, done.stderr
    assert ".spec.gpuPools" in done.stderr
    assert s.image() == "x:1"
    # The doc's way out: release the other manager's fields (its recipe, as kubectl runs it).
    meta = s.tfc_object()["metadata"]
    kept = [e for e in meta["managedFields"] if e["manager"] != "kubectl-edit"] or [{}]
    patch = s.values.parent / "release.json"
    body = {"metadata": {"resourceVersion": meta["resourceVersion"], "managedFields": kept}}
    patch.write_text(json.dumps(body))
    subprocess.run(
        [s.kubectl, "--kubeconfig", str(s.kubeconfig), "patch", "tensorfusioncluster", s.tfc,
         "--type=merge", "--patch-file", str(patch)],
        check=True, capture_output=True,
    )  # fmt: skip
    _ok(s.upgrade_by_hand())
    assert s.image() == NEW_IMAGE


@pytest.mark.parametrize("scene", ["helm4"], indirect=True)
def test_helm4_force_conflicts_and_client_side_ways_out(scene: Scene) -> None:
    s = scene

    def edit_by_hand() -> None:
        tfc = s.tfc_object()
        tfc["spec"]["gpuPools"][0]["specTemplate"]["componentConfig"]["hypervisor"]["image"] = "x"
        query = urllib.parse.urlencode({"fieldManager": "kubectl-edit"})
        path = f"/apis/tensor-fusion.ai/v1/tensorfusionclusters/{s.tfc}?{query}"
        s.plane.request("PUT", path, tfc)

    edit_by_hand()
    _ok(s.upgrade_by_hand("--force-conflicts"))
    assert s.image() == NEW_IMAGE
    assert ("helm", "Apply") in s.pool_owners()

    # --server-side=false never conflicts. It repairs nothing either when the chart renders
    # what the last revision did: helm's client-side patch leaves the hand edit as it is.
    edit_by_hand()
    _ok(s.upgrade_by_hand("--server-side=false"))
    assert s.image() == "x"
    assert ("kubectl-edit", "Update") in s.pool_owners()
    # --server-side=auto follows the last revision: client-side now, so no conflict with
    # "kubectl-edit" either (server-side it would be one, as above).
    _ok(s.upgrade_by_hand())
    assert s.image() == "x"
    # The bot says --server-side=true: its next upgrade is server-side whatever came before.
    s.bot_upgrade()
    assert s.image() != NEW_IMAGE
    assert s.policy()["autoUpdateHypervisor"] is False
