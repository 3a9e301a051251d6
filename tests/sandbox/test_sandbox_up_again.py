"""`gitopsbot sandbox up` on the state a first `up` left, after the bot touched the cluster.

Covers: the bot's merge patch of a pool switch (field manager "gitopsbot", owning the atomic
``.spec.gpuPools``) and a revision left pending-upgrade by a helm that died with the sandbox
no longer make the second `up` fail: its helm 4 ``upgrade --install`` conflicted with
"gitopsbot" on ``.spec.gpuPools`` (and would have been refused as "another operation is in
progress"). The second `up` marks the dead revision failed, releases the bot's fields, and
installs a new revision; the cluster and its pools come back Running.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gitopsbot.adapters.kube import KubeCluster

ROOT = Path(__file__).resolve().parents[2]
TF = "tensor-fusion.ai/v1"
NS = "tensor-fusion-sys"
RELEASE = "tensor-fusion-sys"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gitopsbot", "sandbox", *args],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
        env={**os.environ},
    )


def _close_a_switch_as_the_bot_does(kube: KubeCluster) -> None:
    (tfc,) = kube.list(TF, "TensorFusionCluster")
    pools = tfc["spec"]["gpuPools"]
    policy = pools[0]["specTemplate"]["nodeManagerConfig"]["nodePoolRollingUpdatePolicy"]
    policy["autoUpdateHypervisor"] = False
    patch = {"metadata": {"resourceVersion": tfc["metadata"]["resourceVersion"]},
             "spec": {"gpuPools": pools}}  # fmt: skip
    kube.patch_merge(TF, "TensorFusionCluster", None, tfc["metadata"]["name"], patch)


def _leave_a_pending_revision(kube: KubeCluster) -> int:
    """What a helm upgrade killed with the sandbox leaves: the next revision's release Secret,
    pending-upgrade (helm writes it before applying anything)."""
    secrets = kube.list("v1", "Secret", NS, label_selector=f"owner=helm,name={RELEASE}")
    latest = max(secrets, key=lambda s: int(s["metadata"]["labels"]["version"]))
    packed = base64.b64decode(base64.b64decode(latest["data"]["release"]))
    record = json.loads(gzip.decompress(packed))
    revision = int(record["version"]) + 1
    record["version"] = revision
    record["info"]["status"] = "pending-upgrade"
    record["info"]["description"] = "Preparing upgrade"
    data = base64.b64encode(gzip.compress(json.dumps(record).encode()))
    labels = {"name": RELEASE, "owner": "helm", "status": "pending-upgrade",
              "version": str(revision)}  # fmt: skip
    kube.create({
        "apiVersion": "v1", "kind": "Secret", "type": "helm.sh/release.v1",
        "metadata": {"name": f"sh.helm.release.v1.{RELEASE}.v{revision}", "namespace": NS,
                     "labels": labels},
        "data": {"release": base64.b64encode(data).decode()},
    })  # fmt: skip
    return revision


def _history(helm: Path, kubeconfig: Path, home: Path) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [str(helm), "--kubeconfig", str(kubeconfig), "-n", NS, "history", RELEASE, "-o", "json"],
        capture_output=True,
        text=True,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home)},
        check=True,
    )
    history: list[dict[str, Any]] = json.loads(proc.stdout)
    return history


@pytest.mark.slow
def test_second_up_after_the_bot_touched_the_cluster(
    tmp_path: Path, binaries: dict[str, Path]
) -> None:
    state_dir = tmp_path / "sbx"
    kubeconfig = state_dir / "kubeconfig"
    home = tmp_path / "home"
    up_args = ("up", "--state-dir", str(state_dir), "--nodes", "1", "--no-fleet")
    try:
        first = _cli(*up_args)
        assert first.returncode == 0, first.stdout + first.stderr
        kube = KubeCluster.from_kubeconfig(kubeconfig)
        try:
            _close_a_switch_as_the_bot_does(kube)
            pending = _leave_a_pending_revision(kube)
        finally:
            kube.close()
        assert [h["status"] for h in _history(binaries["helm4"], kubeconfig, home)][-1] == (
            "pending-upgrade"
        )
        down = _cli("down", "--state-dir", str(state_dir))
        assert down.returncode == 0, down.stdout + down.stderr

        second = _cli(*up_args)
        assert second.returncode == 0, second.stdout + second.stderr
        assert "sandbox ready" in second.stdout
        history = _history(binaries["helm4"], kubeconfig, home)
        assert [(h["revision"], h["status"]) for h in history[-2:]] == [
            (pending, "failed"),
            (pending + 1, "deployed"),
        ]
        assert "marked failed by `gitopsbot sandbox up`" in history[-2]["description"]
        kube = KubeCluster.from_kubeconfig(kubeconfig)
        try:
            (tfc,) = kube.list(TF, "TensorFusionCluster")
        finally:
            kube.close()
        assert tfc["status"]["phase"] == "Running"
        assert "gitopsbot" not in {e["manager"] for e in tfc["metadata"]["managedFields"]}
        # helm took the pools back: the chart's switch, not the bot's.
        policy = tfc["spec"]["gpuPools"][0]["specTemplate"]["nodeManagerConfig"]
        assert policy["nodePoolRollingUpdatePolicy"]["autoUpdateHypervisor"] is True
    finally:
        down = _cli("down", "--state-dir", str(state_dir))
    assert down.returncode == 0, down.stdout + down.stderr
