"""Charts in an OCI registry, against the real one (CNCF distribution, tests/realregistry) with
real helm 3 and helm 4 on the API emulator.

Covers: HelmCli upgrades and pulls ``oci://`` charts with the login of gitopsbot.yaml's
``chartRegistries`` and leaves no registry config behind; the OCI chart source lists a chart's
versions and reads the archive helm pulled, its digest the archive's sha256 (what the HTTP
source gives); a refused login is one line naming the repository and the entry to fix, for
the chart source and for helm, and nothing is applied; a tag re-pushed with other content
is read again.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from gitopsbot import app
from gitopsbot.adapters.helm import HelmCli
from gitopsbot.adapters.kube import KubeCluster
from gitopsbot.adapters.oci_registry import RegistryLogin, RegistryLogins
from gitopsbot.errors import ChartInvalid, ChartUnauthorized, HelmChartUnusable
from gitopsbot.ports.charts import ChartArchives, ChartSource
from gitopsbot.ports.helm import ChartRef, UpgradeRequest
from tests.conftest import REGISTRY_PASSWORD, REGISTRY_USER

pytestmark = [pytest.mark.realregistry, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3] / "examples" / "charts" / "repo"
NS = "default"


def _logins(registry: Any, password: str = REGISTRY_PASSWORD) -> RegistryLogins:
    return RegistryLogins(
        [
            RegistryLogin(
                registry.host, REGISTRY_USER, password, plain_http=True,
                where=f"chartRegistries[0] (host {registry.host})",
            )
        ]
    )  # fmt: skip


def _source(helm: HelmCli, cache: Path, logins: RegistryLogins) -> ChartSource:
    return app.chart_source(cache, helm=lambda: Path(helm.binary), registries=logins)


def _pushed(registry: Any, binaries: dict[str, Path], path: str, *versions: str) -> str:
    for version in versions:
        registry.push(binaries["helm4"], REPO / f"tensor-fusion-{version}.tgz", path)
    return str(registry.url(path))


def _no_login_left(home: Path) -> None:
    """No registry config outlives helm: none in its work directories, none in its own."""
    assert not list(home.rglob("registry-config.json"))
    assert not list(home.rglob("config.json"))


def test_upgrade_and_pull_from_an_oci_registry(
    helm_cli: HelmCli,
    real_registry: Any,
    binaries: dict[str, Path],
    kubeconfig: Path,
    tmp_path: Path,
) -> None:
    url = _pushed(real_registry, binaries, f"up-{helm_cli.major}", "1.8.0")
    helm = HelmCli(
        helm_cli.binary, home=helm_cli.home, kubeconfig=kubeconfig,
        registries=_logins(real_registry),
    )  # fmt: skip
    ref = ChartRef(name="tensor-fusion", repo_url=url)
    info = helm.upgrade(
        UpgradeRequest(
            release="tf", namespace=NS, chart=ref, version="1.8.0", values={}, description="d"
        )
    )
    assert (info.chart_name, info.chart_version) == ("tensor-fusion", "1.8.0")
    pulled = helm.pull(ref, "1.8.0", tmp_path / "pulled")
    assert (pulled / "Chart.yaml").is_file()
    _no_login_left(helm.home)


def test_the_oci_source_reads_what_helm_pulls(
    helm_cli: HelmCli, real_registry: Any, binaries: dict[str, Path], tmp_path: Path
) -> None:
    url = _pushed(real_registry, binaries, f"src-{helm_cli.major}", "1.8.0", "1.8.7")
    source = _source(helm_cli, tmp_path / "cache", _logins(real_registry))
    index = source.index(url, "tensor-fusion")
    assert [v.version for v in index.versions("tensor-fusion")] == ["1.8.7", "1.8.0"]
    chart = source.chart(url, "tensor-fusion", "1.8.0")
    archive = (REPO / "tensor-fusion-1.8.0.tgz").read_bytes()
    # The same digest an HTTP repository's archive gets: what the plan records.
    assert chart.digest == hashlib.sha256(archive).hexdigest()
    assert (chart.name, chart.version) == ("tensor-fusion", "1.8.0")
    _no_login_left(tmp_path / "cache")


def test_a_refused_login_is_one_line_and_nothing_is_applied(
    helm_cli: HelmCli,
    real_registry: Any,
    binaries: dict[str, Path],
    kubeconfig: Path,
    kube: KubeCluster,
    tmp_path: Path,
) -> None:
    url = _pushed(real_registry, binaries, f"denied-{helm_cli.major}", "1.8.0")
    wrong = _logins(real_registry, password="not-the-password")
    source = _source(helm_cli, tmp_path / "cache", wrong)
    for read in (
        lambda: source.index(url, "tensor-fusion"),
        lambda: source.chart(url, "tensor-fusion", "1.8.0"),
    ):
        with pytest.raises(ChartUnauthorized) as refused:
            read()
        message = str(refused.value)
        assert "\n" not in message
        assert message.startswith(f"{url}: the registry refused the login of user 'gitopsbot'")
        assert f"chartRegistries[0] (host {real_registry.host}) in gitopsbot.yaml" in message
        assert "not-the-password" not in message
    helm = HelmCli(helm_cli.binary, home=helm_cli.home, kubeconfig=kubeconfig, registries=wrong)
    with pytest.raises(HelmChartUnusable) as unusable:
        helm.upgrade(UpgradeRequest(
            release="denied", namespace=NS, chart=ChartRef(name="tensor-fusion", repo_url=url),
            version="1.8.0", values={}, description="d",
        ))  # fmt: skip
    assert "nothing was changed in the cluster" in str(unusable.value)
    assert "401" in str(unusable.value)
    assert "not-the-password" not in str(unusable.value)
    assert helm.history("denied", NS) == []
    _no_login_left(helm.home)


def _repacked(helm: Path, tmp_path: Path) -> Path:
    """tensor-fusion 1.8.0 with another default value: the same version, other content."""
    with tarfile.open(REPO / "tensor-fusion-1.8.0.tgz") as tar:
        tar.extractall(tmp_path / "src", filter="data")
    values = tmp_path / "src" / "tensor-fusion" / "values.yaml"
    values.write_text(values.read_text() + "\nrepublished: true\n")
    out = tmp_path / "out"
    out.mkdir()
    subprocess.run(
        [str(helm), "package", str(tmp_path / "src" / "tensor-fusion"), "-d", str(out)],
        check=True, capture_output=True, env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    (archive,) = out.glob("*.tgz")
    return archive


def test_a_tag_re_pushed_with_other_content_is_read_again(
    helm_cli: HelmCli, real_registry: Any, binaries: dict[str, Path], tmp_path: Path
) -> None:
    path = f"repush-{helm_cli.major}"
    original = REPO / "tensor-fusion-1.8.0.tgz"
    before = real_registry.push(binaries["helm4"], original, path)
    url = str(real_registry.url(path))
    source = _source(helm_cli, tmp_path / "cache", _logins(real_registry))
    first = source.chart(url, "tensor-fusion", "1.8.0")
    again = _repacked(binaries["helm4"], tmp_path / "repack")
    after = real_registry.push(binaries["helm4"], again, path)
    second = source.chart(url, "tensor-fusion", "1.8.0")
    assert first.digest != second.digest
    assert second.digest == hashlib.sha256(again.read_bytes()).hexdigest()
    # Pulled by its manifest digest, the archive is the one that manifest holds, whatever
    # the tag points at now.
    helm = HelmCli(helm_cli.binary, home=helm_cli.home, registries=_logins(real_registry))
    ref = ChartRef(name="tensor-fusion", repo_url=url)
    assert before != after
    assert helm.pull_archive(ref, "1.8.0", before) == original.read_bytes()
    assert helm.pull_archive(ref, "1.8.0", after) == again.read_bytes()
    _no_login_left(helm.home)
    shutil.rmtree(tmp_path / "repack")


def test_an_oci_archive_is_kept_by_its_digest_and_a_re_pushed_tag_is_refused(
    helm_cli: HelmCli, real_registry: Any, binaries: dict[str, Path], tmp_path: Path
) -> None:
    """The reviewed chart is the applied chart for OCI too (docs/plan.md "Digests"): the
    archive a plan saw is kept under its sha256 (the .tgz's, as an HTTP repository's), served
    from disk to the apply, and a tag re-pushed with other content since is refused there."""
    path = f"kept-{helm_cli.major}"
    original = REPO / "tensor-fusion-1.8.0.tgz"
    real_registry.push(binaries["helm4"], original, path)
    url = str(real_registry.url(path))
    source = _source(helm_cli, tmp_path / "cache", _logins(real_registry))
    assert isinstance(source, ChartArchives)
    reviewed = source.fetch(url, "tensor-fusion", "1.8.0")
    assert reviewed.digest == "sha256:" + hashlib.sha256(original.read_bytes()).hexdigest()
    assert reviewed.path.read_bytes() == original.read_bytes()
    assert source.kept(url, "tensor-fusion", "1.8.0", reviewed.digest).path == reviewed.path
    again = _repacked(binaries["helm4"], tmp_path / "repack")
    real_registry.push(binaries["helm4"], again, path)
    reviewed.path.unlink()  # not on disk any more: fetched again, and it is other bytes now
    with pytest.raises(ChartInvalid, match=reviewed.digest):
        source.kept(url, "tensor-fusion", "1.8.0", reviewed.digest)
    _no_login_left(tmp_path / "cache")
    shutil.rmtree(tmp_path / "repack")


def test_gitopsbot_plan_reads_an_oci_chart_with_the_fleets_login(
    real_registry: Any,
    binaries: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from gitopsbot.cli import main

    url = _pushed(real_registry, binaries, "cli-plan", "1.8.0", "1.8.7")
    fleet = tmp_path / "fleet"
    shutil.copytree(REPO.parents[1] / "fleet", fleet)
    release = fleet / "clusters" / "staging" / "release.yaml"
    release.write_text(release.read_text().replace("https://download.tensor-fusion.ai", url))
    settings = fleet / "gitopsbot.yaml"
    settings.write_text(
        settings.read_text()
        + f"chartRegistries:\n  - host: {real_registry.host}\n    username: {REGISTRY_USER}\n"
        "    password:\n      env: TEST_REGISTRY_PASSWORD\n    plainHttp: true\n"
    )
    monkeypatch.setenv("TEST_REGISTRY_PASSWORD", REGISTRY_PASSWORD)
    monkeypatch.setenv("GITOPSBOT_HELM", str(binaries["helm4"]))
    monkeypatch.setenv("GITOPSBOT_KUBECTL", str(binaries["kubectl"]))
    monkeypatch.setenv("GITOPSBOT_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("GITOPSBOT_CHARTS", raising=False)
    code = main(["plan", "--cluster", "staging", "--fleet", str(fleet)])
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    assert "| chart | — | 1.8.7 |" in out, out
    # The digests, as the plan comment shows them, the OCI manifest among them (#30).
    assert f"from {url}/tensor-fusion:1.8.7@sha256:" in out, out
    assert "- OCI manifest: `sha256:" in out, out
    # The chart itself was read from the registry: its values are known to the plan.
    assert "the chart has no such key under controller" in out, out
    monkeypatch.setenv("TEST_REGISTRY_PASSWORD", "not-the-password")
    code = main(["plan", "--cluster", "staging", "--fleet", str(fleet)])
    out, err = capsys.readouterr()
    assert code not in (0, 1)
    assert f"{url}: the registry refused the login of user '{REGISTRY_USER}'" in err, err


def _doc_lines() -> str:
    """The shell lines of docs/fleet-repo.md's OCI section, as printed."""
    doc = (REPO.parents[2] / "docs" / "fleet-repo.md").read_text()
    section = doc.split("### OCI chart repositories", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```sh\n(.*?)```", section, flags=re.S)
    return str(block)


@pytest.mark.parametrize("helm_name", ["helm3", "helm4"])
def test_the_docs_oci_example_runs_as_printed(
    helm_name: str,
    real_registry: Any,
    binaries: dict[str, Path],
    tmp_path: Path,
) -> None:
    fleet = tmp_path / "fleet"
    shutil.copytree(REPO.parents[1] / "fleet", fleet)
    release = fleet / "clusters" / "staging" / "release.yaml"
    oci = "oci://127.0.0.1:5000/charts"
    release.write_text(release.read_text().replace("https://download.tensor-fusion.ai", oci))
    settings = fleet / "gitopsbot.yaml"
    settings.write_text(
        settings.read_text() + "chartRegistries:\n  - {host: 127.0.0.1:5000, username: gitopsbot, "
        "password: {env: GITOPSBOT_REGISTRY_PASSWORD}, plainHttp: true}\n"
    )
    shutil.copy(REPO / "tensor-fusion-1.8.7.tgz", fleet)
    # The registry's port is not 5000: the one substitution made, in the fleet and the lines.
    for path in (release, settings):
        path.write_text(path.read_text().replace("127.0.0.1:5000", real_registry.host))
    lines = _doc_lines().replace("127.0.0.1:5000", real_registry.host)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "helm").symlink_to(binaries[helm_name])
    env = {
        "PATH": f"{bindir}:{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(tmp_path / "home"),
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        "GITOPSBOT_REGISTRY_PASSWORD": REGISTRY_PASSWORD,
        "GITOPSBOT_HELM": str(binaries[helm_name]),
        "GITOPSBOT_KUBECTL": str(binaries["kubectl"]),
        "GITOPSBOT_CACHE": str(tmp_path / "cache"),
    }
    script = f'gitopsbot() {{ "{sys.executable}" -m gitopsbot "$@"; }}\nset -e\n{lines}'
    done = subprocess.run(
        ["bash", "-c", script], cwd=fleet, env=env, capture_output=True, text=True, timeout=300
    )
    # The plan exits 1 on this fleet's own warnings (not a failure to read the chart).
    assert done.returncode in (0, 1), done.stderr
    assert "| chart | — | 1.8.7 |" in done.stdout, done.stdout + done.stderr
    assert "the chart has no such key under controller" in done.stdout


