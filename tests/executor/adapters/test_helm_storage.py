"""Releases read from Helm's Secret storage (HelmStorage) give what helm itself prints.

Contract: the same scenarios read both ways, with real helm 3 and helm 4 on the API emulator
and on the real kube-apiserver (``[realkube]``): HelmCli without a reader (``helm history``,
``helm get values``) and HelmCli with ``releases=HelmStorage(...)`` (no helm process) give
equal ``status``, ``history`` and ``get_values`` (latest, each revision, revision 0, a
missing revision and a missing release failing both ways) after an install with values of
every JSON type, an upgrade with our description, a failed upgrade (422), a rollback, a
revision whose values are null and a forged pending-upgrade revision (which the storage
path's upgrade refuses without running helm to look).

Beyond that: an upgrade runs no helm process to read the release (3 before: the step's
history, the pending check, the result); helm run with HELM_DRIVER=configmap reads with helm
(the Secrets are not the release); a corrupt or odd release Secret fails with HelmFailed
naming the Secret, and a canary secret in it reaches no exception, traceback or log; API
failures through HelmCli: a transient one is retried with helm's budget and counted, a
refusal (403) names the helm verb and the RBAC it needs; on the real kube-apiserver, the
bot's ServiceAccount bound to deploy/rbac/rules.yaml reads the release this way.
"""

from __future__ import annotations

import base64
import gzip
import json
import logging
import os
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gitopsbot.adapters import helm_children
from gitopsbot.adapters import helm_runner as helm_module
from gitopsbot.adapters.helm import RETRY_DELAYS, HelmCli
from gitopsbot.adapters.helm_storage import HelmStorage, history_entry
from gitopsbot.adapters.kube import KubeCluster
from gitopsbot.core.charts.observed import HelmReleaseStatus
from gitopsbot.errors import (
    HelmFailed,
    HelmReleaseLocked,
    KubeForbidden,
    KubeServerError,
)
from gitopsbot.ports.helm import ChartRef, RollbackRequest, UpgradeRequest
from gitopsbot.testing import FakeCluster
from tests.executor.adapters.conftest import _on_server

pytestmark = pytest.mark.slow

CANARY = "canary-Hs7k2-storage-token-value"
REL = "demo"
VALUES: dict[str, Any] = {
    "name": "first",
    "nested": {"list": [1, 2.5, True, None, "ü<&>"], "empty": {}},
    "big": 12345678901234567890,
    "float": 0.1,
    "token": CANARY,
}


@dataclass
class Both:
    """One helm binary on one server, read two ways; ``kube`` sets things up."""

    helm: HelmCli  # reads with helm
    storage: HelmCli  # reads Helm's Secrets
    kube: KubeCluster
    namespace: str
    charts: Path

    def chart(self, version: str) -> ChartRef:
        return ChartRef(path=str(self.charts / version / "demo"))

    def same(self, release: str = REL) -> list[Any]:
        """Everything read both ways, asserted equal; the helm answers."""
        ns = self.namespace
        history = self.helm.history(release, ns)
        assert self.storage.history(release, ns) == history
        assert self.storage.status(release, ns) == self.helm.status(release, ns)
        assert self.helm.status(release, ns) == (history[-1] if history else None)
        for revision in [None, 0, *(h.revision for h in history)] if history else []:
            want = self.helm.get_values(release, ns, revision)
            assert self.storage.get_values(release, ns, revision) == want, revision
        # A revision that is not there (the latest of no release too) fails both ways.
        for missing in [len(history) + 5] + ([] if history else [None]):
            with pytest.raises(HelmFailed, match="not found"):
                self.helm.get_values(release, ns, missing)
            with pytest.raises(HelmFailed, match="not found"):
                self.storage.get_values(release, ns, missing)
        return history


