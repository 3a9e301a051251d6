"""`gitopsbot plan` and `gitopsbot validate` end to end: a fleet copied from examples/fleet into
a real Git repository (pygit2), charts built from the real chart files in a tmp dir; a baseline
holding a literal secret is planned (masked, with a note), a desired one refused."""

from __future__ import annotations

import json
import re
import shutil
import socket
from pathlib import Path

import pygit2
import pytest

from gitopsbot.cli import main
from tests.core.plan_builders import ROOT
from tests.core.test_chartrepo import build_archive

pytestmark = pytest.mark.shared
EXAMPLE = ROOT / "examples" / "fleet"
TEAM_RULES = """\
rules:
  - id: TEAM-REPLICAS
    description: Production controllers keep at least three replicas.
    severity: warn
    enforces: R5
    environments: [production]
    check: {kind: path, path: controller.replicaCount, op: lt, value: 3}
"""


@pytest.fixture(scope="module")
def charts(tmp_path_factory: pytest.TempPathFactory, tensor_fusion: Path) -> Path:
    out = tmp_path_factory.mktemp("charts")
    for v in ("1.8.0", "1.8.7"):
        build_archive(tensor_fusion / f"chart-{v}", out / f"tensor-fusion-{v}.tgz")
    return out


def _set(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert re.search(old, text, flags=re.M), (path, old)
    path.write_text(re.sub(old, new, text, count=1, flags=re.M))


@pytest.fixture
def fleet(tmp_path: Path) -> Path:
    if not (EXAMPLE / "clusters" / "staging").is_dir():
        pytest.skip("examples/fleet is not there yet")
    root = tmp_path / "fleet"
    shutil.copytree(EXAMPLE, root)
    shutil.rmtree(root / "policies", ignore_errors=True)
    (root / "policies").mkdir()
    (root / "policies" / "team.yaml").write_text(TEAM_RULES)
    return root


def commit(repo: pygit2.Repository, message: str) -> None:
    repo.index.add_all()
    repo.index.write()
    tree = repo.index.write_tree()
    sig = pygit2.Signature("t", "t@example.com", 1_700_000_000, 0)
    parents = [] if repo.head_is_unborn else [repo.head.target]
    repo.create_commit("HEAD", sig, sig, message, tree, parents)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_between_git_refs(
    fleet: Path, charts: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = pygit2.init_repository(str(fleet))
    release = fleet / "clusters" / "staging" / "release.yaml"
    _set(release, r"^  version: .*$", "  version: 1.8.0")
    commit(repo, "staging on 1.8.0")
    _set(release, r"^  version: .*$", "  version: 1.8.7")
    values = fleet / "clusters" / "staging" / "values.yaml"
    _set(values, r"^  replicaCount: 1$", "  replicaCount: 2")
    commit(repo, "upgrade staging")
    code, out, err = run(
        capsys,
        "plan",
        "--cluster",
        "staging",
        "--fleet",
        str(fleet),
        "--from",
        "HEAD~1",
        "--to",
        "HEAD",
        "--chart-dir",
        str(charts),
    )
    assert code == 0, err
    assert "baseline: git:HEAD~1@" in out
    assert "| chart | 1.8.0 | 1.8.7 |" in out and "| app | 2.13.0 | 2.17.0 |" in out
    assert "! controller.replicaCount: 1 → 2" in out
    assert "**BREAKING**" not in out  # 1.8.0 → 1.8.7 only adds fields
    code, out, _ = run(
        capsys,
        "plan",
        "--cluster",
        "staging",
        "--fleet",
        str(fleet),
        "--from",
        "HEAD~1",
        "--chart-dir",
        str(charts),
        "--output",
        "json",
    )
    data = json.loads(out)
    assert data["versions"]["chart"] == {"from": "1.8.0", "to": "1.8.7"}
    assert [s["kind"] for s in data["steps"]][:4] == [
        "backup",
        "crds",
        "helm-upgrade",
        "controller-ready",
    ]


def test_plan_without_baseline_and_check(
    fleet: Path, charts: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(
        capsys,
        "plan",
        "--cluster",
        "production",
        "--fleet",
        str(fleet),
        "--chart-dir",
        str(charts),
    )
    assert code == 0, err
    assert "baseline: nothing deployed" in out and "TEAM-REPLICAS" in out
    # a production pool at batchPercentage 100 is denied; --check turns that into exit 1
    _set(
        fleet / "clusters" / "production" / "rollout.yaml",
        r"^    batchPercentage: \d+$",
        "    batchPercentage: 100",
    )
    code, out, _ = run(
        capsys,
        "plan",
        "--cluster",
        "production",
        "--fleet",
        str(fleet),
        "--chart-dir",
        str(charts),
        "--check",
    )
    assert code == 1 and "BATCH-100-PROD" in out and "⛔ denied" in out


def test_plan_errors(fleet: Path, charts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(
        capsys, "plan", "--cluster", "stagin", "--fleet", str(fleet), "--chart-dir", str(charts)
    )
    assert code == 1 and "clusters/stagin" in err and "staging" in err
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _set(
        fleet / "clusters" / "staging" / "release.yaml",
        r"^  repository: .*$",
        f"  repository: http://127.0.0.1:{port}/charts",
    )
    code, _, err = run(capsys, "plan", "--cluster", "staging", "--fleet", str(fleet))
    assert code == 2 and "unreachable" in err and "--chart-dir" in err
    code, _, err = run(
        capsys,
        "plan",
        "--cluster",
        "staging",
        "--fleet",
        str(fleet),
        "--from",
        "HEAD",
        "--chart-dir",
        str(charts),
    )
    assert (code == 2 and "not inside a Git repository" in err) or "no such Git ref" in err


LITERAL = "canary-Rt93k-literal-enroll-token"


def test_plan_of_a_change_that_removes_a_literal_secret(
    fleet: Path, charts: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The baseline (--from) holds a literal enrollToken; the change leaves it empty (the
    reference in credentials.yaml fills it in): the plan is printed, the literal masked, and a
    note names where the baseline holds it. A literal in the desired state is still refused,
    and another problem of the baseline's files is named at its ref."""
    repo = pygit2.init_repository(str(fleet))
    values = fleet / "clusters" / "staging" / "values.yaml"
    clean = values.read_text()
    _set(values, r'^  enrollToken: ""', f'  enrollToken: "{LITERAL}"')
    line = 1 + next(i for i, t in enumerate(values.read_text().splitlines()) if LITERAL in t)
    commit(repo, "staging with a literal token")
    values.write_text(clean)
    commit(repo, "move the token to credentials.yaml")
    args = ["plan", "--cluster", "staging", "--fleet", str(fleet), "--chart-dir", str(charts)]
    code, out, err = run(capsys, *args, "--from", "HEAD~1", "--to", "HEAD")
    assert code == 0, err
    assert LITERAL not in out + err
    assert "holds 1 secret-looking literal in values.yaml" in out
    assert f"`clusters/staging/values.yaml:{line}` (`agent.enrollToken`)" in out
    assert "This change removes it" in out and "rotate it" in out
    code, out, err = run(capsys, *args, "--from", "HEAD~1", "--output", "json")
    assert code == 0, err
    assert LITERAL not in out + err
    data = json.loads(out)
    assert data["baseline_secret_literals"] == [
        {"path": "agent.enrollToken", "location": f"clusters/staging/values.yaml:{line}"}
    ]
    assert any("secret-looking literal" in n for n in data["notes"])
    # The other way round, the literal is in the desired state: refused, never printed.
    code, out, err = run(capsys, *args, "--from", "HEAD", "--to", "HEAD~1")
    assert code == 1
    assert f"HEAD~1:clusters/staging/values.yaml:{line}:" in err and "secret-looking" in err
    assert LITERAL not in out + err
    # Any other problem of the baseline stops the plan, named at the baseline's ref.
    _set(values, r"^  replicaCount: 1$", "  replicaCount: [1")
    commit(repo, "broken values")
    values.write_text(clean)
    commit(repo, "fixed")
    code, _, err = run(capsys, *args, "--from", "HEAD~1")
    assert code == 1 and "HEAD~1:clusters/staging/values.yaml:" in err, err


def test_validate(fleet: Path, charts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "validate", str(fleet))
    assert code == 0, err
    assert "2 cluster(s) OK" in out
    code, out, err = run(capsys, "validate", str(fleet), "--chart-dir", str(charts))
    assert code == 0, err


def test_validate_denies(fleet: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _set(
        fleet / "clusters" / "production" / "values.yaml",
        r"^  replicaCount: \d+$",
        "  replicaCount: 1",
    )
    code, _, err = run(capsys, "validate", str(fleet))
    assert code == 1 and "clusters/production/values.yaml:" in err
    assert ": R5 controller-ha-replicas [denied]" in err


def test_validate_bad_team_rule(fleet: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (fleet / "policies" / "team.yaml").write_text(TEAM_RULES.replace("op: lt", "op: below"))
    code, _, err = run(capsys, "validate", str(fleet))
    assert code == 1 and "policies/team.yaml:7:" in err and "unknown op" in err


def test_help_has_examples(capsys: pytest.CaptureFixture[str]) -> None:
    for cmd in ("plan", "validate"):
        with pytest.raises(SystemExit):
            main([cmd, "--help"])
        assert "examples:" in capsys.readouterr().out


def _doc_example() -> tuple[list[str], list[str]]:
    """docs/plan.md's `gitopsbot plan` digests example: the command and the lines printed."""
    doc = (ROOT / "docs" / "plan.md").read_text()
    section = doc.split("## Digests", 1)[1].split("\n## ", 1)[0]
    (block,) = [b for b in re.findall(r"```sh\n(.*?)```", section, flags=re.S) if "$ " in b]
    command, *printed = block.strip().splitlines()
    return command.removeprefix("$ gitopsbot ").split(), printed


def test_the_docs_digest_example_prints_the_archive_and_manifests_digests(
    binaries: dict[str, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`gitopsbot plan` fetches the target chart through the plan comment's port
    (``ChartArchives``) and prints both digests and the source, as docs/plan.md shows (#30:
    it showed the pin's verdict only)."""
    argv, printed = _doc_example()
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("GITOPSBOT_HELM", str(binaries["helm4"]))
    monkeypatch.delenv("GITOPSBOT_CHARTS", raising=False)
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    lines = out.splitlines()
    for line in printed:
        assert line in lines, (line, out)
    code, out, err = run(capsys, *argv, "--output", "json")
    digests = json.loads(out)["chart_digests"]
    assert digests["archive"] in printed[0] and digests["manifests"] in printed[1]
    assert digests["source"] == "examples/charts/repo/tensor-fusion-1.8.7.tgz"


def test_an_archive_the_plan_cannot_fetch_is_one_line_and_no_plan(
    fleet: Path, charts: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from gitopsbot.adapters.chartrepo import LocalChartSource
    from gitopsbot.errors import ChartUnavailable
    from gitopsbot.ports.charts import ChartArchive

    def unreachable(self: object, repo_url: str, name: str, version: str) -> ChartArchive:
        raise ChartUnavailable(f"{repo_url}: timed out")

    monkeypatch.setattr(LocalChartSource, "fetch", unreachable)
    code, out, err = run(
        capsys, "plan", "--cluster", "staging", "--fleet", str(fleet), "--chart-dir", str(charts)
    )
    assert code == 2 and out == ""
    assert err.count("\n") == 1, err
    assert "the archive of chart tensor-fusion 1.8.7 could not be fetched" in err, err
    assert "timed out" in err
