"""`gitopsbot plan` on the command line verifies signed charts as the plan comment does, when
the fleet's gitopsbot.yaml has ``chartKeyrings`` (docs/plan.md, "Digests"; docs/fleet-repo.md,
"Signed charts"): a local chart repository serves tensor-fusion 1.8.7 signed with a real gpg
key (tests/signing.py, ``helm package --sign``), real helm 4 verifies it.

Covers: the signer's line; a signer not in the keyring, and a keyring this machine cannot
read, are NOT VERIFIED with the CHART-PROVENANCE deny (exit 1 with --check, as every deny);
a repository no entry covers is "not required"; the JSON output carries the same.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gitopsbot.cli import main
from gitopsbot.sandbox.chartrepo import ChartRepo, sign
from gitopsbot.sandbox.environment import DEFAULT_CHARTS
from tests.core.plan_builders import ROOT
from tests.signing import Signer, signers

pytestmark = pytest.mark.slow
CHART = "tensor-fusion"
Plan = Callable[..., tuple[int, str, str]]


@pytest.fixture(scope="module")
def keys() -> Iterator[dict[str, Signer]]:
    with signers("Publisher", "Stranger") as made:
        yield made


@pytest.fixture(scope="module")
def repo(
    tmp_path_factory: pytest.TempPathFactory, keys: dict[str, Signer], binaries: dict[str, Path]
) -> Iterator[ChartRepo]:
    charts = tmp_path_factory.mktemp("signed") / "charts"
    shutil.copytree(DEFAULT_CHARTS, charts)
    sign(charts, CHART, "1.8.7", helm=binaries["helm4"], key="Publisher",
         secret_keyring=keys["Publisher"].secret)  # fmt: skip
    with ChartRepo(charts) as served:
        yield served


@pytest.fixture
def plan(
    tmp_path: Path,
    repo: ChartRepo,
    binaries: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Iterator[Plan]:
    """``plan(prefix, keyring, *more)``: `gitopsbot plan --check` of the example fleet's
    staging cluster, its chart from the local repository, gitopsbot.yaml with one
    ``chartKeyrings`` entry; returns (exit code, stdout, stderr)."""
    fleet = tmp_path / "fleet"
    shutil.copytree(ROOT / "examples" / "fleet", fleet)
    release = fleet / "clusters" / "staging" / "release.yaml"
    release.write_text(release.read_text().replace("https://download.tensor-fusion.ai", repo.url))
    settings = fleet / "gitopsbot.yaml"
    base = settings.read_text()
    monkeypatch.setenv("GITOPSBOT_HELM", str(binaries["helm4"]))
    monkeypatch.setenv("GITOPSBOT_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("GITOPSBOT_CHARTS", raising=False)

    def run(prefix: str, keyring: Path, *more: str) -> tuple[int, str, str]:
        settings.write_text(
            base + f"chartKeyrings:\n  - repository: {prefix}\n    keyring: {keyring}\n"
        )
        code = main(["plan", "--cluster", "staging", "--fleet", str(fleet), "--check", *more])
        out, err = capsys.readouterr()
        return code, out, err

    yield run


def test_gitopsbot_plan_verifies_a_signed_chart(
    plan: Plan, repo: ChartRepo, keys: dict[str, Signer], tmp_path: Path
) -> None:
    run = plan
    publisher, stranger = keys["Publisher"], keys["Stranger"]
    where = f"chartKeyrings[0] ({repo.url})"

    code, out, err = run(repo.url, publisher.public)
    assert code == 0, out + err
    assert (
        f"provenance: verified, signed by {publisher.name} (key {publisher.fingerprint}) in "
        f"the keyring {publisher.public} ({where})"
    ) in out, out
    assert "CHART-PROVENANCE" not in out

    code, out, err = run(repo.url, stranger.public)
    assert code == 1, out + err  # --check: denied, as every deny
    assert "provenance: **NOT VERIFIED**" in out, out
    assert "signed by a key that is not in the keyring" in out
    assert "CHART-PROVENANCE" in out and "the apply will block this chart" in out
    code, out, err = run(repo.url, stranger.public, "--output", "json")
    found = json.loads(out)
    assert found["chart_digests"]["provenance"]["state"] == "failed"
    assert found["decision"] != "allowed"
    assert any(v["rule"] == "CHART-PROVENANCE" for v in found["verdicts"]), found["verdicts"]

    # A keyring missing on this machine: the plan cannot vouch for the chart.
    missing = tmp_path / "elsewhere" / "pubring.gpg"
    code, out, err = run(repo.url, missing)
    assert code == 1, out + err
    assert f"provenance: **NOT VERIFIED** with the keyring {missing}" in out, out
    assert f"cannot read {missing}" in out and "CHART-PROVENANCE" in out

    code, out, err = run("https://charts.example.com", publisher.public)
    assert code == 0, out + err
    assert "provenance: not required (no chartKeyrings entry)" in out, out