def _write_chart(root: Path, version: str, app_version: str) -> None:
    chart = root / version / "demo"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text(
        f"apiVersion: v2\nname: demo\nversion: {version}\nappVersion: {app_version!r}\n"
    )
    (chart / "templates" / "cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: demo-{{ .Release.Revision }}\n"
        'data:\n  name: {{ .Values.name | default "none" | quote }}\n'
    )
    # A value the API server refuses (422, on both servers): a failed revision.
    (chart / "templates" / "svc.yaml").write_text(
        "{{- if .Values.ip }}\napiVersion: v1\nkind: Service\nmetadata:\n  name: demo\n"
        "spec:\n  clusterIP: {{ .Values.ip | quote }}\n  ports:\n    - port: 80\n{{- end }}\n"
    )


@pytest.fixture
def charts(tmp_path: Path) -> Path:
    root = tmp_path / "charts"
    _write_chart(root, "0.1.0", "1.0")
    _write_chart(root, "0.2.0", "2.0")
    return root


@pytest.fixture(
    params=[
        "helm3-emulator",
        "helm4-emulator",
        pytest.param("helm3-realkube", marks=pytest.mark.realkube),
        pytest.param("helm4-realkube", marks=pytest.mark.realkube),
    ]
)
def both(
    request: pytest.FixtureRequest, tmp_path: Path, sleeps: list[float], charts: Path
) -> Iterator[Both]:
    tool, which = request.param.split("-")
    binaries: dict[str, Path] = request.getfixturevalue("binaries")
    with _on_server(which, request, tmp_path, sleeps) as (server, kube):
        common: dict[str, Any] = dict(home=tmp_path / "helm-home", kubeconfig=server.kubeconfig)
        yield Both(
            HelmCli(binaries[tool], **common),
            HelmCli(binaries[tool], **common, releases=HelmStorage(kube)),
            kube,
            server.namespace,
            charts,
        )


def _up(helm: HelmCli, both: Both, version: str, values: Mapping[str, Any], step: str) -> Any:
    return helm.upgrade(UpgradeRequest(
        release=REL, namespace=both.namespace, chart=both.chart(version), version=version,
        values=values, description=f"gitopsbot op=op-7 step={step}",
    ))  # fmt: skip


def _forge(
    kube: KubeCluster,
    namespace: str,
    change: Callable[[dict[str, Any]], None],
    *,
    status: str,
    release: str = REL,
) -> int:
    """The next revision of ``release`` written by hand in Helm's format (a copy of the
    latest, changed by ``change``), as a helm that died mid-write leaves one."""
    secrets = kube.list("v1", "Secret", namespace, label_selector=f"owner=helm,name={release}")
    latest = max(secrets, key=lambda s: int(s["metadata"]["labels"]["version"]))
    record = json.loads(
        gzip.decompress(base64.b64decode(base64.b64decode(latest["data"]["release"])))
    )
    revision = int(record["version"]) + 1
    record["version"] = revision
    record["info"]["status"] = status
    change(record)
    _create_release_secret(kube, namespace, release, revision, status, _pack(record))
    return revision


def _pack(record: Any) -> str:
    return base64.b64encode(gzip.compress(json.dumps(record).encode())).decode()


def _create_release_secret(
    kube: Any, namespace: str, release: str, revision: int, status: str, helm_b64: str
) -> None:
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "helm.sh/release.v1",
            "metadata": {
                "name": f"sh.helm.release.v1.{release}.v{revision}",
                "namespace": namespace,
                "labels": {
                    "name": release,
                    "owner": "helm",
                    "status": status,
                    "version": str(revision),
                },
            },
            "data": {"release": base64.b64encode(helm_b64.encode()).decode()},
        }
    )


# -- the contract: both ways read the same --------------------------------------------------


