"""`gitopsbot run` on a terminal (issue 17 item 1, docs/progress.md): the operation it drives
is redrawn in place below its log lines, with each pool's progress bar and batch line, and
shows an intermediate batch between 0 % and 100 %; in a pipe the log's one line per batch is
all, without escape codes. Real everything: `gitopsbot sandbox up`, a chart bump pushed to
its Git remote, the long-running `run` in a real pty (and in a pipe), stopped by a real
SIGINT."""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import struct
import subprocess
import sys
import termios
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.sandbox.test_sandbox_run_bot import _env, cli, git
from tests.test_live_view import Reader

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


@pytest.fixture
def sandbox(tmp_path: Path, binaries: dict[str, Path]) -> Iterator[dict[str, Any]]:
    """A sandbox whose fleet's baseline is recorded, and a clone to push a change from."""
    (tmp_path / "home").mkdir()
    state_dir = tmp_path / "sbx"
    up = cli(
        tmp_path,
        *("sandbox", "up", "--state-dir", str(state_dir), "--pools", "1"),
        *("--chart-version", "1.8.0"),
    )
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        state = json.loads((state_dir / "sandbox.json").read_text())
        password = state["credentials"]["git_password"]
        where = ["--download-binaries", "--fleet-url", state["services"]["git"]]
        where += ["--kubeconfig", state["kubeconfig"]]
        first = cli(tmp_path, "run", "--once", *where, GITOPSBOT_GIT_TOKEN=password)
        assert first.returncode == 0, first.stdout + first.stderr
        yield {"state": state, "where": where, "token": password}
    finally:
        down = cli(tmp_path, "sandbox", "down", "--state-dir", str(state_dir))
        assert down.returncode == 0, down.stdout + down.stderr


def push_upgrade(tmp_path: Path, sandbox: dict[str, Any]) -> None:
    state = sandbox["state"]
    user, password = state["credentials"]["git_username"], sandbox["token"]
    authed = state["services"]["git"].replace("http://", f"http://{user}:{password}@", 1)
    clone = tmp_path / "fleet"
    git(tmp_path, "clone", "--quiet", authed, str(clone), cwd=tmp_path)
    release = clone / "clusters" / "sandbox" / "release.yaml"
    release.write_text(release.read_text().replace("  version: 1.8.0\n", "  version: 1.8.7\n"))
    values = clone / "clusters" / "sandbox" / "values.yaml"
    image = "tensorfusion/tensor-fusion-hypervisor:"
    assert f"hypervisorImage: {image}2.13.0" in values.read_text()
    # A new hypervisor image, as the proposer sets it (R4): the pool rolls.
    values.write_text(values.read_text().replace(f"{image}2.13.0", f"{image}2.15.0"))
    rollout = clone / "clusters" / "sandbox" / "rollout.yaml"
    text = rollout.read_text()
    assert "batchInterval: 1s" in text
    # An availability budget makes the bot close the switch at every batch boundary and
    # look before it opens the next (docs/rollout-gates.md), so the batch between 0 % and
    # 100 % is always recorded and drawn: with only a short batchInterval it lasted 4 s and a
    # look under load could miss it (a CI flake). Two nodes of three: no batch shrinks.
    text = text.replace("batchInterval: 1s\n", "batchInterval: 1s\n    maxUnavailable: 2\n")
    assert "maxUnavailable: 2" in text, text
    rollout.write_text(text)
    git(tmp_path, "commit", "--quiet", "-am", "tensor-fusion 1.8.7", cwd=clone)
    git(tmp_path, "push", "--quiet", "origin", "main", cwd=clone)


def start_run(tmp_path: Path, sandbox: dict[str, Any], **streams: int) -> subprocess.Popen[bytes]:
    env = _env(tmp_path, GITOPSBOT_GIT_TOKEN=sandbox["token"], TERM="xterm-256color")
    env.pop("GITOPSBOT_LOG_FORMAT", None)
    return subprocess.Popen(
        [sys.executable, "-m", "gitopsbot", "run", *sandbox["where"]],
        env=env,
        cwd=tmp_path,
        start_new_session=True,
        **streams,  # type: ignore[call-overload]
    )


