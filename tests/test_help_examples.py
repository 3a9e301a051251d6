"""Every command's --help has examples, and they run (README: "every command has `--help` with
examples"; issue 17 item 7).

The walk of gitopsbot.cli's parser tree finds every command and subcommand, so a command
added without examples fails here. ``test_examples_run`` then runs the examples of each
--help as printed, in order, in one bash (an ``export`` or ``eval`` holds for the lines after
it), against one sandbox started for this module, and asserts each one's exit status.

Reading an epilog (the lines after ``examples:`` up to the first unindented one):

- an example is a shell line, with ``\\`` continuations and quotes spanning lines joined;
  a line that is only a comment heads the examples under it, up to a blank line or the next
  comment line; a ``# ...`` after an example is its own comment;
- ``needs ...`` at the start of either comment, or after ``; ``, marks an example that cannot
  run here (a pod, a real forge): it is not run, and it must say so;
- ``until Ctrl-C`` in either comment, and every example of ``demo`` (about two minutes each;
  tests/e2e/test_demo.py runs it whole), runs until it is past its start-up and is then
  sent SIGINT, as a person stops it (tests/ctrl_c.py): its status is the one
  docs/commands.md gives for that (INTERRUPTED_STATUS: 130 interrupted; 0 for run, propose
  and status --watch, which stop cleanly);
- ``exit N:`` in its own comment is the status it must end with; otherwise 0.

Substitution, the only change made to an example's text: each placeholder, a word in angle
brackets, is replaced (shell-quoted) by ``<fleet-url>`` the sandbox's fleet repository URL,
``<kubeconfig>`` its kubeconfig, ``<cluster>`` its one cluster (``sandbox``), ``<git-token>``
its Git password, ``<forge-token>`` its forge's token, ``<pr>`` a pull request this module
opens on that forge (the cluster to chart 1.8.0), ``<bare-clone>`` a bare clone of the fleet
repository, ``<command>`` ``status``. Any other ``<...>`` fails the test.

The shell is the one ``gitopsbot sandbox up``'s printed lines leave (tests/test_tools_command
.py holds that they run): PATH has the pinned helm, helm3 and kubectl (``gitopsbot tools
--shell``) and ``gitopsbot``; KUBECONFIG is the sandbox's; GITOPSBOT_GIT_TOKEN is its Git
password and a Git credential helper answers with it (as a person's would); the sandbox
fleet's webhook secret variable is set. HOME is private (``~/.cache/gitopsbot`` is the cache,
its ``bin/`` the session's binaries, so ``sandbox up`` without --state-dir starts there).
The working directory is a clone of the sandbox's fleet repository, with the repository's
``examples/`` linked in (and ignored by Git), so ``examples/fleet``, ``--fleet .`` and
``git clone --bare . ../gpu-fleet.git`` mean what they say.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gitopsbot import settings
from gitopsbot.cli import COMMANDS, build_parser, main

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
# An example that runs until Ctrl-C gets its SIGINT SETTLE seconds after its first line of
# output (past its start-up), or after SILENT_LIMIT if it says nothing (tests/ctrl_c.py).
CTRL_C = ROOT / "tests" / "ctrl_c.py"
SETTLE, SILENT_LIMIT = 3, 30
# docs/commands.md#exit-statuses: 130 interrupted; run, propose and status --watch stop
# cleanly at 0 (the way they end).
INTERRUPTED_STATUS = {"demo": 130, "sandbox": 130}
PLACEHOLDER = re.compile(r"<([a-z-]+)>")
DEMO_STATE = Path("/tmp/demo")  # demo --help's example; removed after if this module made it


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, (*path, name))


ALL = sorted(path for path, _ in _commands(build_parser()))
EPILOGS = {path: parser.epilog or "" for path, parser in _commands(build_parser())}


def test_the_walk_sees_every_command() -> None:
    top = {path[0] for path in ALL if path}
    assert top == {name.replace("_", "-") for name in COMMANDS}
    assert ("sandbox", "up") in ALL and ("sandbox", "down") in ALL
    assert ("tools",) in ALL and ("post-render",) in ALL


@pytest.mark.parametrize("path", ALL, ids=lambda p: " ".join(p) or "gitopsbot")
def test_help_has_examples(path: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([*path, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "\nexamples:\n" in out, f"gitopsbot {' '.join(path)} --help has no examples"
    examples = out.split("\nexamples:\n", 1)[1]
    assert "gitopsbot" in examples  # they show the command itself


# -- reading the examples -------------------------------------------------------------------


@dataclass(frozen=True)
class Example:
    text: str  # as printed, continuations joined
    comment: str  # its own trailing comment
    heading: str  # the comment lines above its group

    @property
    def needs(self) -> str:
        for note in (self.comment, self.heading):
            found = re.search(r"(?:^|; )(needs [^;]*)", note)
            if found:
                return found[1]
        return ""

    def interrupted(self, path: tuple[str, ...]) -> bool:
        notes = f"{self.comment} {self.heading}"
        return "until Ctrl-C" in notes or _command_of(self.text, path) == "demo"

    def expected(self, path: tuple[str, ...]) -> int:
        if self.interrupted(path):
            return INTERRUPTED_STATUS.get(_command_of(self.text, path), 0)
        found = re.search(r"\bexit (\d+):", self.comment)
        return int(found[1]) if found else 0


def _command_of(text: str, path: tuple[str, ...]) -> str:
    words = [w for w in text.split() if not w.startswith("-") and "=" not in w]
    return words[1] if len(words) > 1 and words[0] == "gitopsbot" else (path[:1] or ("",))[0]


def _split_comment(line: str) -> tuple[str, str]:
    """(code, comment) at the first ``#`` outside quotes that starts a word."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1 :].strip()
    return line.rstrip(), ""


