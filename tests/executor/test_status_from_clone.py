"""`gitopsbot status --fleet CLONE` from an ordinary clone of the fleet repository (issue 17
item 4): the clone's local state branch when it has one, else its origin/<state branch> as of
its last `git fetch` (no network); the first line says which ref was read. Real Git: a bare
remote, `git clone`, the bot's status command."""

from __future__ import annotations

from pathlib import Path

import pytest

from gitopsbot.cli import main
from gitopsbot.sandbox.gitremote import create_fleet_repo
from tests.executor.conftest import fleet_files, git

STATE = "gitopsbot/state"
FLEET_FILES = fleet_files("1.0.0", "hv:1")  # a fleet whose settings load (read_fleet)


@pytest.fixture
def fleet_source(tmp_path: Path) -> Path:
    src = tmp_path / "fleet-src"
    src.mkdir()
    for path, text in FLEET_FILES.items():
        (src / path).parent.mkdir(parents=True, exist_ok=True)
        (src / path).write_text(text)
    return src


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITOPSBOT_CACHE", str(tmp_path / "cache"))


def bare_remote(tmp_path: Path, fleet_source: Path, *, files: dict[str, str] | None = None) -> str:
    """A bare fleet remote; with ``files``, a state branch (orphan) holding them."""
    url = create_fleet_repo(tmp_path / "remote", "gpu-fleet", fleet_source)
    if files is not None:
        record_state(tmp_path, url, files)
    return url


def record_state(tmp_path: Path, url: str, files: dict[str, str], branch: str = STATE) -> None:
    """What the bot does: a commit on the state branch of the remote, pushed."""
    work = tmp_path / "bot-work"
    if not work.exists():
        git("clone", "--quiet", url, str(work), cwd=tmp_path)
    exists = git("ls-remote", "--heads", "origin", branch, cwd=work).strip()
    if exists:
        git("fetch", "--quiet", "origin", cwd=work)
        git("checkout", "--quiet", "-B", branch, f"origin/{branch}", cwd=work)
    else:
        git("checkout", "--quiet", "--orphan", branch, cwd=work)
        git("rm", "-rq", "--cached", ".", cwd=work)
        for p in FLEET_FILES:
            (work / p).unlink()
    for path, text in files.items():
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_text(text)
    git("add", *files, cwd=work)
    git("commit", "--quiet", "-m", "state", cwd=work)
    git("push", "--quiet", "origin", branch, cwd=work)


def seen(*clusters: str) -> dict[str, str]:
    return {f"clusters/{c}/seen": "0123456789abcdef0123456789abcdef01234567\n" for c in clusters}


def status(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str]]:
    code = main(["status", *args])
    return code, capsys.readouterr().out.splitlines()


