"""``app.event_recorder`` as ``build_bot`` wires it: one KubeEvents per cluster over the
cluster's connection (``app.cluster_connection``, the same as its KubeCluster), the replica
as ``reportingInstance``, and the secrets app names masked in every note."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from gitopsbot import app
from gitopsbot.adapters.cluster_access import ClusterAccess, ServiceAccountFiles
from gitopsbot.adapters.kube_events import KubeEvents
from gitopsbot.core.fleet.model import ClusterSpec
from gitopsbot.core.notices.happenings import Happening, HappeningKind
from gitopsbot.core.notices.kube_events import ObjectRef
from gitopsbot.core.records.journal import OperationKind
from gitopsbot.core.rollouts import tf_objects as tf
from gitopsbot.sandbox.apiserver import ApiServer
from tests.core.plan_builders import cluster, desired_values
from tests.events.conftest import install_objects
from tests.kube_pods import KubeServer

SECRET = "s3cret-of-the-cluster"


def test_the_wired_recorder_posts_on_the_clusters_connection(tmp_path: Path) -> None:
    spec = cluster(values=desired_values(cluster={"name": "tf-wired"}))
    api = ApiServer()
    api.start()
    try:
        config = api.write_kubeconfig(tmp_path / "kubeconfig")
        install_objects(KubeServer("emulator", api.url, config, "default", emulator=api),
                        "tf-wired", "tf-wired-a")  # fmt: skip
        reach = ClusterAccess(
            kubeconfig=str(config), service_account=ServiceAccountFiles(tmp_path / "no-sa"),
            service=None, temp_root=tmp_path,
        )  # fmt: skip
        asked: list[tuple[str, str]] = []

        def spec_at(sha: str, name: str) -> ClusterSpec | None:
            asked.append((sha, name))
            return spec

        recorder = app.event_recorder(
            reach, spec_at, instance="gitopsbot-0-abc123",
            now=lambda: datetime.now(UTC), secrets_for=lambda _c: (SECRET,),
        )  # fmt: skip
        failed = Happening(HappeningKind.STEP_FAILED, spec.name, "op-1", OperationKind.UPGRADE,
                           "b" * 40, step="pool/a/hypervisor", pool="a",
                           detail=f"helm said {SECRET}")  # fmt: skip
        recorder.happened(failed)
        assert recorder.flush(10)
        recorder.close()
        assert asked == [("b" * 40, spec.name)]
        reader = KubeEvents.from_kubeconfig(config, instance="reader")
        for kind, name in (("TensorFusionCluster", "tf-wired"), ("GPUPool", "tf-wired-a")):
            [event] = reader.recorded(ObjectRef(tf.TF, kind, name))
            assert event.instance == "gitopsbot-0-abc123"
            assert event.spec.note.endswith("failed: helm said ***"), event.spec.note
        reader.close()
        reach.close()
    finally:
        api.stop()
