"""A chart that cannot be fetched or that helm refuses raises HelmChartUnusable and changes
nothing in the cluster: real helm 3 and helm 4, the API emulator, real archives.

Covers: a local archive with a ``../`` path (upgrade and pull: helm refuses it, no release,
no object, no file outside); the same archive served by a chart repository (upgrade and
``helm pull --untar``); a version the repository does not have (upgrade of an existing
release leaves its history as it was; pull); a repository that cannot be reached (retried
with the budget, then HelmChartUnusable); an archive that is not one; a missing local
path; pull of a good local archive (helm judges it, the adapter unpacks files and
directories only, refusing links even where helm would not look).
"""

from __future__ import annotations

import io
import re
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from gitopsbot.adapters.helm import RETRY_DELAYS, HelmCli
from gitopsbot.adapters.helm_charts import unpack_archive as _unpack_archive
from gitopsbot.adapters.kube import KubeCluster
from gitopsbot.errors import HelmChartUnusable
from gitopsbot.ports.helm import ChartRef, UpgradeRequest
from gitopsbot.sandbox.chartrepo import ChartRepo

Charts = Callable[[str], ChartRef]
EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "charts"
NS = "default"
ESCAPE = "escaped-by-the-chart.yaml"


def _archive(path: Path, members: dict[str, str], links: dict[str, str] | None = None) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tar.addfile(info)
    return path


def _evil(directory: Path) -> Path:
    """A chart archive one of whose files climbs out of the chart: ``evil/../../<ESCAPE>``."""
    directory.mkdir(parents=True, exist_ok=True)
    configmap = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: evil\ndata: {}\n"
    return _archive(
        directory / "evil-0.1.0.tgz",
        {
            "evil/Chart.yaml": "apiVersion: v2\nname: evil\nversion: 0.1.0\n",
            "evil/templates/configmap.yaml": configmap,
            f"evil/../../{ESCAPE}": configmap,
        },
    )


@pytest.fixture
def quick(helm_cli: HelmCli, kubeconfig: Path, sleeps: list[float]) -> HelmCli:
    """``helm_cli`` (helm 3 and helm 4) whose retry delays are recorded, not slept."""
    return HelmCli(helm_cli.binary, home=helm_cli.home, kubeconfig=kubeconfig, sleep=sleeps.append)


def _nothing_escaped(*roots: Path) -> None:
    for root in roots:
        assert not list(root.rglob(ESCAPE)), root


@pytest.mark.slow
def test_local_archive_with_a_parent_path_is_refused(
    quick: HelmCli, kube: KubeCluster, tmp_path: Path, sleeps: list[float]
) -> None:
    archive = _evil(tmp_path / "charts")
    with pytest.raises(HelmChartUnusable) as failure:
        quick.upgrade(UpgradeRequest(
            release="evil", namespace=NS, chart=ChartRef(path=str(archive)), version="0.1.0",
            values={}, description="d",
        ))  # fmt: skip
    message = str(failure.value)
    assert f"chart {archive} version 0.1.0 cannot be used" in message
    assert "nothing was changed in the cluster" in message
    # helm 3 says why; helm 4 only "unable to load chart archive"
    assert "chart illegally references parent directory" in message or quick.major >= 4
    assert quick.history("evil", NS) == []
    assert kube.get("v1", "ConfigMap", NS, "evil") is None
    with pytest.raises(HelmChartUnusable, match="illegally references parent directory"):
        quick.pull(ChartRef(path=str(archive)), "0.1.0", tmp_path / "pulled")
    assert (quick.last_retries, sleeps) == (0, [])
    _nothing_escaped(tmp_path, quick.home)


@pytest.mark.slow
def test_repository_archive_with_a_parent_path_is_refused(
    quick: HelmCli, kube: KubeCluster, tmp_path: Path
) -> None:
    served = tmp_path / "repo"
    _evil(served)
    (served / "index.yaml").write_text(
        "apiVersion: v1\nentries:\n  evil:\n  - apiVersion: v2\n    name: evil\n"
        "    version: 0.1.0\n    urls:\n    - evil-0.1.0.tgz\n"
    )
    with ChartRepo(served) as repo:
        ref = ChartRef(name="evil", repo_url=repo.url)
        with pytest.raises(HelmChartUnusable, match=re.escape("version 0.1.0 cannot be used")):
            quick.upgrade(UpgradeRequest(
                release="evil", namespace=NS, chart=ref, version="0.1.0", values={},
                description="d",
            ))  # fmt: skip
        with pytest.raises(HelmChartUnusable, match="illegally references parent directory"):
            quick.pull(ref, "0.1.0", tmp_path / "pulled")
    assert quick.history("evil", NS) == []
    assert kube.get("v1", "ConfigMap", NS, "evil") is None
    assert not (tmp_path / "pulled" / "evil").exists()
    _nothing_escaped(tmp_path, quick.home)


