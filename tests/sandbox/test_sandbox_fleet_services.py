"""`gitopsbot sandbox up` also runs the fleet side: a Git remote (smart HTTP, basic auth)
holding a fleet repository (examples/fleet by default; `up` gives it a fleet made for the
sandbox, see test_sandbox_run_bot.py), and a local GitHub-compatible forge.
Their URLs and sandbox-only credentials are printed and kept in sandbox.json; `down` stops
them with everything else: nothing listens and no process is left.

Fast aspects run the services in-process; the end-to-end one (slow) drives the real CLI and
real git."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from gitopsbot.sandbox.fleet_services import (
    EXAMPLE_FLEET,
    OWNER,
    REPO,
    FleetCredentials,
    FleetForgeService,
    FleetGitService,
)

ROOT = Path(__file__).resolve().parents[2]


def port_open(url: str) -> bool:
    port = urlsplit(url).port
    assert port is not None
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def git(
    *args: str, cwd: Path | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(cwd or ROOT),
        "GIT_TERMINAL_PROMPT": "0",  # a refused login fails instead of prompting
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    return subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=check
    )


def with_auth(url: str, user: str, password: str) -> str:
    parts = urlsplit(url)
    return parts._replace(netloc=f"{user}:{password}@{parts.netloc}").geturl()


def github_get(api: str, path: str, token: str) -> tuple[int, Any]:
    request = urllib.request.Request(api + path, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, None


def test_git_service_serves_the_example_fleet_behind_basic_auth(tmp_path: Path) -> None:
    creds = FleetCredentials.generate()
    service = FleetGitService(tmp_path / "git", creds).start()
    try:
        assert service.url.endswith("/fleet.git")
        refused = git("ls-remote", service.url, check=False)
        assert refused.returncode != 0
        authed = with_auth(service.url, creds.git_username, creds.git_password)
        clone = tmp_path / "clone"
        git("clone", "--quiet", authed, str(clone))
        assert (clone / "gitopsbot.yaml").read_text() == (
            EXAMPLE_FLEET / "gitopsbot.yaml"
        ).read_text()
    finally:
        service.stop()
    assert not port_open(service.url)
    # A kept state dir keeps the repository (and its history) on the next start.
    again = FleetGitService(tmp_path / "git", FleetCredentials.generate()).start()
    again.stop()


def test_git_service_with_files_serves_them_and_makes_them_anew_each_start(
    tmp_path: Path,
) -> None:
    creds = FleetCredentials.generate()
    for generation in ("one", "two"):  # a restart's services have new URLs: a new fleet
        files = {"gitopsbot.yaml": f"# {generation}\n", f"clusters/{generation}/x.yaml": "a: 1\n"}
        service = FleetGitService(tmp_path / "git", creds, files=files).start()
        try:
            clone = tmp_path / f"clone-{generation}"
            git(
                "clone",
                "--quiet",
                with_auth(service.url, creds.git_username, creds.git_password),
                str(clone),
            )
            got = {
                str(p.relative_to(clone)): p.read_text()
                for p in clone.rglob("*.yaml")
                if ".git" not in p.parts
            }
            assert got == files
            assert git("rev-list", "--count", "HEAD", cwd=clone).stdout.strip() == "1"
        finally:
            service.stop()


def test_forge_service_answers_with_its_token_only() -> None:
    creds = FleetCredentials.generate()
    service = FleetForgeService(creds).start()
    try:
        assert github_get(service.url, f"/repos/{OWNER}/{REPO}/pulls", creds.forge_token) == (
            200,
            [],
        )
        assert github_get(service.url, f"/repos/{OWNER}/{REPO}/pulls", "wrong")[0] == 401
    finally:
        service.stop()
    assert not port_open(service.url)


def test_credentials_are_generated_and_hidden_in_repr() -> None:
    a, b = FleetCredentials.generate(), FleetCredentials.generate()
    assert a.git_password != b.git_password and a.forge_token != b.forge_token
    assert a.git_password not in repr(a) and a.forge_token not in repr(a)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gitopsbot", "sandbox", *args],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
        env={**os.environ},
    )


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(int(entry.name))
    return found


@pytest.mark.slow
def test_up_runs_git_remote_and_forge_and_down_stops_everything(
    tmp_path: Path, binaries: dict[str, Path]
) -> None:
    if not Path("/proc").is_dir():
        pytest.skip("needs /proc to look for left-over processes")
    state_dir = tmp_path / "sbx"
    up = _cli("up", "--state-dir", str(state_dir), "--nodes", "1", "--chart-version", "1.8.0")
    state: dict[str, Any] = {}
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        state = json.loads((state_dir / "sandbox.json").read_text())
        assert oct((state_dir / "sandbox.json").stat().st_mode & 0o777) == "0o600"
        git_url, forge_url = state["services"]["git"], state["services"]["github"]
        creds = state["credentials"]
        # printed for the user: URLs and the sandbox-only credentials
        for shown in (git_url, forge_url, creds["git_password"], creds["forge_token"]):
            assert shown in up.stdout
        # a real clone of the fleet over the real transport, with the recorded credentials
        clone = tmp_path / "clone"
        git(
            "clone",
            "--quiet",
            with_auth(git_url, creds["git_username"], creds["git_password"]),
            str(clone),
        )
        assert (clone / "clusters").is_dir()
        assert github_get(forge_url, f"/repos/{OWNER}/{REPO}/pulls", creds["forge_token"])[0] == 200
        assert all(port_open(f"http://127.0.0.1:{p}") for p in state["ports"])
        assert (
            urlsplit(git_url).port in state["ports"] and urlsplit(forge_url).port in state["ports"]
        )
    finally:
        down = _cli("down", "--state-dir", str(state_dir))
    assert down.returncode == 0, down.stdout + down.stderr
    assert state, "up did not record its state"
    assert not any(port_open(f"http://127.0.0.1:{p}") for p in state["ports"])
    assert _processes_mentioning(str(state_dir)) == []
