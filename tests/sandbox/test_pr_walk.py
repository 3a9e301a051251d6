"""docs/sandbox.md, "A pull request, start to finish", run exactly as written: its ``sh``
blocks are typed, in order, into one bash (as a person types them into one shell), against a
real ``gitopsbot sandbox up`` and a real ``gitopsbot run`` in the background, with real git,
curl, jq and helm 4. After each block the test checks what it did, from the Git remote, the
forge's API and the bot's state branch:

* open: the pull request is open and its head sha is the commit pushed to its branch;
* plan: the plan comment is on it and says R4 needs an acknowledgement;
* acknowledge: the head followed the second push; the plan is posted again, allowed;
* merge: the request is merged; its merge_commit_sha is main's new tip, a merge commit of the
  old main and the reviewed head;
* watch: the upgrade of that commit succeeded on the state branch, naming the request;
* revert: a rollback of it succeeded, and the release is back at chart 1.8.0;
* down: the bot and the sandbox stopped; nothing listens on the sandbox's ports.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from gitopsbot import settings

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "sandbox.md"
SECTION = "## A pull request, start to finish"
STATE_BRANCH = "gitopsbot/state"
STEP_TIMEOUT = 120.0  # seconds for one block; the whole walk takes about a minute


def doc_steps() -> list[tuple[str, str]]:
    """The section's ``sh`` blocks as (step name, text), in order; each starts with
    ``# step: NAME``."""
    text = DOC.read_text()
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    section = text[start : end if end != -1 else len(text)]
    steps = []
    for block in re.findall(r"^```sh\n(.*?)^```$", section, flags=re.S | re.M):
        first = block.splitlines()[0]
        match = re.fullmatch(r"# step: (\w+)", first)
        assert match, f"a block of {SECTION!r} does not start with '# step: NAME': {first!r}"
        steps.append((match.group(1), block))
    return steps


def doc_comment_recipes() -> list[str]:
    """The section's commands, in its prose, that list the request's comments (``curl …
    $API/issues/$PR/comments``), each once, as printed."""
    text = DOC.read_text()
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    found = re.findall(r"`(curl [^`\n]*/comments[^`\n]*)`", text[start:end])
    return list(dict.fromkeys(found))


def test_the_section_has_the_steps_this_test_checks() -> None:
    names = [name for name, _ in doc_steps()]
    assert names == [
        "up",
        "bot",
        "open",
        "plan",
        "acknowledge",
        "merge",
        "watch",
        "revert",
        "down",
    ]


