"""`gitopsbot tools` puts the pinned helm and kubectl on a person's PATH, and every command
`gitopsbot sandbox up` prints works as printed (issue 17 item 6).

"A fresh shell" here is ``bash`` with an environment of PATH (the venv's bin directory, where
the ``gitopsbot`` script is, then the system's), HOME (a private one: ``helm repo add``
writes there) and GITOPSBOT_CACHE (the cache the session's binaries are in, as the user's
own ~/.cache would be): nothing of the test process, no helm or kubectl of its own.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gitopsbot import settings

pytestmark = pytest.mark.slow  # the command line in subprocesses (docs/testing.md)

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def fresh_shell(home: Path, cache: Path | None = None) -> dict[str, str]:
    home.mkdir(parents=True, exist_ok=True)
    return {
        "PATH": f"{BIN}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "GITOPSBOT_CACHE": str(cache or settings.cache_dir()),
        "LANG": "C.UTF-8",
    }


def bash(script: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", script], env=env, cwd=cwd, capture_output=True, text=True, timeout=240
    )


def test_eval_shell_puts_pinned_helm_and_kubectl_on_path(
    binaries: dict[str, Path], tmp_path: Path
) -> None:
    env = fresh_shell(tmp_path / "home")
    shell = subprocess.run(
        [str(BIN / "gitopsbot"), "tools", "--shell"], env=env, capture_output=True, text=True
    )
    assert shell.returncode == 0, shell.stderr
    assert shell.stdout.startswith("export PATH=") and shell.stdout.count("\n") == 1
    proc = bash(
        f"set -e\neval {shell.stdout.strip()!r}\n"
        "helm version\nhelm3 version --short\nkubectl version --client\n"
        "command -v helm helm3 kubectl",
        env,
        tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert 'Version:"v4.1.4"' in proc.stdout  # helm on PATH is helm 4
    assert "v3.18.0" in proc.stdout and "Client Version: v1.33.9" in proc.stdout
    found = proc.stdout.strip().splitlines()[-3:]
    assert [Path(p).resolve() for p in found] == [
        binaries["helm4"].resolve(),
        binaries["helm3"].resolve(),
        binaries["kubectl"].resolve(),
    ]


def test_missing_binary_says_how_to_fetch_it(tmp_path: Path) -> None:
    env = fresh_shell(tmp_path / "home", cache=tmp_path / "empty-cache")
    gitopsbot = str(BIN / "gitopsbot")
    shell = subprocess.run([gitopsbot, "tools", "--shell", "kubectl"], env=env,
                           capture_output=True, text=True)  # fmt: skip
    assert shell.returncode == 1 and shell.stdout == ""  # eval of nothing changes nothing
    assert "gitopsbot tools --fetch kubectl" in shell.stderr
    listed = subprocess.run([gitopsbot, "tools"], env=env, capture_output=True, text=True)
    assert listed.returncode == 1 and listed.stdout.count("not fetched yet") == 3


def printed_commands(stdout: str) -> list[str]:
    """The command lines of `sandbox up`'s output: those indented by two spaces (the
    contract connection_help states)."""
    return [line[2:] for line in stdout.splitlines() if line.startswith("  ")]


@pytest.mark.slow
def test_every_command_sandbox_up_prints_runs_as_printed(
    binaries: dict[str, Path], tmp_path: Path
) -> None:
    state_dir = tmp_path / "sbx"
    work = tmp_path / "work"
    work.mkdir()
    env = fresh_shell(tmp_path / "home")
    gitopsbot = str(BIN / "gitopsbot")
    up = subprocess.run(
        [gitopsbot, "sandbox", "up", "--state-dir", str(state_dir), "--nodes", "1"],
        env=env, cwd=work, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        commands = printed_commands(up.stdout)
        assert commands[0].startswith('eval "$(gitopsbot tools')
        assert any(c.startswith("helm ") for c in commands)
        assert any(c.startswith("kubectl ") for c in commands)
        assert commands[-1].startswith("gitopsbot sandbox down")
        # One shell, in the printed order (the exports hold for the lines after them); each
        # line's status is checked on its own.
        script = "\n".join(
            f'{command}\nrc=$?; [ $rc -eq 0 ] || {{ echo "FAILED ({i}) rc=$rc" >&2; exit 100; }}'
            for i, command in enumerate(commands)
        )
        proc = bash(script + "\ncommand -v helm kubectl", env, work)
        assert proc.returncode == 0, f"{up.stdout}\n---\n{proc.stdout}\n{proc.stderr}"
        links = proc.stdout.strip().splitlines()[-2:]
        assert [Path(p).resolve() for p in links] == [
            binaries["helm4"].resolve(),
            binaries["kubectl"].resolve(),
        ]
        assert "sandbox stopped" in proc.stdout
    finally:
        subprocess.run([gitopsbot, "sandbox", "down", "--state-dir", str(state_dir)],
                       env=env, capture_output=True, timeout=120)  # fmt: skip