def _complete(code: str) -> bool:
    if code.endswith("\\"):
        return False
    try:
        shlex.split(code)
    except ValueError:  # a quote still open: the example goes on on the next line
        return False
    return True


def examples(epilog: str) -> list[Example]:
    block = epilog.split("examples:\n", 1)[1] if "examples:\n" in epilog else ""
    found: list[Example] = []
    heading: list[str] = []
    pending = ""
    for raw in block.splitlines():
        if raw.strip() and not raw.startswith("  "):
            break
        line = raw[2:]
        if not pending:
            if not line.strip():
                heading = []
                continue
            if line.lstrip().startswith("#"):
                if found and found[-1].heading == " ".join(heading) and heading:
                    heading = []  # a new group starts
                heading.append(line.strip().lstrip("#").strip())
                continue
        pending = f"{pending}\n{line}" if pending else line
        code, comment = _split_comment(pending)
        if _complete(code):
            found.append(Example(code, comment, " ".join(heading)))
            pending = ""
    assert not pending, f"an example does not end: {pending!r}"
    return found


def test_reading_an_epilog() -> None:
    epilog = (
        "examples:\n"
        "  gitopsbot run --fleet-url <fleet-url>   # until Ctrl-C\n"
        "  # offline; needs a real forge\n"
        '  echo \'{"a":\n'
        "    1}' > x.json   # two lines\n"
        "  GITOPSBOT_X=1 gitopsbot comment \\\n"
        "      --pr <pr>\n"
        "\n"
        "  diff a b   # exit 1: they differ\n"
        "\nmore text\n  not an example\n"
    )
    got = examples(epilog)
    assert [e.text for e in got] == [
        "gitopsbot run --fleet-url <fleet-url>",
        "echo '{\"a\":\n  1}' > x.json",
        "GITOPSBOT_X=1 gitopsbot comment \\\n    --pr <pr>",
        "diff a b",
    ]
    assert got[0].interrupted(("run",)) and not got[1].interrupted(("run",))
    assert [bool(e.needs) for e in got] == [False, True, True, False]
    assert got[3].expected(()) == 1 and got[0].expected(("run",)) == 0


# -- the sandbox and the shell --------------------------------------------------------------


@dataclass(frozen=True)
class World:
    env: dict[str, str]
    cwd: Path
    placeholders: dict[str, str]


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"{argv}: {done.stdout}\n{done.stderr}"
    return done