def test_both_ways_read_the_same_release(both: Both) -> None:
    ns = both.namespace
    assert both.same() == []  # no release

    _up(both.helm, both, "0.1.0", VALUES, "install")
    # Both ways in an upgrade's own reads too: the storage path's result is the helm path's.
    info = _up(both.storage, both, "0.2.0", {"name": "second"}, "helm-upgrade")
    assert (info.revision, info.chart_version, info.app_version) == (2, "0.2.0", "2.0")
    assert info.description == "gitopsbot op=op-7 step=helm-upgrade"
    with pytest.raises(HelmFailed):  # 422 on the Service: a failed revision
        _up(both.helm, both, "0.2.0", {"ip": "not-an-ip"}, "bad")
    rolled = both.storage.rollback(
        RollbackRequest(release=REL, namespace=ns, revision=1, description="rb")
    )
    assert (rolled.revision, rolled.chart_version, rolled.description) == (
        4,
        "0.1.0",
        "Rollback to 1",
    )
    # Values null in the record (helm prints null: {}).
    _forge(both.kube, ns, lambda r: r.update(config=None), status="deployed")

    history = both.same()  # each status as helm records it, whatever the major
    assert [h.revision for h in history] == [1, 2, 3, 4, 5]
    assert (history[2].status, history[-1].status) == ("failed", "deployed")
    assert all(h.updated is not None for h in history)
    # Every JSON type as helm prints it (the big integer as helm's float64 left it).
    assert both.storage.get_values(REL, ns, 1)["token"] == CANARY
    assert both.storage.get_values(REL, ns, 4) == both.helm.get_values(REL, ns, 1)
    assert both.storage.get_values(REL, ns) == {}

    # A helm killed mid-upgrade: pending-upgrade, read the same, refused without a helm read.
    pending = _forge(
        both.kube, ns, lambda r: r["info"].update(description="Upgrade in progress"),
        status="pending-upgrade",
    )  # fmt: skip
    assert both.same()[-1].status is HelmReleaseStatus.PENDING_UPGRADE
    with pytest.raises(HelmReleaseLocked, match=f"revision {pending} is pending-upgrade"):
        _up(both.storage, both, "0.2.0", {}, "refused")
    assert both.storage.history(REL, ns)[-1].revision == pending  # nothing was run