class Shell:
    """One bash, fed block by block; ``run`` returns a block's output once it has run."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            ["bash", "--norc", "--noprofile"],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its own process group: the test can end all it started
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        # As a careful person would notice: stop at the first failing command.
        self._send("set -e -o pipefail\n")

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def _send(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text)
        self.proc.stdin.flush()

    def run(self, block: str, timeout: float = STEP_TIMEOUT) -> str:
        done = f"__step_done_{time.monotonic_ns()}__"
        self._send(block + f"\necho {done}\n")
        out: list[str] = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                raise AssertionError(
                    f"block timed out:\n{block}\noutput:\n{''.join(out)}"
                ) from None
            if line is None:
                raise AssertionError(f"bash exited in block:\n{block}\noutput:\n{''.join(out)}")
            if line.strip() == done:
                return "".join(out)
            out.append(line)

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout.strip()


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.slow
def test_the_documented_pull_request_walk(tmp_path: Path, binaries: dict[str, Path]) -> None:
    for tool in ("jq", "curl"):
        if subprocess.run(["which", tool], capture_output=True).returncode != 0:
            pytest.skip(f"the walk uses {tool}")
    home, cache, work = tmp_path / "home", tmp_path / "cache", tmp_path / "work"
    for d in (home, cache, work):
        d.mkdir()
    (cache / "bin").symlink_to(settings.cache_dir() / "bin")  # the pinned helm, fetched once
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "HOME": str(home),
        "GITOPSBOT_CACHE": str(cache),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
    }
    # The Git identity the section asks a person to have.
    for key, value in (("user.name", "Fleet Admin"), ("user.email", "admin@example.com")):
        subprocess.run(["git", "config", "--global", key, value], env=env, check=True)

    steps = dict(doc_steps())
    shell = Shell(work, env)
    state: dict[str, Any] = {}
    try:
        shell.run(steps["up"])
        state = json.loads((work / "sbx" / "sandbox.json").read_text())
        api = state["services"]["github"] + "/repos/example-org/gpu-fleet"
        token = (work / "sbx" / "forge-token").read_text().strip()
        bare = work / "sbx" / "git" / "fleet.git"

        def forge(path: str) -> Any:
            req = urllib.request.Request(api + path)
            req.add_header("Authorization", f"Bearer {token}")
            with urllib.request.urlopen(req, timeout=30) as answer:
                return json.loads(answer.read())

        def every_page(path: str) -> list[Any]:
            """All of a list, following its Link header page after page."""
            items: list[Any] = []
            url: str | None = api + path
            while url:
                req = urllib.request.Request(url)
                req.add_header("Authorization", f"Bearer {token}")
                with urllib.request.urlopen(req, timeout=30) as answer:
                    items += json.loads(answer.read())
                    found = re.search(r'<([^>]+)>; rel="next"', answer.headers.get("Link", ""))
                url = found.group(1) if found else None
            return items

        def tip(branch: str) -> str:
            return git(bare, "rev-parse", f"refs/heads/{branch}")

        def journal() -> dict[str, Any]:
            text = git(bare, "show", f"refs/heads/{STATE_BRANCH}:clusters/sandbox/journal.yaml")
            data: dict[str, Any] = YAML(typ="safe").load(text)
            return data

        out = shell.run(steps["bot"])
        assert "sandbox: baseline" in out, out

        out = shell.run(steps["open"])
        pushed = tip("upgrade-1.8.7")
        pr = forge("/pulls/1")
        assert pr["state"] == "open" and pr["head"]["sha"] == pushed, pr
        assert json.loads(out[out.index("{") :]) == {"number": 1, "state": "open", "head": pushed}

        out = shell.run(steps["plan"])
        comments = forge("/issues/1/comments")
        plans = [c for c in comments if "<!-- gitopsbot:plan/sandbox -->" in c["body"]]
        assert len(plans) == 1 and "needs acknowledgement" in plans[0]["body"], comments
        assert "needs acknowledgement" in out and "R4" in out, out

        out = shell.run(steps["acknowledge"])
        acked = tip("upgrade-1.8.7")
        assert acked != pushed and forge("/pulls/1")["head"]["sha"] == acked
        assert acked in out and "policy allowed" in out, out
        plans = [c for c in forge("/issues/1/comments") if "gitopsbot:plan/" in c["body"]]
        assert len(plans) == 1 and "needs acknowledgement" not in plans[0]["body"]

        main_before = tip("main")
        out = shell.run(steps["merge"])
        merged = forge("/pulls/1")
        merge_commit = tip("main")
        assert merged["state"] == "closed" and merged["merged"] is True, merged
        assert merged["merge_commit_sha"] == merge_commit, merged
        parents = git(bare, "log", "-1", "--format=%P", merge_commit).split()
        assert parents == [main_before, acked]  # a merge commit of main and the reviewed head
        assert git(bare, "show", f"{merge_commit}:clusters/sandbox/release.yaml").count(
            "version: 1.8.7"
        )
        assert '"merged": true' in out, out

        out = shell.run(steps["watch"])
        upgrade = journal()
        assert upgrade["kind"] == "upgrade" and upgrade["status"] == "succeeded", upgrade
        assert upgrade["desired_sha"] == merge_commit and upgrade["pr_number"] == 1
        assert re.search(r"^sandbox: upgrade \S+ — succeeded \(PR #1\)", out, re.M), out
        bodies = [c["body"] for c in forge("/issues/1/comments")]
        assert any(f"gitopsbot:apply/sandbox/{upgrade['op_id']}" in b for b in bodies)

        out = shell.run(steps["revert"])
        rollback = journal()
        revert = tip("main")
        assert git(bare, "log", "-1", "--format=%P", revert).split() == [merge_commit]
        assert rollback["kind"] == "rollback" and rollback["status"] == "succeeded", rollback
        assert rollback["desired_sha"] == revert and rollback["reverts_op"] == upgrade["op_id"]
        assert "chart 1.8.0" in out and re.search(r"^sandbox: rollback .* succeeded", out, re.M)

        # The prose's recipes for the request's comments, run as printed, list every comment
        # the forge has, the bot's later ones too (two a page missed them).
        recipes = doc_comment_recipes()
        everything = [c["id"] for c in every_page("/issues/1/comments")]
        assert recipes and len(everything) > 2, (recipes, everything)
        for recipe in recipes:
            listed = json.loads(shell.run(recipe + "\necho"))  # curl ends without a newline
            assert [c["id"] for c in listed] == everything, recipe

        shell.run(steps["down"])
        assert not any(port_open(p) for p in state["ports"])
    finally:
        if state and any(port_open(p) for p in state.get("ports", [])):
            subprocess.run(
                [sys.executable, "-m", "gitopsbot", "sandbox", "down", "--state-dir", "sbx"],
                cwd=work,
                env=env,
                capture_output=True,
                timeout=60,
            )
        shell.kill()
        log = work / "bot.log"
        if log.exists():
            print(log.read_text()[-4000:])
