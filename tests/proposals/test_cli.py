"""`gitopsbot propose --once` and `gitopsbot comment` end to end, wired from gitopsbot.yaml
(forge kind, URL and token reference) against the local GitHub server; the token is a canary
that must not appear in any output or in Git."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gitopsbot.cli import main
from gitopsbot.core.forge.forge_types import PullRequestDraft
from tests.proposals.conftest import TOKEN, World, git


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GITOPSBOT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("GITOPSBOT_FORGE_TOKEN", TOKEN)  # examples/fleet: token: {env: ...}
    monkeypatch.delenv("GITOPSBOT_CHARTS", raising=False)
    monkeypatch.delenv("GITOPSBOT_GIT_TOKEN", raising=False)


def everything_in_git(world: World) -> str:
    return git("--git-dir", str(world.bare), "log", "--all", "-p")


@pytest.mark.slow
@pytest.mark.slow
@pytest.mark.usefixtures("env")
def test_propose_once_then_comment(
    world_factory: Callable[..., World], capsys: pytest.CaptureFixture[str]
) -> None:
    world = world_factory(versions={"staging": "1.8.0"})
    assert main(["propose", "--once", "--fleet-url", world.remote_url]) == 0
    out = capsys.readouterr()
    assert "staging: 1.8.3 #" in out.out and "opened" in out.out
    (number,) = world.forge_server.pulls
    # A second run is a no-op (its report says so) and writes nothing to the forge.
    writes_before = [r for r in world.forge_server.log if r.method != "GET"]
    assert main(["propose", "--once", "--fleet-url", world.remote_url]) == 0
    assert "unchanged" in capsys.readouterr().out
    assert [r for r in world.forge_server.log if r.method != "GET"] == writes_before

    code = main(
        ["comment", "--cluster", "staging", "--pr", str(number), "--fleet-url", world.remote_url]
    )
    out2 = capsys.readouterr()
    assert code == 0, out2.err
    assert f"#{number} staging: plan posted" in out2.out
    comments = [c.body for c in world.forge_server.comments.values() if c.number == number]
    assert len(comments) == 1 and "gitopsbot plan for `staging`" in comments[0]
    # Run again: still one comment, edited in place.
    assert (
        main(
            [
                "comment",
                "--cluster",
                "staging",
                "--pr",
                str(number),
                "--fleet-url",
                world.remote_url,
            ]
        )
        == 0
    )
    assert len([c for c in world.forge_server.comments.values() if c.number == number]) == 1
    contexts = {s.context for s in world.forge_server.statuses}
    assert contexts == {"gitopsbot/policy"}
    shown = out.out + out.err + out2.out + out2.err + capsys.readouterr().err
    assert TOKEN not in shown
    assert TOKEN not in everything_in_git(world)


@pytest.mark.usefixtures("env")
def test_missing_token_is_named_not_printed(
    world_factory: Callable[..., World],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    world = world_factory(versions={"staging": "1.8.0"})
    monkeypatch.delenv("GITOPSBOT_FORGE_TOKEN")
    assert main(["propose", "--once", "--fleet-url", world.remote_url]) == 1  # bad settings
    err = capsys.readouterr().err
    assert "GITOPSBOT_FORGE_TOKEN" in err


@pytest.mark.usefixtures("env")
def test_git_only_flag_needs_no_token(
    world_factory: Callable[..., World],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    world = world_factory(versions={"staging": "1.8.0"})
    monkeypatch.delenv("GITOPSBOT_FORGE_TOKEN")
    assert main(["propose", "--once", "--git-only", "--fleet-url", world.remote_url]) == 0
    assert "gitopsbot plan for `staging`" in world.show(
        "gitopsbot/staging/1.8.3", "clusters/staging/PLAN.md"
    )
    assert world.forge_server.log == []


@pytest.mark.usefixtures("env")
def test_fleet_path_must_be_bare_and_the_help_example_shape_works(
    world_factory: Callable[..., World],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    world = world_factory(versions={"staging": "1.8.0"})
    monkeypatch.delenv("GITOPSBOT_FORGE_TOKEN")
    work = tmp_path / "gpu-fleet"
    git("clone", "--quiet", world.remote_url, str(work))
    capsys.readouterr()
    assert main(["propose", "--once", "--git-only", "--fleet", str(work)]) == 1
    err = capsys.readouterr().err
    assert "working copy" in err and f"git clone --bare {work} {work}.git" in err
    # what the message (and `propose --help`) says to do
    git("clone", "--quiet", "--bare", str(work), f"{work}.git")
    assert main(["propose", "--once", "--git-only", "--fleet", f"{work}.git"]) == 0
    assert "gitopsbot/staging/1.8.3" in git("--git-dir", f"{work}.git", "branch")


def test_help_example_uses_a_bare_repository() -> None:
    from gitopsbot.commands.propose import EXAMPLES

    example = next(
        line
        for line in EXAMPLES.splitlines()
        if line.startswith("  gitopsbot") and "--fleet " in line
    )
    assert "--fleet ../gpu-fleet.git" in example
    assert "  git clone --bare . ../gpu-fleet.git" in EXAMPLES  # the bare repository it names


@pytest.mark.slow
@pytest.mark.usefixtures("env")
def test_comment_on_a_version_the_index_lacks_is_a_deny_not_an_error(
    world_factory: Callable[..., World], tmp_path: Path
) -> None:
    # A person asks for a chart version the repository does not have: the request must get a
    # CHART-NOT-IN-INDEX verdict (and a failing status), not a crash.
    world = world_factory(versions={"staging": "1.8.0"})
    work = tmp_path / "person"
    git("clone", "--quiet", world.remote_url, str(work))
    git("checkout", "--quiet", "-b", "bump-staging", cwd=work)
    release = work / "clusters" / "staging" / "release.yaml"
    release.write_text(release.read_text().replace("version: 1.8.0", "version: 9.9.9"))
    git("commit", "--quiet", "-am", "staging to 9.9.9", cwd=work)
    git("push", "--quiet", "origin", "bump-staging", cwd=work)
    pr = world.forge().open_or_update_pull_request(
        PullRequestDraft(
            branch="bump-staging",
            base="main",
            title="staging 9.9.9",
            body="by hand",
            marker="human",
        )
    )
    _, plan = world.proposer().comment("staging", pr.number)
    denies = [v.rule_id for v in plan.verdicts if v.outcome.value == "denied"]
    assert "CHART-NOT-IN-INDEX" in denies
    assert plan.chart_problem
    states = {s.state for s in world.forge_server.statuses}
    assert "failure" in states


LEAK = "canary-Hn27w-enroll-token-on-main"


@pytest.mark.slow
@pytest.mark.usefixtures("env")
def test_comment_on_a_request_that_removes_a_literal_secret(
    world_factory: Callable[..., World], tmp_path: Path
) -> None:
    """The watched branch holds a literal enrollToken (pushed past the checks); the request
    that empties it (credentials.yaml already names where it comes from) gets a plan: the
    literal masked, a note naming where main holds it, and never the value on the forge."""
    world = world_factory(versions={"staging": "1.8.0"})
    values = "clusters/staging/values.yaml"
    clean = world.show("main", values)
    leaked = clean.replace('enrollToken: ""', f'enrollToken: "{LEAK}"', 1)
    assert leaked != clean
    world.human_commit({values: leaked}, "staging: token inline")
    line = 1 + next(i for i, text in enumerate(leaked.splitlines()) if LEAK in text)
    work = tmp_path / "person"
    git("clone", "--quiet", world.remote_url, str(work))
    git("checkout", "--quiet", "-b", "move-token", cwd=work)
    (work / values).write_text(clean)
    git("commit", "--quiet", "-am", "staging: the token from credentials.yaml", cwd=work)
    git("push", "--quiet", "origin", "move-token", cwd=work)
    pr = world.forge().open_or_update_pull_request(
        PullRequestDraft(
            branch="move-token", base="main", title="move the token", body="by hand", marker="human"
        )
    )
    _, plan = world.proposer().comment("staging", pr.number)
    note = plan.notes[0]
    assert note.startswith("the baseline (git:main) holds 1 secret-looking literal")
    assert f"`clusters/staging/values.yaml:{line}` (`agent.enrollToken`)" in note
    assert "This change removes it" in note
    (body,) = [c.body for c in world.forge_server.comments.values() if c.number == pr.number]
    assert f"- {note}" in body
    assert LEAK not in body and LEAK not in repr(plan)