@pytest.mark.slow
def test_a_version_the_repository_does_not_have(
    quick: HelmCli, chart: Charts, tmp_path: Path, sleeps: list[float]
) -> None:
    if not (EXAMPLES / "repo" / "index.yaml").is_file():
        pytest.skip("examples/charts/repo is absent")
    quick.upgrade(UpgradeRequest(
        release="tf", namespace=NS, chart=chart("1.8.0"), version="1.8.0", values={},
        description="install",
    ))  # fmt: skip
    before = quick.history("tf", NS)
    with ChartRepo(EXAMPLES / "repo") as repo:
        url = repo.url
        ref = ChartRef(name="tensor-fusion", repo_url=url)
        with pytest.raises(HelmChartUnusable) as failure:
            quick.upgrade(UpgradeRequest(
                release="tf", namespace=NS, chart=ref, version="9.9.9", values={},
                description="gitopsbot op=op-3 step=helm-upgrade",
            ))  # fmt: skip
        with pytest.raises(HelmChartUnusable, match=re.escape('version "9.9.9" not found')):
            quick.pull(ref, "9.9.9", tmp_path / "pulled")
    assert f"chart {url}/tensor-fusion version 9.9.9 cannot be used" in str(failure.value)
    assert 'chart "tensor-fusion" version "9.9.9" not found' in str(failure.value)
    assert quick.history("tf", NS) == before
    assert sleeps == []


@pytest.mark.slow
def test_an_unreachable_repository_is_retried_then_unusable(
    quick: HelmCli, sleeps: list[float], tmp_path: Path
) -> None:
    ref = ChartRef(name="tensor-fusion", repo_url="http://127.0.0.1:9/charts")
    with pytest.raises(HelmChartUnusable, match="cannot be reached"):
        quick.upgrade(
            UpgradeRequest(
                release="tf", namespace=NS, chart=ref, version="1.8.7", values={}, description="d"
            )
        )
    assert quick.last_retries == 3
    assert sleeps == list(RETRY_DELAYS)
    with pytest.raises(HelmChartUnusable, match=re.escape("version 1.8.7 cannot be used")):
        quick.pull(ref, "1.8.7", tmp_path / "pulled")
    assert quick.history("tf", NS) == []


@pytest.mark.slow
def test_not_an_archive_and_a_missing_path(quick: HelmCli, tmp_path: Path) -> None:
    junk = tmp_path / "junk-0.1.0.tgz"
    junk.write_bytes(b"not a chart")
    for ref in (ChartRef(path=str(junk)), ChartRef(path=str(tmp_path / "missing"))):
        with pytest.raises(HelmChartUnusable, match=re.escape("version 0.1.0 cannot be used")):
            quick.upgrade(
                UpgradeRequest(
                    release="x",
                    namespace=NS,
                    chart=ref,
                    version="0.1.0",
                    values={},
                    description="d",
                )
            )
        with pytest.raises(HelmChartUnusable):
            quick.pull(ref, "0.1.0", tmp_path / "pulled")
    assert quick.history("x", NS) == []


@pytest.mark.slow
def test_pull_of_a_good_local_archive(quick: HelmCli, tmp_path: Path) -> None:
    archive = EXAMPLES / "repo" / "tensor-fusion-1.8.0.tgz"
    if not archive.is_file():
        pytest.skip("examples/charts/repo is absent")
    target = quick.pull(ChartRef(path=str(archive)), "1.8.0", tmp_path / "pulled")
    assert target == tmp_path / "pulled" / "tensor-fusion"
    assert "version: 1.8.0" in (target / "Chart.yaml").read_text()
    assert any((target / "crds").iterdir())
    assert not any((quick.home / "work").iterdir())


def test_unpacking_refuses_what_is_not_a_file_or_directory(tmp_path: Path) -> None:
    """Links (and ``..``) are refused by the adapter's own unpacking, whatever helm said."""
    chart = {"c/Chart.yaml": "apiVersion: v2\nname: c\nversion: 0.1.0\n"}
    linked = _archive(tmp_path / "link.tgz", chart, links={"c/templates/x.yaml": "/etc/passwd"})
    refused = re.escape("illegal file path 'c/templates/x.yaml'")
    with pytest.raises(HelmChartUnusable, match=refused):
        _unpack_archive(linked, tmp_path / "out1", "pull")
    climbing = _archive(tmp_path / "climb.tgz", {**chart, "c/../../x.yaml": "x"})
    with pytest.raises(HelmChartUnusable, match="illegal file path"):
        _unpack_archive(climbing, tmp_path / "out2", "pull")
    _unpack_archive(_archive(tmp_path / "ok.tgz", chart), tmp_path / "out3", "pull")
    assert (tmp_path / "out3" / "c" / "Chart.yaml").is_file()
    assert not (tmp_path / "x.yaml").exists()
