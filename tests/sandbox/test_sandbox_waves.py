"""Waves from outside, as a platform team would see them: `sandbox up`, a clone of its fleet,
the real `gitopsbot run --once` and `status` as subprocesses, real git, real helm against
the API emulator.

The sandbox cluster is in the wave `production`; the wave `staging` before it takes a cluster
`canary` (the same files, a kube context nobody has: the bot never applies anything there). A
chart bump of the sandbox is blocked by the WAVES verdict naming `canary`, nothing is
applied, `status` shows the fleet by wave with the hold. A person removes `canary` from the
fleet (a commit that does not touch the sandbox's files): the held change is judged again on
the next pass and runs to the end.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from gitopsbot.sandbox.environment import DEFAULT_CHARTS, newest_version
from tests.sandbox.test_sandbox_run_bot import cli, git, journal

INSTALLED = "1.8.0"
WAVES = """
waves:
  - name: staging
    clusters:
      names: ["canary"]
    soak: 2s
  - name: production
    clusters:
      names: ["sandbox"]
"""


@pytest.mark.slow
def test_a_later_wave_waits_then_proceeds(tmp_path: Path, binaries: dict[str, Path]) -> None:
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
        run_args = (
            "run", "--once", "--download-binaries", "--fleet-url", fleet_url,
            "--kubeconfig", kubeconfig,
        )  # fmt: skip
        token = {"GITOPSBOT_GIT_TOKEN": password}
        clone = tmp_path / "fleet"
        parts = urlsplit(fleet_url)
        user = state["credentials"]["git_username"]
        authed = parts._replace(netloc=f"{user}:{password}@{parts.netloc}").geturl()
        git(tmp_path, "clone", "--quiet", authed, str(clone), cwd=tmp_path)
        assert cli(tmp_path, *run_args, **token).returncode == 0  # the baseline

        # Waves, the canary cluster, and the sandbox's chart bump (R4 acknowledged).
        sandbox = clone / "clusters" / "sandbox"
        canary = clone / "clusters" / "canary"
        canary.mkdir()
        for name in ("release.yaml", "values.yaml", "rollout.yaml"):
            text = (sandbox / name).read_text()
            if name == "release.yaml":
                assert "kubeContext: " in text
                text = "\n".join(
                    "kubeContext: nowhere" if line.startswith("kubeContext:") else line
                    for line in text.splitlines()
                )
            (canary / name).write_text(text + ("\n" if not text.endswith("\n") else ""))
        settings = clone / "gitopsbot.yaml"
        settings.write_text(settings.read_text() + WAVES)
        release = sandbox / "release.yaml"
        release.write_text(
            release.read_text().replace(f"  version: {INSTALLED}\n", f"  version: {target}\n")
        )
        rollout = sandbox / "rollout.yaml"
        rollout.write_text(rollout.read_text() + 'acknowledgements:\n  R4: "2.13.0 stays"\n')
        git(tmp_path, "add", "--all", cwd=clone)
        git(tmp_path, "commit", "--quiet", "-m", f"waves; sandbox to {target}", cwd=clone)
        git(tmp_path, "push", "--quiet", "origin", "main", cwd=clone)

        run = cli(tmp_path, *run_args, **token)  # canary's pass fails: no such context
        j = journal(tmp_path, clone)
        assert j["status"] == "blocked", (j, run.stdout, run.stderr)
        expected = (
            "WAVES promotion-follows-waves denied: "
            f"wave production waits for wave staging: canary not on {target}"
        )
        assert expected in j["failure"], j["failure"]
        history = cli(tmp_path, "status", "--fleet-url", fleet_url, **token)
        lines = history.stdout.splitlines()
        assert "wave staging (soak 2s): canary nothing applied by the bot yet" in lines, lines
        assert "wave production (soak 0s): sandbox nothing applied by the bot yet" in lines
        assert any(line.startswith("  hold: sandbox: wave production waits") for line in lines)
        again = cli(tmp_path, *run_args, **token)
        assert journal(tmp_path, clone)["status"] == "blocked", again.stdout + again.stderr

        # A person takes canary out of the fleet: the held change starts on the next pass.
        git(tmp_path, "rm", "--quiet", "-r", "clusters/canary", cwd=clone)
        git(tmp_path, "commit", "--quiet", "-m", "canary leaves the fleet", cwd=clone)
        git(tmp_path, "push", "--quiet", "origin", "main", cwd=clone)
        outputs = []
        for _ in range(15):
            run = cli(tmp_path, *run_args, **token)
            outputs.append(run.stdout + run.stderr)
            j = journal(tmp_path, clone)
            if j["status"] in ("succeeded", "failed"):
                break
        assert (j["kind"], j["status"]) == ("upgrade", "succeeded"), "\n".join(outputs)
        state_log = git(tmp_path, "log", "--format=%s", "origin/state", cwd=clone)
        assert "started: no longer held by waves" in state_log, state_log
        status = cli(tmp_path, "status", "--fleet-url", fleet_url, **token)
        assert f"wave production (soak 0s): sandbox {target} verified " in status.stdout
    finally:
        down = cli(tmp_path, "sandbox", "down", "--state-dir", str(state_dir))
        assert down.returncode == 0, down.stdout + down.stderr