def _manifest_pushed_again(registry: Any, repository: str, tag: str) -> str:
    """The tag's manifest PUT again with one more annotation (the registry API, as any
    publisher's tool may): the same layer and config blobs, another manifest digest."""
    import httpx

    base = f"http://{registry.host}/v2/{repository}/manifests/{tag}"
    kind = "application/vnd.oci.image.manifest.v1+json"
    with httpx.Client(auth=(REGISTRY_USER, REGISTRY_PASSWORD), timeout=30) as client:
        got = client.get(base, headers={"Accept": kind})
        got.raise_for_status()
        manifest = got.json()
        manifest.setdefault("annotations", {})["example.com/pushed-again"] = "yes"
        put = client.put(base, content=json.dumps(manifest), headers={"Content-Type": kind})
        put.raise_for_status()
        return str(put.headers["Docker-Content-Digest"])


def test_an_oci_chart_carries_its_manifest_digest_beside_the_archives(
    helm_cli: HelmCli, real_registry: Any, binaries: dict[str, Path], tmp_path: Path
) -> None:
    """The OCI manifest digest the tag pointed at is fetched with the archive, shown by the
    plan, kept in the plan's record and in the apply's journal; a tag pushed again with the
    same archive bytes but another manifest is applied (the bytes are the reviewed ones) with
    a WARNING naming both manifests (#30)."""
    from gitopsbot.bot.reviewed_chart import chart_digests
    from gitopsbot.core.fleet.model import ClusterSpec, Environment, ReleaseSpec, RolloutPolicy
    from gitopsbot.core.planning import reviewed_chart as rc

    path = f"manifest-{helm_cli.major}"
    original = REPO / "tensor-fusion-1.8.0.tgz"
    first = real_registry.push(binaries["helm4"], original, path)
    url = str(real_registry.url(path))
    source = _source(helm_cli, tmp_path / "cache", _logins(real_registry))
    assert isinstance(source, ChartArchives)
    fetched = source.fetch(url, "tensor-fusion", "1.8.0")
    assert fetched.manifest == first and first in fetched.source
    release = ReleaseSpec(url, "tensor-fusion", "1.8.0", "tf", "tf-sys")
    spec = ClusterSpec("staging", Environment("staging"), release, {}, RolloutPolicy())
    planned = chart_digests(source, None, spec)
    assert planned.manifest == first
    assert f"OCI manifest: `{first}` (what the tag pointed at)" in planned.lines()
    record = rc.Reviewed("staging", "k", planned, planned_at="a" * 40, request=7)
    assert rc.loads(record.dumps()) == record
    same = rc.check(fetched=planned, planned=record, exact=True)
    assert not same.failure and f"OCI manifest {first}" in same.note
    # Pushed again: the same archive (layer and config), another manifest.
    second = _manifest_pushed_again(real_registry, f"{path}/tensor-fusion", "1.8.0")
    assert second != first
    applied = chart_digests(source, None, spec)
    assert (applied.archive, applied.manifest) == (planned.archive, second)
    moved = rc.check(fetched=applied, planned=record, exact=True)
    assert not moved.failure
    assert "WARNING" in moved.note and first in moved.note and second in moved.note
    _no_login_left(tmp_path / "cache")
