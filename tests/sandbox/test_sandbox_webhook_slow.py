"""A live `gitopsbot run` keeps answering webhooks and running passes under a slow-connection
attack on its webhook port (issue 11): `sandbox up`, then `gitopsbot run --webhook-listen
127.0.0.1:0` as a subprocess, as a user starts it. 300 connections that each send a byte
every half second, re-opened as fast as the bot drops them, do not grow the bot's threads;
a signed delivery is answered at once; and a chart bump pushed during the attack is taken in
(the journal on the state branch becomes an upgrade). The bot stops cleanly afterwards.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from gitopsbot.core.forge.webhook_events import github_signature
from gitopsbot.sandbox.environment import DEFAULT_CHARTS, newest_version
from tests.sandbox.test_sandbox_run_bot import INSTALLED, _env, cli, git, journal

SECRET = "sandbox-webhook-CANARY-2b7e"
SLOW = 300
ATTACK_SECONDS = 150  # the attack's own bound: it stops by itself


class Output:
    """The bot's stdout and stderr, read by two threads so neither pipe fills."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self._lock = threading.Lock()
        for stream in (proc.stdout, proc.stderr):
            threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: Any) -> None:
        for line in stream:
            with self._lock:
                self.lines.append(line.rstrip("\n"))

    def text(self) -> str:
        with self._lock:
            return "\n".join(self.lines)

    def wait_for(self, pattern: str, seconds: float) -> re.Match[str]:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            found = re.search(pattern, self.text())
            if found:
                return found
            time.sleep(0.2)
        raise AssertionError(f"no {pattern!r} in the bot's output:\n{self.text()[-4000:]}")


class SlowAttack:
    """SLOW connections to the port, each sending one byte every half second; a connection
    the bot closes is opened again at once. Bounded: it stops after ATTACK_SECONDS."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.stop = threading.Event()
        self.opened = 0
        self.closed_by_bot = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _connect(self) -> socket.socket:
        s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        s.setblocking(False)
        self.opened += 1
        return s

    def _run(self) -> None:
        line = b"POST /webhooks/github HTTP/1.1\r\nHost: forge\r\n"
        socks = [self._connect() for _ in range(SLOW)]
        end = time.monotonic() + ATTACK_SECONDS
        tick = 0
        while not self.stop.is_set() and time.monotonic() < end:
            for i, s in enumerate(socks):
                try:
                    s.send(line[tick % len(line) : tick % len(line) + 1])
                except OSError:
                    s.close()
                    self.closed_by_bot += 1
                    try:
                        socks[i] = self._connect()
                    except OSError:
                        pass
            tick += 1
            self.stop.wait(0.5)
        for s in socks:
            s.close()

    def __enter__(self) -> SlowAttack:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self._thread.join(10)


def proc_status(pid: int) -> dict[str, int]:
    """Threads and resident memory (KiB) of a process, from /proc."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return {
        "threads": int(fields["Threads"]),
        "rss_kib": int(fields["VmRSS"].split()[0]),
        "fds": len(list(Path(f"/proc/{pid}/fd").iterdir())),
    }


def push_delivery(after: str) -> tuple[bytes, dict[str, str]]:
    body = json.dumps({"ref": "refs/heads/main", "after": after}).encode()
    return body, {
        "X-GitHub-Event": "push",
        "X-GitHub-Delivery": f"live-{after[:8]}",
        "X-Hub-Signature-256": github_signature(SECRET, body),
    }


def upgrade_recorded(tmp: Path, clone: Path) -> bool:
    try:
        return journal(tmp, clone).get("kind") == "upgrade"
    except AssertionError:  # the state branch is not there yet
        return False