def _open_pull_request(world_env: dict[str, str], fleet: Path, forge: str, token: str) -> int:
    """A pull request on the sandbox's forge for ``comment``'s examples: 1.8.7 → 1.8.0."""
    git = ["git", "-C", str(fleet)]
    _run([*git, "checkout", "-q", "-b", "examples-pr"], world_env, fleet)
    release = fleet / "clusters" / "sandbox" / "release.yaml"
    text = release.read_text()
    release.write_text(re.sub(r"(?m)^(\s*version:\s*).*$", r"\g<1>1.8.0", text, count=1))
    _run([*git, "commit", "-q", "-am", "sandbox: chart 1.8.0"], world_env, fleet)
    _run([*git, "push", "-q", "origin", "examples-pr"], world_env, fleet)
    _run([*git, "checkout", "-q", "main"], world_env, fleet)
    body = json.dumps({"head": "examples-pr", "base": "main", "title": "1.8.0", "body": "x"})
    request = urllib.request.Request(
        f"{forge}/repos/example-org/gpu-fleet/pulls",
        data=body.encode(),
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        number: int = json.load(answer)["number"]
    return number


@pytest.fixture(scope="module")
def world(binaries: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("help-examples")
    home = tmp / "home"
    (home / ".cache" / "gitopsbot").mkdir(parents=True)
    (home / ".cache" / "gitopsbot" / "bin").symlink_to(settings.cache_dir() / "bin")
    env = {
        "PATH": f"{BIN}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "GIT_TERMINAL_PROMPT": "0",
    }
    gitopsbot = str(BIN / "gitopsbot")
    tools = _run([gitopsbot, "tools", "--shell"], env, tmp).stdout
    link_dir = shlex.split(tools.split("=", 1)[1].split(":", 1)[0])[0]
    env["PATH"] = f"{link_dir}:{env['PATH']}"
    state_dir = tmp / "sbx"
    demo_existed = DEMO_STATE.exists()
    _run([gitopsbot, "sandbox", "up", "--state-dir", str(state_dir), "--nodes", "1"], env, tmp)
    try:
        state = json.loads((state_dir / "sandbox.json").read_text())
        password = state["credentials"]["git_password"]
        user = state["credentials"]["git_username"]
        env |= {
            "KUBECONFIG": state["kubeconfig"],
            "GITOPSBOT_GIT_TOKEN": password,
            "GITOPSBOT_SANDBOX_WEBHOOK_SECRET": "help-examples-webhook-secret",
            # A credential helper and a name, as a person's Git has for the fleet's server.
            "GIT_CONFIG_COUNT": "3",
            "GIT_CONFIG_KEY_0": "credential.helper",
            "GIT_CONFIG_VALUE_0": f"!f() {{ echo username={user}; echo password={password}; }}; f",
            "GIT_CONFIG_KEY_1": "user.name",
            "GIT_CONFIG_VALUE_1": "Help Examples",
            "GIT_CONFIG_KEY_2": "user.email",
            "GIT_CONFIG_VALUE_2": "help-examples@example.com",
        }
        fleet_url = state["services"]["git"]
        # A first pass records the cluster on the state branch (`status --cluster` has one).
        _run([gitopsbot, "run", "--once", "--fleet-url", fleet_url], env, tmp)
        fleet = tmp / "fleet"
        _run(["git", "clone", "-q", fleet_url, str(fleet)], env, tmp)
        (fleet / "examples").symlink_to(ROOT / "examples")
        with (fleet / ".git" / "info" / "exclude").open("a") as exclude:
            exclude.write("examples\n")
        _run(["git", "clone", "-q", "--bare", fleet_url, str(tmp / "bare.git")], env, tmp)
        forge_token = (state_dir / "forge-token").read_text().strip()
        pr = _open_pull_request(env, fleet, state["services"]["github"], forge_token)
        yield World(
            env=env,
            cwd=fleet,
            placeholders={
                "fleet-url": fleet_url,
                "kubeconfig": state["kubeconfig"],
                "cluster": "sandbox",
                "bare-clone": str(tmp / "bare.git"),
                "git-token": password,
                "forge-token": forge_token,
                "pr": str(pr),
                "command": "status",
            },
        )
    finally:
        for where in (["--state-dir", str(state_dir)], []):  # [] : an example's `sandbox up`
            subprocess.run([gitopsbot, "sandbox", "down", *where], env=env,
                           capture_output=True, timeout=120)  # fmt: skip
        if not demo_existed:
            shutil.rmtree(DEMO_STATE, ignore_errors=True)


def _substitute(text: str, placeholders: dict[str, str]) -> str:
    def one(m: re.Match[str]) -> str:
        assert m[1] in placeholders, f"<{m[1]}> is not a known placeholder: {text}"
        return shlex.quote(placeholders[m[1]])

    return PLACEHOLDER.sub(one, text)


@pytest.mark.slow
@pytest.mark.timeout(420)
@pytest.mark.module_world  # one sandbox (``world``) for every example, on one worker
@pytest.mark.parametrize("path", ALL, ids=lambda p: " ".join(p) or "gitopsbot")
def test_examples_run(path: tuple[str, ...], world: World, tmp_path: Path) -> None:
    found = examples(EPILOGS[path])
    assert found, f"gitopsbot {' '.join(path)} --help: no examples read"
    runnable = [(i, e) for i, e in enumerate(found) if not e.needs]
    assert runnable, f"gitopsbot {' '.join(path)} --help: no example runs here"
    logs = tmp_path / "logs"
    logs.mkdir()
    script = []
    for i, example in runnable:
        text = _substitute(example.text, world.placeholders)
        if example.interrupted(path):
            # One SIGINT to the command alone, as one Ctrl-C (a second one forces an exit);
            # the status is the command's.
            text = (
                f"{shlex.quote(sys.executable)} {CTRL_C} {SETTLE} {SILENT_LIMIT} -- "
                f"bash -c {shlex.quote(text)}"
            )
        # Braces: run in this shell (exports hold), output to the example's own log.
        script.append(f'{{ {text}\n}} > {logs}/{i} 2>&1 </dev/null; echo "@@ {i} $?"')
    done = subprocess.run(
        ["bash", "-c", "\n".join(script)], env=world.env, cwd=world.cwd,
        capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    statuses = {int(i): int(rc) for i, rc in re.findall(r"^@@ (\d+) (\d+)$", done.stdout, re.M)}
    problems = []
    for i, example in runnable:
        want = example.expected(path)
        got = statuses.get(i)
        if got != want:
            log = (logs / str(i)).read_text(errors="replace")[-1500:] if got is not None else ""
            problems.append(f"{example.text!r}: exit {got}, expected {want}\n{log}")
    assert not problems, (
        f"gitopsbot {' '.join(path)} --help:\n"
        + "\n\n".join(problems)
        + (f"\n{done.stderr[-1500:]}")
    )
