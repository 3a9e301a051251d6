"""An alias bomb merged to the watched branch, against a live `gitopsbot run` in the sandbox
(issue 11): the bomb's cluster is recorded "fleet invalid" with the located error (file:line of
the first offending alias) within seconds, the bot's memory stays flat, it still answers a
signed webhook, and another cluster's passes still finish. Before issue 11 one such commit
grew the bot from 130 MB to 1.9 GB in a minute and hung its pass.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from tests.sandbox.test_sandbox_run_bot import INSTALLED, _env, cli, git
from tests.sandbox.test_sandbox_webhook_slow import SECRET, Output, proc_status, push_delivery


def alias_bomb() -> str:
    """Nine levels of nine aliases: 9**9 (387 million) strings once expanded."""
    lines = ["a: &a [" + ", ".join(['"lol"'] * 9) + "]"]
    for prev, name in zip("abcdefghi", "bcdefghij", strict=True):
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def state_log(tmp: Path, clone: Path) -> str:
    """The state branch's commit messages; "" until the bot's first pass has pushed it."""
    fetched = subprocess.run(
        ["git", "fetch", "--quiet", "origin", "+gitopsbot/state:refs/remotes/origin/state"],
        cwd=clone,
        env=_env(tmp),
        capture_output=True,
        text=True,
        timeout=60,
    )
    if fetched.returncode != 0:
        assert "couldn't find remote ref" in fetched.stderr, fetched.stderr
        return ""
    return git(tmp, "log", "--format=%B%x00", "origin/state", cwd=clone)


@pytest.mark.slow
def test_an_alias_bomb_merged_to_main_leaves_the_live_bot_responsive(
    tmp_path: Path, binaries: dict[str, Path]
) -> None:
    if not Path("/proc").is_dir():
        pytest.skip("needs /proc to read the bot's memory")
    (tmp_path / "home").mkdir()
    state_dir = tmp_path / "sbx"
    up = cli(
        tmp_path,
        *("sandbox", "up", "--state-dir", str(state_dir)),
        *("--pools", "2", "--nodes", "2", "--chart-version", INSTALLED),
    )
    bot: subprocess.Popen[str] | None = None
    out: Output | None = None
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        state = json.loads((state_dir / "sandbox.json").read_text())
        fleet_url, password = state["services"]["git"], state["credentials"]["git_password"]
        clone = tmp_path / "fleet"
        parts = urlsplit(fleet_url)
        user = state["credentials"]["git_username"]
        authed = parts._replace(netloc=f"{user}:{password}@{parts.netloc}").geturl()
        git(tmp_path, "clone", "--quiet", authed, str(clone), cwd=tmp_path)
        # A second cluster, whose passes must go on while the first one's files are hostile.
        shutil.copytree(clone / "clusters" / "sandbox", clone / "clusters" / "second")
        git(tmp_path, "add", "-A", cwd=clone)
        git(tmp_path, "commit", "--quiet", "-m", "a second cluster", cwd=clone)
        git(tmp_path, "push", "--quiet", "origin", "main", cwd=clone)

        bot = subprocess.Popen(
            [
                *(sys.executable, "-m", "gitopsbot", "run", "--download-binaries"),
                *("--fleet-url", fleet_url),
                *("--kubeconfig", state["kubeconfig"], "--webhook-listen", "127.0.0.1:0"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
            env=_env(
                tmp_path, GITOPSBOT_GIT_TOKEN=password, GITOPSBOT_SANDBOX_WEBHOOK_SECRET=SECRET
            ),
        )
        out = Output(bot)
        url = out.wait_for(r"webhooks at (http://127\.0\.0\.1:\d+)/webhooks/<provider>", 60)[1]
        deadline = time.monotonic() + 120
        # Its own baseline commit, or the one a first pass records for every cluster (#29).
        while not re.search(r"second: baseline|baseline \w+ for \d+ clusters\n\n.*\bsecond\b",
                            state_log(tmp_path, clone)):  # fmt: skip
            assert time.monotonic() < deadline, out.text()[-3000:]
            time.sleep(0.5)
        before = proc_status(bot.pid)

        (clone / "clusters" / "sandbox" / "values.yaml").write_text(alias_bomb())
        # The same merge pauses the second cluster: its pass records that (a merge that does
        # not touch a cluster records nothing for it), so the record shows its pass went on.
        second = clone / "clusters" / "second" / "rollout.yaml"
        second.write_text("paused: true\n" + second.read_text())
        git(tmp_path, "commit", "--quiet", "-am", "sandbox: lol", cwd=clone)
        git(tmp_path, "push", "--quiet", "origin", "main", cwd=clone)
        head = git(tmp_path, "rev-parse", "HEAD", cwd=clone).strip()
        body, headers = push_delivery(head)
        started = time.monotonic()
        answer = httpx.post(f"{url}/webhooks/github", content=body, headers=headers, timeout=10)
        assert answer.status_code == 202, answer.text

        deadline = time.monotonic() + 60
        while True:
            log = state_log(tmp_path, clone)
            if f"sandbox: fleet invalid at {head[:12]}" in log and (
                f"second: pause edits up to {head[:12]}" in log
            ):
                break
            assert time.monotonic() < deadline, log[:3000] + out.text()[-3000:]
            time.sleep(0.5)
        took = time.monotonic() - started
        record = next(e for e in log.split("\x00") if f"fleet invalid at {head[:12]}" in e)
        assert "clusters/sandbox/values.yaml:" in record, record  # located
        assert "alias" in record.lower(), record
        after = proc_status(bot.pid)
        # Still answering, and no bomb in its memory.
        again = httpx.post(f"{url}/webhooks/github", content=body, headers=headers, timeout=10)
        assert again.status_code == 202
        assert bot.poll() is None
        assert after["rss_kib"] - before["rss_kib"] < 100_000, (before, after)
        assert took < 30, took
        assert "Traceback" not in out.text()
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
    assert bot is not None and bot.returncode == 0, out.text()[-3000:] if out else ""
