"""The whole story as the bot's ServiceAccount (issue 16 part 5a): the demo's upgrade and its
rollback by ``git revert``, the full reconciler on the real server with the controller
simulator, the bot bound to exactly deploy/rbac/rules.yaml and the Events Role in
``default`` (docs/permissions.md), with which it tells the rollback as Events on the
TensorFusionCluster. The sandbox (its install, the simulator) keeps the admin's kubeconfig;
only the bot's executor (helm 4, kubectl, the Python client), its Events and the test's
``helm history`` use the ServiceAccount's. With these rules the bot's waits (controller-ready,
verification, the pool passes) follow the API server's watch: no watch is refused, so none of
them falls back to polling (#13)."""

from __future__ import annotations

import logging
import urllib.error
from pathlib import Path
from typing import Any

import pytest

from gitopsbot.adapters.kube import KubeCluster
from gitopsbot.adapters.kube_events import KubeEvents
from gitopsbot.core.notices.kube_events import ObjectRef
from gitopsbot.core.records.journal import OperationKind, OperationStatus, StepState
from gitopsbot.core.rollouts import tf_objects as tf
from gitopsbot.errors import KubeForbidden
from gitopsbot.sandbox.story import StoryOptions, StoryWorld
from gitopsbot.sandbox.story_bot import BotRunner
from gitopsbot.sandbox.story_waits import finished_op, wait_for
from tests.e2e.conftest import NEW_IMAGE, NS, OLD_IMAGE, helm_history, stop_within
from tests.events.test_events_rbac import _bind as bind_events
from tests.events.test_events_rbac import _unbind as unbind_events
from tests.realkube import tf_support as tfs

pytestmark = [pytest.mark.realkube, pytest.mark.slow, pytest.mark.timeout(900)]

KUBE_CONTEXT = "sandbox"  # the story fleet's kubeContext


class ServiceAccountWorld(StoryWorld):
    """The story world whose bot reaches the cluster through ``bot_kubeconfig``."""

    bot_kubeconfig: Path | None = None

    @property
    def kubeconfig(self) -> Path:
        return self.bot_kubeconfig or super().kubeconfig

    @property
    def admin_kubeconfig(self) -> Path:
        return super().kubeconfig


def test_the_story_upgrades_and_rolls_back_as_the_service_account(
    control_plane: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The kube adapter logs each kind whose watch the server refused (it polls it from then on).
    caplog.set_level(logging.INFO, logger="gitopsbot.adapters.kube")
    options = StoryOptions(
        state_dir=tmp_path / "world", window_lead_seconds=None, control_plane=control_plane
    )
    world = ServiceAccountWorld(options)
    world.start()  # installs 1.8.0 as the admin
    bot: BotRunner | None = None
    try:
        token = control_plane.service_account_token(NS, tfs.SA)
        tfs.grant(control_plane, NS, *tfs.load_rules())
        bind_events(control_plane, NS, ["create", "patch"])
        world.bot_kubeconfig = control_plane.write_kubeconfig(
            tmp_path / "sa.kubeconfig", token=token, context=KUBE_CONTEXT, namespace=NS
        )
        # The executor's kubeconfig is the ServiceAccount's: it may not list namespaces.
        probe = KubeCluster.from_kubeconfig(world.kubeconfig, KUBE_CONTEXT)
        try:
            with pytest.raises(KubeForbidden, match='cannot list resource "namespaces"'):
                probe.list("v1", "Namespace")
        finally:
            probe.close()
        bot = BotRunner(world).start()
        merge_sha = world.merge(world.propose().number)
        upgrade = wait_for(world, finished_op(OperationKind.UPGRADE), what="the upgrade",
                           timeout=300)  # fmt: skip
        assert (upgrade.status, upgrade.failure) == (OperationStatus.SUCCEEDED, "")
        assert [s.name for s in upgrade.steps if s.state is not StepState.SUCCEEDED] == []
        assert "crds" in [s.name for s in upgrade.steps]
        images = world.hypervisor_images()
        assert images and images == {node: [NEW_IMAGE] for node in images}

        world.revert(merge_sha)
        bot.scheduler.nudge()
        rollback = wait_for(world, finished_op(OperationKind.ROLLBACK, after=upgrade.op_id),
                            what="the rollback", timeout=300)  # fmt: skip
        assert (rollback.status, rollback.failure) == (OperationStatus.SUCCEEDED, "")
        history = helm_history(world)  # read as the ServiceAccount too
        assert history[-1]["chart"] == "tensor-fusion-1.8.0"
        images = world.hypervisor_images()
        assert images == {node: [OLD_IMAGE] for node in images}

        # Told as Kubernetes Events, posted as the ServiceAccount (docs/events.md).
        assert bot.events.flush(30)
        admin = KubeEvents.from_kubeconfig(world.admin_kubeconfig, instance="test")
        try:
            told = admin.recorded(ObjectRef(tf.TF, "TensorFusionCluster", "tensor-fusion"))
        finally:
            admin.close()
        of_rollback = [(e.spec.reason, e.spec.type, e.spec.action) for e in told
                       if rollback.op_id in e.spec.note]  # fmt: skip
        assert of_rollback[0] == ("Started", "Warning", "Rollback"), of_rollback
        assert of_rollback[-1] == ("Succeeded", "Normal", "Rollback"), of_rollback
        assert ("Succeeded", "Upgrade") in [
            (e.spec.reason, e.spec.action) for e in told if upgrade.op_id in e.spec.note
        ]
        refused = [r.getMessage() for r in caplog.records if "cannot watch" in r.getMessage()]
        assert refused == [], "a wait polled: the rules lack a watch it follows"
    finally:
        if bot is not None:
            stop_within(bot.stop, "the bot")
        stop_within(world.stop, "the story world")
        unbind_events(control_plane, NS)
        name = f"gitopsbot-{NS}"
        for kind in ("clusterrolebindings", "clusterroles"):
            try:
                control_plane.request("DELETE", f"{tfs.RBAC}/{kind}/{name}")
            except urllib.error.HTTPError as e:
                if e.code != 404:
                    raise
