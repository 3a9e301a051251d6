"""Signed charts in an OCI registry, against the real one (CNCF distribution,
tests/realregistry), with real GnuPG keys (tests/signing.py) and real helm 3 and helm 4.

The publisher signs with ``helm package --sign`` and pushes with helm 4, the ``.prov`` beside
the archive: helm 4 uploads it as the manifest's provenance layer. Covers: a repository
``chartKeyrings`` covers verifies the archive it returns (signer named) with helm 4; a chart
pushed without a provenance layer is NOT VERIFIED in one line (``helm pull --prov`` then only
warns and writes no .prov), with helm 3 and helm 4; helm 3.18 refuses to pull or install a
chart whose manifest has a provenance layer, one line naming the cause and the fix (helm 4),
nothing applied.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gitopsbot import app
from gitopsbot.adapters.chart_provenance import SignedCharts
from gitopsbot.adapters.helm import HelmCli
from gitopsbot.adapters.oci_registry import RegistryLogin, RegistryLogins
from gitopsbot.core.fleet.model import ChartKeyring
from gitopsbot.errors import ChartInvalid, HelmChartUnusable
from gitopsbot.ports.helm import ChartRef, UpgradeRequest
from gitopsbot.sandbox.chartrepo import sign
from gitopsbot.sandbox.environment import DEFAULT_CHARTS
from tests.conftest import REGISTRY_PASSWORD, REGISTRY_USER
from tests.signing import Signer, signers

pytestmark = [pytest.mark.realregistry, pytest.mark.slow]
CHART = "tensor-fusion"
PROV_LAYER = "application/vnd.cncf.helm.chart.provenance.v1.prov"


@pytest.fixture(scope="module")
def keys() -> Iterator[dict[str, Signer]]:
    with signers("Publisher") as made:
        yield made


@pytest.fixture(scope="module")
def pushed(
    real_registry: Any, binaries: dict[str, Path], keys: dict[str, Signer], tmp_path_factory: Any
) -> str:
    """``oci://…/signed-oci``: 1.8.7 pushed signed (its provenance layer), 1.8.0 unsigned."""
    charts = tmp_path_factory.mktemp("oci-signed") / "charts"
    shutil.copytree(DEFAULT_CHARTS, charts)
    publisher = keys["Publisher"]
    sign(charts, CHART, "1.8.7", helm=binaries["helm4"], key="Publisher",
         secret_keyring=publisher.secret)  # fmt: skip
    assert (charts / f"{CHART}-1.8.7.tgz.prov").is_file()
    for version in ("1.8.7", "1.8.0"):
        real_registry.push(binaries["helm4"], charts / f"{CHART}-{version}.tgz", "signed-oci")
    return str(real_registry.url("signed-oci"))


def _logins(registry: Any) -> RegistryLogins:
    return RegistryLogins(
        [RegistryLogin(registry.host, REGISTRY_USER, REGISTRY_PASSWORD, plain_http=True,
                       where=f"chartRegistries[0] (host {registry.host})")]
    )  # fmt: skip


def _charts(helm: Path, registry: Any, url: str, keyring: Path, cache: Path) -> SignedCharts:
    source = app.chart_source(
        cache,
        helm=lambda: helm,
        registries=_logins(registry),
        keyrings=(ChartKeyring(url, str(keyring)),),
    )
    assert isinstance(source, SignedCharts)
    return source


def test_a_signed_oci_chart_is_verified_with_helm_4(
    pushed: str,
    real_registry: Any,
    binaries: dict[str, Path],
    keys: dict[str, Signer],
    tmp_path: Path,
) -> None:
    publisher = keys["Publisher"]
    charts = _charts(binaries["helm4"], real_registry, pushed, publisher.public, tmp_path)
    archive = charts.fetch(pushed, CHART, "1.8.7")
    found = archive.provenance
    assert found is not None and not found.failed, found
    assert (found.signer, found.fingerprint) == (publisher.name, publisher.fingerprint)
    assert found.where == f"chartKeyrings[0] ({pushed})"
    assert f"signed by {publisher.name}" in found.line()
    # The archive verified is the one kept for the apply (by its sha256), pulled by manifest.
    assert archive.manifest and archive.path.parent == tmp_path / "oci-archives"


@pytest.mark.parametrize("helm_name", ["helm3", "helm4"])
def test_an_oci_chart_without_a_provenance_layer_is_not_verified(
    helm_name: str,
    pushed: str,
    real_registry: Any,
    binaries: dict[str, Path],
    keys: dict[str, Signer],
    tmp_path: Path,
) -> None:
    """``helm pull --prov`` of such a chart succeeds (helm 4 warns "manifest does not contain
    a layer with mediatype …provenance…", helm 3 says something else) and writes no .prov:
    the bot's one line, no crash."""
    charts = _charts(binaries[helm_name], real_registry, pushed, keys["Publisher"].public,
                     tmp_path)  # fmt: skip
    found = charts.fetch(pushed, CHART, "1.8.0").provenance
    assert found is not None and found.failed
    assert found.problem.startswith(f"{pushed}/{CHART}:1.8.0@sha256:"), found.problem
    assert "has no provenance file (.prov)" in found.problem
    assert "helm package --sign" in found.problem and "\n" not in found.problem
    assert "**NOT VERIFIED**" in found.line()


def test_helm_3_refuses_a_signed_oci_chart_in_one_line(
    pushed: str,
    real_registry: Any,
    binaries: dict[str, Path],
    keys: dict[str, Signer],
    kubeconfig: Path,
    tmp_path: Path,
) -> None:
    charts = _charts(binaries["helm3"], real_registry, pushed, keys["Publisher"].public,
                     tmp_path)  # fmt: skip
    # Not a ChartUnavailable (retried every pass for ever): the chart is unusable with helm 3.
    with pytest.raises(ChartInvalid) as refused:
        charts.fetch(pushed, CHART, "1.8.7")
    message = str(refused.value)
    assert "\n" not in message
    assert f"{pushed}/{CHART} version 1.8.7 cannot be used" in message
    assert "it was pushed signed (its manifest has a provenance layer)" in message
    assert f'media type "{PROV_LAYER}" is not allowed' in message
    assert "run the bot with helm 4 (--helm or GITOPSBOT_HELM)" in message
    # The upgrade itself says the same, and nothing is applied.
    helm = HelmCli(binaries["helm3"], home=tmp_path / "helm3", kubeconfig=kubeconfig,
                   registries=_logins(real_registry))  # fmt: skip
    with pytest.raises(HelmChartUnusable) as unusable:
        helm.upgrade(UpgradeRequest(release="signed-h3", namespace="default",
                     chart=ChartRef(name=CHART, repo_url=pushed), version="1.8.7", values={},
                     description="d"))  # fmt: skip
    said = str(unusable.value)
    assert "\n" not in said and "nothing was changed in the cluster" in said
    assert "run the bot with helm 4" in said
    assert helm.history("signed-h3", "default") == []
