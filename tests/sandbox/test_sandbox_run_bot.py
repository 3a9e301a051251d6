"""docs/sandbox.md, "Run the bot against the sandbox", as a user types it: `sandbox up`,
clone the fleet repository `up` made for this sandbox, a first `run --once` (the baseline),
bump the chart version, push, see it blocked for R4's acknowledgement, acknowledge, push,
`gitopsbot run --once` until the bot has recorded the upgrade
(helm upgrade included) on the state branch, `gitopsbot status`, `sandbox down` — all through
the real CLI (subprocesses), real git, real helm against the API emulator. Nothing may listen
afterwards.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from ruamel.yaml import YAML

from gitopsbot import settings
from gitopsbot.sandbox.environment import DEFAULT_CHARTS, newest_version

ROOT = Path(__file__).resolve().parents[2]
INSTALLED = "1.8.0"
STATE_BRANCH = "gitopsbot/state"  # story_fleet's gitopsbot.yaml
RUNS = 10  # `run --once` rounds; each runs until the bot waits (the controller, a rollout)


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    cache = tmp / "cache"  # the bot's mirrors go here, not in the user's cache ...
    if not cache.exists():
        cache.mkdir()
        # ... but the pinned helm/kubectl already fetched there are reused, not fetched again.
        (cache / "bin").symlink_to(settings.cache_dir() / "bin")
    return {
        **os.environ,
        "GITOPSBOT_CACHE": str(cache),
        "HOME": str(tmp / "home"),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_AUTHOR_NAME": "Fleet Admin",
        "GIT_AUTHOR_EMAIL": "admin@example.com",
        "GIT_COMMITTER_NAME": "Fleet Admin",
        "GIT_COMMITTER_EMAIL": "admin@example.com",
        **extra,
    }


def cli(tmp: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gitopsbot", *args],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp,
        env=_env(tmp, **env),
    )


def git(tmp: Path, *args: str, cwd: Path) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=_env(tmp), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout


def journal(tmp: Path, clone: Path) -> dict[str, Any]:
    git(tmp, "fetch", "--quiet", "origin", f"+{STATE_BRANCH}:refs/remotes/origin/state", cwd=clone)
    text = git(tmp, "show", "origin/state:clusters/sandbox/journal.yaml", cwd=clone)
    data: dict[str, Any] = YAML(typ="safe").load(text)
    return data


def step_state(j: dict[str, Any], name: str) -> str | None:
    return next((str(s["state"]) for s in j.get("steps") or [] if s["name"] == name), None)


@pytest.mark.slow
def test_the_documented_sequence_upgrades_the_sandbox(
    tmp_path: Path, binaries: dict[str, Path]
) -> None:
    if not Path("/proc").is_dir():
        pytest.skip("needs /proc to look for left-over processes")
    (tmp_path / "home").mkdir()
    target = newest_version(DEFAULT_CHARTS)
    assert target != INSTALLED, "the sandbox chart repository needs a newer chart to bump to"
    state_dir = tmp_path / "sbx"
    up = cli(
        tmp_path,
        *("sandbox", "up", "--state-dir", str(state_dir)),
        *("--pools", "2", "--nodes", "2", "--chart-version", INSTALLED),
    )
    state: dict[str, Any] = {}
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        state = json.loads((state_dir / "sandbox.json").read_text())
        fleet_url, password = state["services"]["git"], state["credentials"]["git_password"]
        kubeconfig = state["kubeconfig"]
        run_args = (
            "run", "--once", "--download-binaries", "--fleet-url", fleet_url,
            "--kubeconfig", kubeconfig,
        )  # fmt: skip
        assert " ".join(run_args) in up.stdout  # `up` prints the command the docs give
        token = {"GITOPSBOT_GIT_TOKEN": password}

        # The fleet `up` made matches this sandbox: its chart repository at the installed
        # version, its kube context, its pools.
        clone = tmp_path / "fleet"
        user = state["credentials"]["git_username"]
        parts = urlsplit(fleet_url)
        authed = parts._replace(netloc=f"{user}:{password}@{parts.netloc}").geturl()
        git(tmp_path, "clone", "--quiet", authed, str(clone), cwd=tmp_path)
        release_file = clone / "clusters" / "sandbox" / "release.yaml"
        release = YAML(typ="safe").load(release_file.read_text())
        assert release["chart"] == {
            "repository": state["chart_repo_url"],
            "name": "tensor-fusion",
            "version": INSTALLED,
        }
        assert release["kubeContext"] == "sandbox"
        rollout = YAML(typ="safe").load((clone / "clusters/sandbox/rollout.yaml").read_text())
        assert rollout["order"] == ["shared", "pool-2"]
        assert all("maintenanceWindow" not in p for p in rollout["pools"].values())

        # A first round records the baseline: the bot applies merges it sees, not history.
        first = cli(tmp_path, *run_args, **token)
        assert first.returncode == 0 and "sandbox: baseline" in first.stdout, (
            first.stdout + first.stderr
        )

        # The user's change: bump the chart version, push.
        text = release_file.read_text()
        assert f"  version: {INSTALLED}\n" in text
        release_file.write_text(text.replace(f"  version: {INSTALLED}\n", f"  version: {target}\n"))
        git(tmp_path, "commit", "--quiet", "-am", f"tensor-fusion {target}", cwd=clone)
        git(tmp_path, "push", "--quiet", "origin", "main", cwd=clone)

        # Judged as its pull request would be: the pinned hypervisor needs R4's acknowledgement.
        blocked = cli(tmp_path, *run_args, **token)
        assert blocked.returncode == 0, blocked.stdout + blocked.stderr
        assert "sandbox: blocked" in blocked.stdout and "R4" in blocked.stdout, blocked.stdout
        assert journal(tmp_path, clone)["status"] == "blocked"
        rollout_file = clone / "clusters" / "sandbox" / "rollout.yaml"
        rollout_file.write_text(
            rollout_file.read_text() + 'acknowledgements:\n  R4: "the sandbox keeps 2.13.0"\n'
        )
        git(tmp_path, "commit", "--quiet", "-am", "sandbox: acknowledge R4", cwd=clone)
        git(tmp_path, "push", "--quiet", "origin", "main", cwd=clone)

        outputs = []
        for _ in range(RUNS):
            run = cli(tmp_path, *run_args, **token)
            assert run.returncode == 0, run.stdout + run.stderr
            outputs.append(run.stdout)
            j = journal(tmp_path, clone)
            if j["kind"] == "upgrade" and j["status"] in ("succeeded", "failed"):
                break
        assert j["kind"] == "upgrade" and j["status"] == "succeeded", "\n".join(outputs)
        assert step_state(j, "helm-upgrade") == "succeeded"
        assert f"chart {target}" in next(
            s["detail"] for s in j["steps"] if s["name"] == "helm-upgrade"
        )

        # The real release moved (helm reads the emulator through the same kubeconfig).
        helm = subprocess.run(
            [str(binaries["helm4"]), "list", "-n", state["namespace"], "-o", "json"],
            env=_env(tmp_path, KUBECONFIG=kubeconfig),
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        (listed,) = json.loads(helm.stdout)
        assert listed["chart"] == f"tensor-fusion-{target}"

        # `run` told it as Kubernetes Events on the TensorFusionCluster too (docs/events.md).
        events = subprocess.run(
            [str(binaries["kubectl"]), "--kubeconfig", kubeconfig, "get", "events",
             "-n", "default", "--field-selector", "involvedObject.kind=TensorFusionCluster"],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout  # fmt: skip
        assert "Warning   Blocked" in events and "R4" in events, events
        assert "StepSucceeded" in events and "step helm-upgrade succeeded" in events, events
        assert "Normal    Succeeded" in events, events

        status = cli(tmp_path, "status", "--fleet-url", fleet_url, **token)
        assert status.returncode == 0, status.stdout + status.stderr
        assert "helm-upgrade" in status.stdout and "succeeded" in status.stdout

        # Sandbox credentials stay out of what the bot wrote to Git.
        state_log = git(tmp_path, "log", "-p", "origin/state", cwd=clone)
        for secret in (password, state["credentials"]["forge_token"]):
            assert secret not in state_log
            assert secret not in "".join(outputs) + status.stdout
    finally:
        down = cli(tmp_path, "sandbox", "down", "--state-dir", str(state_dir))
    assert down.returncode == 0, down.stdout + down.stderr
    assert state, "up did not record its state"
    assert not any(port_open(p) for p in state["ports"])
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if str(state_dir).encode() in cmdline:
                found.append(int(entry.name))
    assert found == []
