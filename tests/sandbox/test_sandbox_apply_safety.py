"""Issue 10's reproductions, tried from outside as a platform team would: `sandbox up`, a
clone of its fleet, the real `gitopsbot run` / `status` CLI as subprocesses, real git, real
helm against the API emulator.

1. A change policy denies (F3: a worker phase without its switch; a bare chart bump without
   the R4 acknowledgement), pushed straight to the watched branch, is recorded `blocked` and
   nothing is applied.
2. The fixed change is pushed; `gitopsbot run` is killed with SIGKILL while its
   `helm upgrade` runs (the emulator slowed by its fault injection); `run --once` afterwards
   finishes the upgrade: deployed once, no revert on main, no rollback.
3. A pass that fails before any operation (a kube context the kubeconfig lacks) is recorded
   on the state branch and shown by `status`, once; the next good pass clears it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from ruamel.yaml import YAML

from gitopsbot.sandbox.environment import DEFAULT_CHARTS, newest_version
from tests.sandbox.test_sandbox_run_bot import _env, cli, git, journal

INSTALLED = "1.8.0"


def _helm_upgrades_running() -> list[int]:
    """Pids of helm processes running a bot upgrade (its description on the command line)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"upgrade" in argv and any(a.startswith(b"gitopsbot op=") for a in argv):
            found.append(int(entry.name))
    return found


def _fault(api: str, rule: dict[str, Any] | None) -> None:
    method = "POST" if rule else "DELETE"
    data = json.dumps(rule).encode() if rule else None
    request = urllib.request.Request(f"{api}/sandbox/v1/faults", data=data, method=method)
    with urllib.request.urlopen(request, timeout=10) as answer:
        answer.read()


def _history(tmp: Path, helm: Path, kubeconfig: str, namespace: str, release: str) -> Any:
    done = subprocess.run(
        [str(helm), "history", release, "-n", namespace, "-o", "json"],
        env=_env(tmp, KUBECONFIG=kubeconfig),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout)


