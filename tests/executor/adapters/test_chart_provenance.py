"""Signed charts, with real GnuPG keys and real helm 3 and helm 4 (``helm verify``): the
sandbox chart repository serves 1.8.7 signed by a publisher's key (its ``.prov`` beside the
archive), 1.8.0 unsigned; ``SignedCharts.fetch`` verifies the very archive it returns with
the keyring gitopsbot.yaml's ``chartKeyrings`` requires for the repository.

Covers: a good signature names its signer; an archive changed after signing, a signer not
in the keyring, a chart without a .prov are each one line saying what to fix; a repository
no entry covers is not verified; a private key is refused as a keyring; helm leaves no file.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitopsbot.adapters.chart_provenance import SignedCharts, check_keyrings, keyring_problem
from gitopsbot.adapters.chartrepo import HttpChartSource
from gitopsbot.adapters.helm import HelmCli
from gitopsbot.core.fleet.model import ChartKeyring
from gitopsbot.errors import ConfigError
from gitopsbot.sandbox.chartrepo import ChartRepo, republish, sign
from gitopsbot.sandbox.environment import DEFAULT_CHARTS
from tests.signing import Signer, signers

pytestmark = pytest.mark.slow
CHART = "tensor-fusion"


@pytest.fixture(scope="module")
def keys() -> Iterator[dict[str, Signer]]:
    with signers("Publisher", "Stranger") as made:
        yield made


@pytest.fixture
def repo(tmp_path: Path, keys: dict[str, Signer], binaries: dict[str, Path]) -> Iterator[ChartRepo]:
    charts = tmp_path / "charts"
    shutil.copytree(DEFAULT_CHARTS, charts)
    publisher = keys["Publisher"]
    sign(charts, CHART, "1.8.7", helm=binaries["helm4"], key=publisher.name.split(" <")[0],
         secret_keyring=publisher.secret)  # fmt: skip
    with ChartRepo(charts) as served:
        yield served


@pytest.fixture(params=["helm3", "helm4"])
def helm(request: pytest.FixtureRequest, binaries: dict[str, Path], tmp_path: Path) -> HelmCli:
    return HelmCli(binaries[request.param], home=tmp_path / "verify-helm")


def _charts(repo: ChartRepo, helm: HelmCli, keyring: Path, tmp_path: Path) -> SignedCharts:
    http = HttpChartSource(cache_dir=tmp_path / "cache")
    return SignedCharts(http, [ChartKeyring(repo.url, str(keyring))], lambda: helm)


def test_a_signed_chart_is_verified_with_its_signer(
    repo: ChartRepo, helm: HelmCli, keys: dict[str, Signer], tmp_path: Path
) -> None:
    publisher = keys["Publisher"]
    archive = _charts(repo, helm, publisher.public, tmp_path).fetch(repo.url, CHART, "1.8.7")
    found = archive.provenance
    assert found is not None and not found.failed, found
    assert (found.signer, found.fingerprint) == (publisher.name, publisher.fingerprint)
    assert found.where == f"chartKeyrings[0] ({repo.url})"
    assert archive.path.parent == tmp_path / "cache" / "charts"  # the archive the apply uses
    assert not list((helm.home / "work").iterdir())  # helm's link and .prov are gone


def test_an_archive_changed_after_signing_is_not_verified(
    repo: ChartRepo, helm: HelmCli, keys: dict[str, Signer], tmp_path: Path
) -> None:
    republish(repo.directory, CHART, "1.8.7", "changed after signing")  # the .prov stays
    archive = _charts(repo, helm, keys["Publisher"].public, tmp_path).fetch(
        repo.url, CHART, "1.8.7"
    )
    found = archive.provenance
    assert found is not None and found.failed
    assert "is not the one its provenance file signs" in found.problem
    assert "\n" not in found.problem and repo.url in found.problem


def test_a_signer_not_in_the_keyring_is_not_verified(
    repo: ChartRepo, helm: HelmCli, keys: dict[str, Signer], tmp_path: Path
) -> None:
    stranger = keys["Stranger"].public
    found = _charts(repo, helm, stranger, tmp_path).fetch(repo.url, CHART, "1.8.7").provenance
    assert found is not None and found.failed
    assert "signed by a key that is not in the keyring" in found.problem
    assert str(stranger) in found.line()


def test_a_chart_without_provenance_is_not_verified(
    repo: ChartRepo, helm: HelmCli, keys: dict[str, Signer], tmp_path: Path
) -> None:
    found = (
        _charts(repo, helm, keys["Publisher"].public, tmp_path)
        .fetch(repo.url, CHART, "1.8.0")
        .provenance
    )
    assert found is not None and found.failed
    assert f"{repo.url}/tensor-fusion-1.8.0.tgz has no provenance file (.prov)" in found.problem
    assert "helm package --sign" in found.problem and "chartKeyrings[0]" in found.problem


def test_a_repository_no_entry_covers_is_not_verified(
    repo: ChartRepo, helm: HelmCli, keys: dict[str, Signer], tmp_path: Path
) -> None:
    http = HttpChartSource(cache_dir=tmp_path / "cache")
    entry = ChartKeyring("https://charts.example.com", str(keys["Publisher"].public))
    charts = SignedCharts(http, [entry], lambda: helm)
    found = charts.fetch(repo.url, CHART, "1.8.0").provenance
    assert found is not None and not found.required and not found.failed


def test_a_private_key_is_refused_as_a_keyring(keys: dict[str, Signer], tmp_path: Path) -> None:
    secret = keys["Publisher"].secret
    assert "holds a private key" in keyring_problem(secret)
    assert keyring_problem(keys["Publisher"].public) == ""
    with pytest.raises(ConfigError, match=r"chartKeyrings\[0\] \(https://c.example\): .*private"):
        check_keyrings([ChartKeyring("https://c.example", str(secret))])
    with pytest.raises(ConfigError, match="cannot read"):
        check_keyrings([ChartKeyring("https://c.example", str(tmp_path / "missing.gpg"))])