def test_an_ordinary_clone_reads_origin_state(
    tmp_path: Path, fleet_source: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = bare_remote(tmp_path, fleet_source, files=seen("alpha", "beta"))
    clone = tmp_path / "gpu-fleet"
    git("clone", "--quiet", url, str(clone), cwd=tmp_path)  # only origin/gitopsbot/state there
    assert git("branch", "--list", STATE, cwd=clone).strip() == ""

    code, lines = status(capsys, "--fleet", str(clone))
    assert code == 0
    assert lines[0] == (
        f"state: {STATE} from origin/{STATE} in {clone.resolve()} (as of your last git fetch)"
    )
    assert [ln.split(":")[0] for ln in lines[1:]] == ["alpha", "beta"]
    assert "no cluster has a record" not in "\n".join(lines)

    # No network: the bot records more on the remote; the clone sees it after `git fetch`.
    record_state(tmp_path, url, seen("gamma"))
    assert "gamma" not in "\n".join(status(capsys, "--fleet", str(clone))[1])
    git("fetch", "--quiet", cwd=clone)
    code, lines = status(capsys, "--fleet", str(clone), "--cluster", "gamma")
    assert code == 0 and lines[1].startswith("gamma: no operation yet")


def test_a_clone_with_a_local_state_branch_reads_it(
    tmp_path: Path, fleet_source: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = bare_remote(tmp_path, fleet_source, files=seen("alpha"))
    clone = tmp_path / "gpu-fleet"
    git("clone", "--quiet", url, str(clone), cwd=tmp_path)
    git("branch", "--quiet", STATE, f"origin/{STATE}", cwd=clone)  # local: alpha only
    record_state(tmp_path, url, seen("beta"))
    git("fetch", "--quiet", cwd=clone)  # origin/gitopsbot/state: alpha and beta

    code, lines = status(capsys, "--fleet", str(clone))
    assert code == 0
    assert lines[0] == (
        f"state: {STATE} from the local branch {STATE} in {clone.resolve()} "
        f"(origin/{STATE} differs: the local branch wins)"
    )
    assert [ln.split(":")[0] for ln in lines[1:]] == ["alpha"]

    git("branch", "--quiet", "-f", STATE, f"origin/{STATE}", cwd=clone)  # caught up
    code, lines = status(capsys, "--fleet", str(clone))
    assert lines[0] == f"state: {STATE} from the local branch {STATE} in {clone.resolve()}"
    assert [ln.split(":")[0] for ln in lines[1:]] == ["alpha", "beta"]


def test_a_clone_with_neither_says_what_it_looked_for(
    tmp_path: Path, fleet_source: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = bare_remote(tmp_path, fleet_source)  # the bot has not run: no state branch anywhere
    clone = tmp_path / "gpu-fleet"
    git("clone", "--quiet", url, str(clone), cwd=tmp_path)

    code, lines = status(capsys, "--fleet", str(clone))
    assert code == 0  # printed (EXAMPLES: 0 printed, 1 unknown cluster, 2 Git unavailable)
    assert lines[0] == (
        f"state: no {STATE} in {clone.resolve()}: looked for the local branch {STATE} and "
        f"origin/{STATE} (none: has the bot run yet? run git fetch there)"
    )
    assert lines[1:] == ["no cluster has a record on the state branch yet"]
    code, lines = status(capsys, "--fleet", str(clone), "--cluster", "alpha")
    assert code == 1 and lines[0].startswith(f"state: no {STATE} in ")
    assert "cluster 'alpha' has no record on the state branch" in lines[1]


def test_fleet_url_fetches_now_and_says_so(
    tmp_path: Path, fleet_source: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = bare_remote(tmp_path, fleet_source, files=seen("alpha"))
    code, lines = status(capsys, "--fleet-url", url)
    assert code == 0
    assert lines[0] == f"state: {STATE} of {url} (fetched now)"
    assert lines[1].startswith("alpha: no operation yet")


def test_settings_from_origin_main_when_the_clone_has_no_local_main(
    tmp_path: Path, fleet_source: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """gitopsbot.yaml names the state branch: read from origin/main when the clone's own main
    is missing (a clone of another branch) or behind it."""
    url = bare_remote(tmp_path, fleet_source)
    record_state(tmp_path, url, seen("alpha"), branch="ops/state")
    early = tmp_path / "early"
    git("clone", "--quiet", url, str(early), cwd=tmp_path)  # main still says nothing
    human = tmp_path / "human"
    git("clone", "--quiet", url, str(human), cwd=tmp_path)
    (human / "gitopsbot.yaml").write_text("watchedBranch: main\nstateBranch: ops/state\n")
    git("commit", "--quiet", "-am", "state branch: ops/state", cwd=human)
    git("push", "--quiet", "origin", "main", cwd=human)

    other = tmp_path / "other"
    git("clone", "--quiet", "--branch", "ops/state", url, str(other), cwd=tmp_path)
    assert git("branch", "--list", "main", cwd=other).strip() == ""
    code, lines = status(capsys, "--fleet", str(other))
    assert code == 0
    assert lines[0] == f"state: ops/state from the local branch ops/state in {other.resolve()}"
    assert lines[1].startswith("alpha: ")

    git("fetch", "--quiet", cwd=early)  # local main behind origin/main
    code, lines = status(capsys, "--fleet", str(early))
    assert lines[0] == (
        f"state: ops/state from origin/ops/state in {early.resolve()} (as of your last git fetch)"
    )
    assert lines[1].startswith("alpha: ")


def test_watch_on_a_pipe_says_which_ref_once_then_only_what_changes(
    tmp_path: Path,
    fleet_source: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gitopsbot.commands import status as status_command

    url = bare_remote(tmp_path, fleet_source, files=seen("alpha"))
    clone = tmp_path / "gpu-fleet"
    git("clone", "--quiet", url, str(clone), cwd=tmp_path)
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:  # the clock, not Git: stop after one refresh
        sleeps.append(seconds)
        if len(sleeps) > 1:
            raise KeyboardInterrupt

    monkeypatch.setattr(status_command.time, "sleep", sleep)
    code, lines = status(capsys, "--fleet", str(clone), "--watch", "--interval", "0")
    assert code == 0
    first = f"state: {STATE} from origin/{STATE} in {clone.resolve()} (as of your last git fetch)"
    # Not a terminal: the whole state once, then one line per change (none here); a
    # terminal's live region shows the ref on every refresh (tests/test_live_view.py).
    assert lines == [first, "alpha: no operation yet (watching since 0123456789ab)"]
    assert len(sleeps) == 2