def test_an_upgrade_reads_the_release_with_no_helm_process(
    both: Both, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The helm-upgrade step reads the history, then upgrades (which checks for pending-*
    before and reads the result after): 3 helm processes besides the upgrade, and none."""
    _up(both.helm, both, "0.1.0", {}, "install")
    assert both.helm.version  # cached per binary: not part of the count
    verbs: list[str] = []
    spawn = helm_children.spawn

    def counting(argv: list[str], **kwargs: Any) -> Any:
        verbs.append(argv[1])
        return spawn(argv, **kwargs)

    monkeypatch.setattr(helm_children, "spawn", counting)
    for helm, want in ((both.helm, ["history", "history", "history"]), (both.storage, [])):
        verbs.clear()
        helm.history(REL, both.namespace)
        info = _up(helm, both, "0.2.0", {"name": "x"}, "helm-upgrade")
        assert info.status is HelmReleaseStatus.DEPLOYED
        assert [v for v in verbs if v != "upgrade"] == want
        assert verbs.count("upgrade") == 1


def test_another_helm_driver_reads_with_helm(
    both: Both, monkeypatch: pytest.MonkeyPatch, binaries: dict[str, Path], tmp_path: Path
) -> None:
    """helm run with HELM_DRIVER=configmap keeps the release in ConfigMaps: the Secrets are
    not the release, so helm is asked (the reader would see no release at all)."""
    passed = helm_module.tool_environment

    def with_driver(environ: Mapping[str, str], **kwargs: Any) -> dict[str, str]:
        env = passed(environ, **kwargs)  # the allow-list drops it: pass it, as a deployment might
        if "HELM_DRIVER" in environ:
            env["HELM_DRIVER"] = environ["HELM_DRIVER"]
        return env

    monkeypatch.setattr(helm_module, "tool_environment", with_driver)
    asked: list[str] = []

    class Watched(HelmStorage):
        def releases(self, release: str, namespace: str) -> Any:
            asked.append(release)
            return super().releases(release, namespace)

    def cli(driver: str) -> HelmCli:
        environ = {**os.environ, "HELM_DRIVER": driver}
        return HelmCli(
            both.helm.binary, home=tmp_path / f"home-{driver}", kubeconfig=both.helm._kubeconfig,
            environ=environ, releases=Watched(both.kube),
        )  # fmt: skip

    configmap = cli("configmap")
    _up(configmap, both, "0.1.0", {"name": "cm"}, "install")
    info = configmap.status(REL, both.namespace)
    assert info is not None and info.revision == 1
    assert configmap.get_values(REL, both.namespace) == {"name": "cm"}
    assert asked == []
    assert HelmStorage(both.kube).releases(REL, both.namespace) == []  # not in Secrets
    secret = cli("secret")
    assert secret.status(REL, both.namespace) is None  # the Secret driver: read, none there
    assert asked == [REL]


# -- a record that cannot be read ----------------------------------------------------------


def _gz(text: str) -> str:
    return base64.b64encode(gzip.compress(text.encode())).decode()


CORRUPT = {
    "truncated JSON": _gz('{"name": "demo", "version": 1, "config": {"token": "' + CANARY),
    "not base64": "%%" + CANARY,
    "revision is a value": _pack({"name": REL, "version": CANARY, "info": {"status": "x"}}),
    "info is a value": _pack({"name": REL, "version": 1, "info": CANARY}),
    "not an object": _pack([CANARY]),
    "truncated gzip": base64.b64encode(gzip.compress(CANARY.encode() * 50)[:40]).decode(),
}


@pytest.mark.parametrize("what", sorted(CORRUPT))
def test_a_corrupt_release_secret_names_the_secret_never_its_content(
    what: str, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    caplog.set_level(logging.DEBUG)
    cluster = FakeCluster()
    _create_release_secret(cluster, "default", REL, 1, "deployed", CORRUPT[what])
    helm = HelmCli("helm-is-not-run", home=tmp_path / "h", releases=HelmStorage(cluster))
    for read in (
        lambda: helm.status(REL, "default"),
        lambda: helm.history(REL, "default"),
        lambda: helm.get_values(REL, "default"),
        lambda: helm.get_values(REL, "default", 1),
    ):
        with pytest.raises(HelmFailed) as failure:
            read()
        text = "".join(traceback.format_exception(failure.value))
        assert f"Secret default/sh.helm.release.v1.{REL}.v1" in str(failure.value)
        assert CANARY not in text and CANARY not in repr(failure.value)
    assert CANARY not in caplog.text


def test_values_are_never_in_a_repr(tmp_path: Path) -> None:
    cluster = FakeCluster()
    record = {"name": REL, "version": 1, "info": {"status": "deployed"}, "config": VALUES}
    _create_release_secret(cluster, "default", REL, 1, "deployed", _pack(record))
    (stored,) = HelmStorage(cluster).releases(REL, "default")
    assert stored.values == VALUES and CANARY not in repr(stored)


def test_history_entry_is_what_helm_history_prints() -> None:
    """helm's getReleaseHistory: ``MISSING`` without chart metadata, no ``updated`` for Go's
    zero time; a chart without appVersion prints an empty one."""
    bare = {"version": 3, "info": {"status": "deployed", "last_deployed": "0001-01-01T00:00:00Z"}}
    assert history_entry(bare) == {
        "revision": 3, "status": "deployed", "chart": "MISSING", "app_version": "MISSING",
        "description": "",
    }  # fmt: skip
    charted = {
        "version": 2,
        "chart": {"metadata": {"name": "tf", "version": "1.8.7"}},
        "info": {"status": "failed", "description": "d", "last_deployed": "2026-12-03T10:00:00Z"},
    }
    assert history_entry(charted) == {
        "revision": 2, "status": "failed", "chart": "tf-1.8.7", "app_version": "",
        "description": "d", "updated": "2026-12-03T10:00:00Z",
    }  # fmt: skip


# -- API failures through HelmCli ------------------------------------------------------------


class _Failing(FakeCluster):
    def __init__(self, errors: list[Exception]) -> None:
        super().__init__()
        self.errors = errors

    def list(self, *args: Any, **kwargs: Any) -> Any:
        if self.errors:
            raise self.errors.pop(0)
        return super().list(*args, **kwargs)


def test_a_transient_api_failure_is_retried_with_helms_budget(tmp_path: Path) -> None:
    sleeps: list[float] = []
    cluster = _Failing([KubeServerError("Secret list: HTTP 503 Service Unavailable")])
    helm = HelmCli(
        "helm-is-not-run", home=tmp_path / "h", releases=HelmStorage(cluster),
        sleep=sleeps.append,
    )  # fmt: skip
    assert helm.status(REL, "default") is None
    assert helm.last_retries == 1 and sleeps == [RETRY_DELAYS[0]]
    cluster.errors = [KubeServerError("Secret list: HTTP 503") for _ in range(10)]
    with pytest.raises(HelmFailed, match=f"helm history {REL}: reading Helm's storage: .*503"):
        helm.history(REL, "default")
    assert helm.last_retries == len(RETRY_DELAYS)
    assert len(cluster.errors) == 10 - len(RETRY_DELAYS) - 1


def test_a_refusal_names_the_verb_and_what_to_grant(tmp_path: Path) -> None:
    refusal = (
        'Secret list: HTTP 403 Forbidden: secrets is forbidden: cannot list resource "secrets"'
    )
    cluster = _Failing([KubeForbidden(refusal)])
    sleeps: list[float] = []
    helm = HelmCli(
        "helm-is-not-run", home=tmp_path / "h", releases=HelmStorage(cluster),
        sleep=sleeps.append,
    )  # fmt: skip
    with pytest.raises(HelmFailed) as failure:
        helm.get_values(REL, "tf-system")
    message = str(failure.value)
    assert message.startswith(f"helm get values {REL}: reading the release from Helm's storage")
    assert "get and list on secrets in namespace tf-system" in message and refusal in message
    assert sleeps == []  # not retried


def test_a_name_helm_refuses_is_left_to_helm(tmp_path: Path) -> None:
    """A release name helm would refuse is not turned into a label selector: helm is asked
    (and says why, in its own words)."""
    asked: list[str] = []

    class Watched(HelmStorage):
        def releases(self, release: str, namespace: str) -> Any:
            asked.append(release)
            return super().releases(release, namespace)

    helm = HelmCli("helm-is-not-run", home=tmp_path / "h", releases=Watched(FakeCluster()))
    with pytest.raises(HelmFailed, match="cannot run helm-is-not-run"):
        helm.history("demo,owner!=helm", "default")
    assert asked == []
    assert helm.history("demo", "default") == [] and asked == ["demo"]


# -- the bot's RBAC ---------------------------------------------------------------------------


@pytest.mark.realkube
def test_the_bots_rules_are_enough_to_read_the_release_from_storage(
    control_plane: Any,
    realkube_namespace: str,
    binaries: dict[str, Path],
    tmp_path: Path,
    charts: Path,
) -> None:
    """As the bot's ServiceAccount bound to deploy/rbac/rules.yaml (nothing added): the
    reads through the API need only what helm's own reads need (get, list on secrets)."""
    from tests.realkube import tf_support as tfs

    ns = realkube_namespace
    with tfs.bot_as_service_account(control_plane, ns, binaries, tmp_path) as bot:
        storage = HelmCli(
            bot.helm.binary, home=tmp_path / "storage-home", kubeconfig=bot.kubeconfig,
            retry_delays=(), releases=HelmStorage(bot.kube),
        )  # fmt: skip
        chart = ChartRef(path=str(charts / "0.1.0" / "demo"))
        info = storage.upgrade(UpgradeRequest(
            release=REL, namespace=ns, chart=chart, version="0.1.0", values=VALUES,
            description="gitopsbot op=op-8 step=install",
        ))  # fmt: skip
        assert (info.revision, info.status) == (1, HelmReleaseStatus.DEPLOYED)
        assert storage.history(REL, ns) == bot.helm.history(REL, ns)
        assert storage.get_values(REL, ns, 1) == bot.helm.get_values(REL, ns, 1)
        assert storage.get_values(REL, ns)["token"] == CANARY