@pytest.mark.slow
def test_policy_gate_kill_during_helm_and_failing_passes_from_outside(
    tmp_path: Path, binaries: dict[str, Path]
) -> None:
    if not Path("/proc").is_dir():
        pytest.skip("needs /proc to find the bot's helm")
    (tmp_path / "home").mkdir()
    target = newest_version(DEFAULT_CHARTS)
    state_dir = tmp_path / "sbx"
    up = cli(
        tmp_path,
        *("sandbox", "up", "--state-dir", str(state_dir)),
        *("--pools", "2", "--nodes", "2", "--chart-version", INSTALLED),
    )
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        state = json.loads((state_dir / "sandbox.json").read_text())
        fleet_url, password = state["services"]["git"], state["credentials"]["git_password"]
        kubeconfig = state["kubeconfig"]
        ns, release = state["namespace"], state["release"]
        run_args = (
            "run", "--download-binaries", "--fleet-url", fleet_url, "--kubeconfig", kubeconfig
        )  # fmt: skip
        token = {"GITOPSBOT_GIT_TOKEN": password}
        clone = tmp_path / "fleet"
        parts = urlsplit(fleet_url)
        user = state["credentials"]["git_username"]
        authed = parts._replace(netloc=f"{user}:{password}@{parts.netloc}").geturl()
        git(tmp_path, "clone", "--quiet", authed, str(clone), cwd=tmp_path)
        assert cli(tmp_path, *run_args, "--once", **token).returncode == 0  # the baseline

        # 1. Denied, pushed directly: blocked, nothing applied.
        release_file = clone / "clusters" / "sandbox" / "release.yaml"
        rollout_file = clone / "clusters" / "sandbox" / "rollout.yaml"
        good_rollout = rollout_file.read_text()
        rollout = YAML(typ="safe").load(good_rollout)
        assert rollout["pools"]["shared"]["phases"] == ["hypervisor"]
        assert "autoUpdateWorker" not in rollout["pools"]["shared"]
        phases = "    phases: [hypervisor]\n"
        assert good_rollout.count(phases) >= 1
        rollout_file.write_text(
            good_rollout.replace(phases, "    phases: [hypervisor, worker]\n", 1)
        )
        text = release_file.read_text()
        release_file.write_text(text.replace(f"  version: {INSTALLED}\n", f"  version: {target}\n"))
        git(tmp_path, "commit", "--quiet", "-am", f"tensor-fusion {target}", cwd=clone)
        git(tmp_path, "push", "--quiet", "origin", "main", cwd=clone)
        run = cli(tmp_path, *run_args, "--once", **token)
        assert run.returncode == 0, run.stdout + run.stderr
        j = journal(tmp_path, clone)
        assert j["status"] == "blocked", j
        # Both reproductions of the issue: the F3 deny, and the bare chart bump without the
        # R4 acknowledgement.
        verdicts = "\n".join(j["verdicts"])
        assert "clusters/sandbox/rollout.yaml:" in verdicts
        assert " F3 phase-needs-its-switch denied" in verdicts
        assert " R4 hypervisor-image-pinned needs-acknowledgement" in verdicts
        assert len(_history(tmp_path, binaries["helm4"], kubeconfig, ns, release)) == 1
        status = cli(tmp_path, "status", "--fleet-url", fleet_url, **token)
        assert "blocked" in status.stdout and "clusters/sandbox/rollout.yaml:" in status.stdout

        # 2. The fix; the bot is killed while its helm upgrade runs.
        rollout_file.write_text(good_rollout + 'acknowledgements:\n  R4: "2.13.0 stays"\n')
        git(tmp_path, "commit", "--quiet", "-am", "shared: hypervisor only", cwd=clone)
        git(tmp_path, "push", "--quiet", "origin", "main", cwd=clone)
        _fault(state["apiserver_url"], {"action": "latency", "seconds": 0.05})
        bot = subprocess.Popen(
            [sys.executable, "-m", "gitopsbot", *run_args],
            cwd=tmp_path,
            env=_env(tmp_path, **token),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 120
            while not _helm_upgrades_running():
                assert bot.poll() is None, "the bot exited before its helm upgrade"
                assert time.monotonic() < deadline, "the bot never started helm upgrade"
                time.sleep(0.02)
            time.sleep(0.3)
            os.kill(bot.pid, signal.SIGKILL)
        finally:
            bot.kill()
            bot.wait(timeout=30)
        deadline = time.monotonic() + 30
        while _helm_upgrades_running():  # helm dies with the bot
            assert time.monotonic() < deadline, "helm outlived the killed bot"
            time.sleep(0.1)
        _fault(state["apiserver_url"], None)
        outputs = []
        for _ in range(12):
            run = cli(tmp_path, *run_args, "--once", **token)
            outputs.append(run.stdout + run.stderr)
            j = journal(tmp_path, clone)
            if j["kind"] == "upgrade" and j["status"] in ("succeeded", "failed", "blocked"):
                break
        assert (j["kind"], j["status"], j["remediation"]) == ("upgrade", "succeeded", ""), (
            "\n".join(outputs)
        )
        history = _history(tmp_path, binaries["helm4"], kubeconfig, ns, release)
        mine = f"gitopsbot op={j['op_id']} step=helm-upgrade"
        landed = [h for h in history if h["description"] == mine and h["status"] == "deployed"]
        assert len(landed) == 1, history  # deployed once
        assert not [h for h in history if h["description"].startswith("Rollback")], history
        git(tmp_path, "fetch", "--quiet", "origin", cwd=clone)
        log = git(tmp_path, "log", "--format=%s", "origin/main", cwd=clone)
        assert "Revert" not in log, log  # no automatic revert
        state_log = git(tmp_path, "log", "--format=%s", "origin/state", cwd=clone)
        assert "rollback" not in state_log.lower(), state_log

        # 3. Every pass fails before any operation: recorded once, shown, cleared.
        wrong = tmp_path / "wrong-kubeconfig"
        wrong.write_text(Path(kubeconfig).read_text().replace("sandbox", "elsewhere"))
        bad_args = (
            "run", "--once", "--download-binaries", "--fleet-url", fleet_url,
            "--kubeconfig", str(wrong),
        )  # fmt: skip
        for _ in range(2):
            failing = cli(tmp_path, *bad_args, **token)
            assert failing.returncode != 0, failing.stdout + failing.stderr
            assert "elsewhere" in failing.stderr or "sandbox" in failing.stderr
        status = cli(tmp_path, "status", "--fleet-url", fleet_url, **token)
        assert "every pass fails since" in status.stdout, status.stdout
        journal(tmp_path, clone)  # fetches the state branch
        state_log = git(tmp_path, "log", "--format=%s", "origin/state", cwd=clone)
        assert state_log.count("passes fail") == 1, state_log
        assert cli(tmp_path, *run_args, "--once", **token).returncode == 0
        status = cli(tmp_path, "status", "--fleet-url", fleet_url, **token)
        assert "every pass fails" not in status.stdout, status.stdout
    finally:
        down = cli(tmp_path, "sandbox", "down", "--state-dir", str(state_dir))
        assert down.returncode == 0, down.stdout + down.stderr
