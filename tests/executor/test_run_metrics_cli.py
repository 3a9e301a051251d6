"""`gitopsbot run --metrics-listen` from the command line (docs/metrics.md): an address that
cannot be bound, or is not HOST:PORT, is exit status 1 with a one-line message naming the
option, never a traceback; the webhook receiver started before it is closed again."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from gitopsbot.cli import main
from tests.executor.conftest import Env
from tests.executor.test_run_cli import FORGE_SETTINGS, HOOK_SECRET

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def _settings(env: Env, binaries: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITOPSBOT_HELM", str(binaries["helm4"]))
    monkeypatch.setenv("GITOPSBOT_KUBECTL", str(binaries["kubectl"]))
    env.human.commit("forge settings", {"gitopsbot.yaml": FORGE_SETTINGS})
    monkeypatch.setenv("GITOPSBOT_CACHE", str(env.tmp / "cli-cache"))
    monkeypatch.setenv("TEST_RUN_FORGE_TOKEN", "forge-token-canary")
    monkeypatch.setenv("TEST_RUN_HOOK_SECRET", HOOK_SECRET)


def test_a_taken_metrics_port_is_a_message(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        listen = f"127.0.0.1:{taken.getsockname()[1]}"
        argv = ["run", "--fleet-url", env.url, "--webhook-listen", "127.0.0.1:0"]
        assert main([*argv, "--metrics-listen", listen]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"gitopsbot run: --metrics-listen {listen}: ") and "Traceback" not in err


def test_not_host_port_is_a_message(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--fleet-url", env.url, "--metrics-listen", "9090"]) == 1
    err = capsys.readouterr().err
    assert err == "gitopsbot run: --metrics-listen '9090': expected HOST:PORT\n"