@pytest.mark.slow
def test_a_live_bot_answers_webhooks_and_runs_passes_under_slow_connections(
    tmp_path: Path, binaries: dict[str, Path]
) -> None:
    if not Path("/proc").is_dir():
        pytest.skip("needs /proc to read the bot's threads")
    (tmp_path / "home").mkdir()
    target = newest_version(DEFAULT_CHARTS)
    state_dir = tmp_path / "sbx"
    up = cli(
        tmp_path,
        *("sandbox", "up", "--state-dir", str(state_dir)),
        *("--pools", "2", "--nodes", "2", "--chart-version", INSTALLED),
    )
    bot: subprocess.Popen[str] | None = None
    figures: dict[str, Any] = {}
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        state = json.loads((state_dir / "sandbox.json").read_text())
        fleet_url, password = state["services"]["git"], state["credentials"]["git_password"]
        clone = tmp_path / "fleet"
        parts = urlsplit(fleet_url)
        user = state["credentials"]["git_username"]
        authed = parts._replace(netloc=f"{user}:{password}@{parts.netloc}").geturl()
        git(tmp_path, "clone", "--quiet", authed, str(clone), cwd=tmp_path)

        bot = subprocess.Popen(
            [
                *(sys.executable, "-m", "gitopsbot", "-v", "run", "--download-binaries"),
                *("--fleet-url", fleet_url),
                *("--kubeconfig", state["kubeconfig"], "--webhook-listen", "127.0.0.1:0"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
            env=_env(
                tmp_path,
                GITOPSBOT_GIT_TOKEN=password,
                GITOPSBOT_SANDBOX_WEBHOOK_SECRET=SECRET,
            ),
        )
        out = Output(bot)
        url = out.wait_for(r"webhooks at (http://127\.0\.0\.1:\d+)/webhooks/<provider>", 60)[1]
        out.wait_for(r"sandbox progress: pass finished: baseline", 120)  # the first pass has run
        figures["before"] = proc_status(bot.pid)

        with SlowAttack(int(url.rsplit(":", 1)[1])) as attack:
            time.sleep(3)  # every slow connection open and trickling
            figures["attacked"] = proc_status(bot.pid)
            body, headers = push_delivery("0" * 40)
            start = time.monotonic()
            answer = httpx.post(f"{url}/webhooks/github", content=body, headers=headers, timeout=10)
            figures["answer_seconds"] = round(time.monotonic() - start, 3)
            assert answer.status_code == 202, answer.text
            assert figures["answer_seconds"] < 2.0, figures

            # The user's change, pushed during the attack: the bot takes it in.
            release = clone / "clusters" / "sandbox" / "release.yaml"
            text = release.read_text()
            release.write_text(text.replace(f"  version: {INSTALLED}\n", f"  version: {target}\n"))
            git(tmp_path, "commit", "--quiet", "-am", f"tensor-fusion {target}", cwd=clone)
            git(tmp_path, "push", "--quiet", "origin", "main", cwd=clone)
            head = git(tmp_path, "rev-parse", "HEAD", cwd=clone).strip()
            body, headers = push_delivery(head)
            answer = httpx.post(f"{url}/webhooks/github", content=body, headers=headers, timeout=10)
            assert answer.status_code == 202, answer.text
            end = time.monotonic() + 120
            while time.monotonic() < end and not upgrade_recorded(tmp_path, clone):
                time.sleep(1)
            assert upgrade_recorded(tmp_path, clone), out.text()[-4000:]
            figures["during"] = proc_status(bot.pid)
            figures["slow_opened"] = attack.opened
            figures["slow_closed_by_bot"] = attack.closed_by_bot
        print("live webhook figures:", json.dumps(figures))  # for the report (pytest -s)
        before, attacked, during = figures["before"], figures["attacked"], figures["during"]
        # 300 slow connections (and hundreds more re-opened) cost no thread: a pass may have
        # started a helm child's reader threads meanwhile, never one per connection.
        assert max(attacked["threads"], during["threads"]) <= before["threads"] + 8, figures
        # The bound: 200 connections open at most (one descriptor each), the rest shed. A few
        # more for the pass in flight: a helm child's pipes and pidfd, the cluster's and the
        # Git remote's connections (at +4 exactly the run before the upgrade was recorded sat
        # on the edge: 214 of 214, and 215 once under load). A leak per connection would be
        # hundreds.
        assert max(attacked["fds"], during["fds"]) <= before["fds"] + 200 + 12, figures
        assert attack.closed_by_bot >= SLOW - 200
        assert "Traceback" not in out.text()
        assert "webhook connections dropped" in out.text()
        assert SECRET not in out.text()
    finally:
        if bot is not None:
            bot.send_signal(signal.SIGTERM)
            try:
                bot.wait(90)
            except subprocess.TimeoutExpired:
                bot.kill()
                bot.wait(10)
        down = cli(tmp_path, "sandbox", "down", "--state-dir", str(state_dir))
    assert down.returncode == 0, down.stdout + down.stderr
    assert bot is not None and bot.returncode == 0, out.text()[-4000:]