def stop(proc: subprocess.Popen[bytes]) -> int:
    os.kill(proc.pid, signal.SIGINT)
    try:
        return proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()


BAR = "━"  # rich's progress bar
OP_SUCCEEDED = r"progress: upgrade sandbox-[0-9a-f]+ succeeded"  # the operation's, not a step's


def test_run_on_a_terminal_redraws_the_rollout_below_its_log(
    tmp_path: Path, sandbox: dict[str, Any]
) -> None:
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 220, 0, 0))
    proc = start_run(tmp_path, sandbox, stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    out = Reader(master)
    try:
        out.wait_for("(Ctrl-C to stop)", timeout=60)
        push_upgrade(tmp_path, sandbox)
        out.wait_for("pool/shared/hypervisor", timeout=120)
        # The intermediate batch, drawn in the region: bar, 50 %, batch 2 of 2, 2 of 3 done.
        out.wait_for("2/3 nodes done · progress 50%", timeout=120)
        out.wait_for(OP_SUCCEEDED, timeout=120, regex=True)
    finally:
        code = stop(proc)
        os.close(master)
    text = out.text()
    assert code == 0, text[-3000:]
    assert "Traceback" not in text
    assert re.search(r"\x1b\[\d*A", text), "the region is never redrawn in place"
    region = [line for line in text.splitlines() if BAR in line and "progress 50%" in line]
    assert region, "no progress bar at the intermediate batch"
    assert "batch 2/2 of 2 nodes" in region[0]
    # The log lines still come, above the region.
    assert "step helm-upgrade succeeded" in text


def test_run_in_a_pipe_logs_one_line_per_batch_and_no_escape_codes(
    tmp_path: Path, sandbox: dict[str, Any]
) -> None:
    proc = start_run(tmp_path, sandbox, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    out = Reader(proc.stdout.fileno())
    try:
        out.wait_for("(Ctrl-C to stop)", timeout=60)
        push_upgrade(tmp_path, sandbox)
        out.wait_for(OP_SUCCEEDED, timeout=180, regex=True)
    finally:
        code = stop(proc)
    text = out.text()
    assert code == 0, text[-3000:]
    assert "\x1b" not in text
    batches = [line for line in text.splitlines() if "pool shared hypervisor at" in line]
    assert any("batch 1/2 of 2 nodes · 0/3 nodes done · progress 0%" in b for b in batches), text
    assert any("3/3 nodes done · progress 100%" in b or "succeeded" in b for b in text.splitlines())


def test_the_demo_on_a_terminal_redraws_the_rollout_below_its_story(tmp_path: Path) -> None:
    """The demo (docs/demo.md) in a real pty: its story lines scroll, the operation is
    redrawn below them with the pools' bars, and it still ends with 0."""
    (tmp_path / "home").mkdir()
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 220, 0, 0))
    env = _env(tmp_path, TERM="xterm-256color")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gitopsbot", "demo", "--state-dir", str(tmp_path / "demo")],
        env=env,
        cwd=tmp_path,
        start_new_session=True,
        stdin=slave,
        stdout=slave,
        stderr=slave,
    )
    os.close(slave)
    out = Reader(master)
    try:
        code = proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
        out.wait_for("where to look:", timeout=10)
        os.close(master)
    text = out.text()
    assert code == 0, text[-3000:]
    assert re.search(r"\x1b\[\d*A", text), "the region is never redrawn in place"
    bars = [line for line in text.splitlines() if BAR in line and "pool/" not in line]
    assert any("batch" in line and "nodes done" in line for line in bars), "no bar lines"
    assert "upgrade succeeded; hypervisors now: 6 on 2.15.0" in text
    assert "rollback succeeded; hypervisors now: 6 on 2.13.0" in text
    assert "Traceback" not in text
