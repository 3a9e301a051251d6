"""`gitopsbot run` from the outside: the long-running mode starts, answers webhooks and stops
cleanly on SIGTERM; ``--no-push`` leaves the fleet remote untouched even when a failure
asks for a revert; bad settings (a missing forge token, a wrong kube context) end in a
one-line message naming the file, line and field, never a traceback."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import zoneinfo
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from gitopsbot import app
from gitopsbot.app import drift as drift_app
from gitopsbot.bot.journal_store import JournalStore
from gitopsbot.bot.reconciler import Reconciler
from gitopsbot.bot.shared_repo import SharedRepo
from gitopsbot.bot.steps.executor import Executor
from gitopsbot.cli import main
from gitopsbot.core.fleet.model import BotSettings
from gitopsbot.core.forge.webhook_events import github_signature
from gitopsbot.core.records.journal import OperationKind, OperationStatus
from gitopsbot.errors import ConfigError
from gitopsbot.fleetrepo import load_fleet
from tests.executor.conftest import Env, fleet_files, git, load_fleet_dir
from tests.executor.test_reconciler_upgrade import drive

REPO_ROOT = Path(__file__).resolve().parents[2]
HOOK_SECRET = "hook-canary-3b9d1e"
FORGE_SETTINGS = (
    "watchedBranch: main\nstateBranch: gitopsbot/state\npollInterval: 1h\n"
    "forge:\n  kind: github\n  url: http://127.0.0.1:9\n  repository: acme/fleet\n"
    "  token:\n    env: TEST_RUN_FORGE_TOKEN\n"
    "  webhookSecret:\n    env: TEST_RUN_HOOK_SECRET\n"
)


@pytest.fixture(autouse=True)
def _helm_and_kubectl(binaries: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """`gitopsbot run` takes helm and kubectl from the environment here (never a download;
    docs/cluster-access.md); subprocesses inherit it."""
    monkeypatch.setenv("GITOPSBOT_HELM", str(binaries["helm4"]))
    monkeypatch.setenv("GITOPSBOT_KUBECTL", str(binaries["kubectl"]))


def remote_refs(env: Env) -> dict[str, str]:
    out = git("ls-remote", env.url, cwd=env.tmp)
    return {ref: sha for sha, ref in (line.split("\t") for line in out.splitlines())}


def offline_reconciler(env: Env) -> Reconciler:
    """Like ``env.reconciler()`` but wired as ``run --no-push`` wires it."""
    repo = env.repo("no-push")
    secrets = type("NoSecrets", (), {"resolve_all": lambda self, refs: {}})()
    executor = Executor(cluster=env.cluster, helm=env.helm, secrets=secrets)
    return Reconciler(
        repo=repo,
        store=JournalStore(repo, branch="gitopsbot/state", push=False),
        executor_for=lambda spec: executor,
        gate=env.gate(repo),
        clock=env.clock,
        load_fleet=load_fleet,
        resolve_tz=zoneinfo.ZoneInfo,
        settings=BotSettings(),
        forge=env.forge,
        push=False,
    )


# -- --no-push ----------------------------------------------------------------------------


def test_no_push_opens_no_revert_branch_and_says_so(env: Env) -> None:
    env.world.pending.add("b-gpu-1")  # b never verifies: the operation fails
    rec = offline_reconciler(env)
    rec.reconcile("lab")
    env.merge_pr(31, "lab: hv:2", fleet_files("1.0.0", "hv:2", on_failure="revert-pr", stall="5m"))
    before = remote_refs(env)
    done = drive(env, rec, passes=60)
    assert done.status is OperationStatus.FAILED
    assert "revert PR not opened" in done.remediation and "--no-push" in done.remediation
    assert remote_refs(env) == before  # no gitopsbot/revert/..., no state branch, main as is
    assert not any(ref.startswith("refs/heads/gitopsbot/") for ref in remote_refs(env))
    assert [pr for pr in env.forge.pulls.values() if pr.branch.startswith("gitopsbot/")] == []


def test_no_push_keeps_the_automatic_revert_commit_local(env: Env) -> None:
    rec = offline_reconciler(env)
    rec.reconcile("lab")
    sha = env.merge_pr(32, "lab: hv:2", fleet_files("1.0.0", "hv:2", max_duration="3m"))
    before = remote_refs(env)
    assert before["refs/heads/main"] == sha
    for _ in range(30):  # the controller never moves: only the deadline can end this
        result = rec.reconcile("lab")
        env.clock.t += timedelta(minutes=1)
        if result.action == "rollback":
            break
    assert result.action == "rollback" and "local only: --no-push" in result.detail
    rollback = rec.store.current("lab")
    assert rollback is not None and rollback.kind is OperationKind.ROLLBACK
    failed = rec.store.history("lab", rollback.reverts_op)
    assert failed is not None and failed.remediation == f"rollback:{rollback.op_id}"
    local = rec.repo.log("main", None, 1)[0]
    assert f"This reverts commit {sha}" in local.message and local.sha == rollback.desired_sha
    assert remote_refs(env) == before  # the revert stays local, so does the state branch
    done = drive(env, rec)
    assert done.kind is OperationKind.ROLLBACK and done.status is OperationStatus.SUCCEEDED
    assert remote_refs(env) == before


# -- long-running mode --------------------------------------------------------------------


def _bot_environ(env: Env) -> dict[str, str]:
    env.human.commit("forge settings", {"gitopsbot.yaml": FORGE_SETTINGS})
    return {
        **os.environ,
        "GITOPSBOT_CACHE": str(env.tmp / "cli-cache"),
        "TEST_RUN_FORGE_TOKEN": "forge-token-canary",
        "TEST_RUN_HOOK_SECRET": HOOK_SECRET,
        "PYTHONUNBUFFERED": "1",
    }


@pytest.fixture
def bot_process(env: Env) -> Iterator[tuple[subprocess.Popen[str], str]]:
    environ = _bot_environ(env)
    command = [sys.executable, "-m", "gitopsbot", "run", "--fleet-url", env.url, "--no-push"]
    proc = subprocess.Popen(
        [*command, "--webhook-listen", "127.0.0.1:0"],
        cwd=REPO_ROOT,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = ""
        for line in proc.stdout:  # blocks until the bot says where it listens (or exits)
            found = re.search(r"webhooks at (http://\S+)/webhooks/<provider>", line)
            if found:
                url = found.group(1)
                break
        assert url, f"no webhook address; stderr: {proc.stderr.read() if proc.stderr else ''}"
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.slow
def test_run_serves_webhooks_and_stops_on_sigterm(
    bot_process: tuple[subprocess.Popen[str], str],
) -> None:
    proc, url = bot_process
    assert proc.poll() is None  # alive: the loop runs until told to stop
    body = json.dumps({"zen": "ping", "hook_id": 1}).encode()
    headers = {"X-GitHub-Event": "ping", "X-GitHub-Delivery": "d-1"}
    unsigned = httpx.post(f"{url}/webhooks/github", content=body, headers=headers)
    assert unsigned.status_code == 401
    signed = {**headers, "X-Hub-Signature-256": github_signature(HOOK_SECRET, body)}
    assert httpx.post(f"{url}/webhooks/github", content=body, headers=signed).status_code == 202
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate()
    assert proc.returncode == 0, err
    assert "SIGTERM: stopped cleanly" in out
    assert "Traceback" not in err
    for secret in (HOOK_SECRET, "forge-token-canary"):
        assert secret not in out + err


@pytest.mark.slow
def test_run_in_json_mode_writes_only_json_lines(env: Env) -> None:
    # A container's log is JSON throughout: the loop's own lines (watching, webhooks at,
    # stopped) go to the log as JSON too, and nothing is printed as text.
    command = [sys.executable, "-m", "gitopsbot", "run", "--fleet-url", env.url, "--no-push"]
    proc = subprocess.Popen(
        [*command, "--webhook-listen", "127.0.0.1:0", "--log-format", "json"],
        cwd=REPO_ROOT,
        env=_bot_environ(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        seen: list[dict[str, object]] = []
        for line in proc.stderr:  # until the bot says where it listens (or exits)
            seen.append(json.loads(line))
            if "webhooks at http://" in str(seen[-1]["message"]):
                break
        assert any("watching lab" in str(r["message"]) for r in seen), seen
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert out == ""
    rest = [json.loads(line) for line in err.splitlines()]
    assert any("SIGTERM: stopped cleanly" in str(r["message"]) for r in rest), rest
    assert all(r["level"] in ("DEBUG", "INFO", "WARNING", "ERROR") for r in seen + rest)


# -- bad settings: a message, not a traceback ---------------------------------------------


def test_missing_forge_token_names_file_line_and_field(
    env: Env, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    env.human.commit("forge settings", {"gitopsbot.yaml": FORGE_SETTINGS})
    monkeypatch.setenv("GITOPSBOT_CACHE", str(env.tmp / "cli-cache"))
    monkeypatch.delenv("TEST_RUN_FORGE_TOKEN", raising=False)
    assert main(["run", "--fleet-url", env.url, "--once"]) == 1  # bad settings
    err = capsys.readouterr().err
    line = FORGE_SETTINGS.splitlines().index("    env: TEST_RUN_FORGE_TOKEN") + 1
    assert err == (
        f"gitopsbot run: gitopsbot.yaml:{line}: forge.token (env TEST_RUN_FORGE_TOKEN): "
        "environment variable is not set\n"
    )


def test_webhook_secret_is_labelled_too(env: Env) -> None:
    env.human.commit("forge settings", {"gitopsbot.yaml": FORGE_SETTINGS})
    settings = load_fleet_dir(env.human.path).settings
    assert settings.forge.webhook_secret is not None
    line = FORGE_SETTINGS.splitlines().index("    env: TEST_RUN_HOOK_SECRET") + 1
    assert (
        settings.forge.webhook_secret.values_path == f"gitopsbot.yaml:{line}: forge.webhookSecret"
    )


KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- name: c1
  cluster: {server: "https://127.0.0.1:6443"}
users:
- name: u1
  user: {token: kube-token-canary}
contexts:
- name: prod-east
  context: {cluster: c1, user: u1}
- name: staging
  context: {cluster: c1, user: u1}
current-context: staging
"""


def test_wrong_kube_context_names_release_yaml_kubeconfig_and_contexts(env: Env) -> None:
    files = fleet_files("1.0.0", "hv:1")
    release = files["clusters/lab/release.yaml"] + "kubeContext: prod-west\n"
    env.human.commit("lab: context", {"clusters/lab/release.yaml": release})
    spec = load_fleet_dir(env.human.path).clusters["lab"]
    kubeconfig = env.tmp / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    make = app.executor_factory(
        app.RunOptions(fleet_url=env.url, kubeconfig=str(kubeconfig), cache=env.tmp / "cache")
    )
    with pytest.raises(ConfigError) as caught:
        make(spec)
    message = str(caught.value)
    line = release.splitlines().index("kubeContext: prod-west") + 1
    assert f"clusters/lab/release.yaml:{line}: kubeContext" in message
    assert "'prod-west'" in message and str(kubeconfig) in message
    assert "contexts in that file: prod-east, staging" in message
    assert "kube-token-canary" not in message
    assert spec.locations["release.yaml:kubeContext"].line == line


def test_run_once_reports_a_cluster_error_without_a_traceback(
    env: Env, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GITOPSBOT_CACHE", str(env.tmp / "cli-cache"))
    missing = env.tmp / "no-such-kubeconfig"
    assert main(["run", "--fleet-url", env.url, "--once", "--kubeconfig", str(missing)]) == 0
    capsys.readouterr()  # the baseline pass reads Git only
    env.human.commit("lab: hv:2", fleet_files("1.0.0", "hv:2"))
    assert main(["run", "--fleet-url", env.url, "--once", "--kubeconfig", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gitopsbot run: lab: ") and str(missing) in err
    assert "kubeContext not set" in err and "Traceback" not in err


def test_a_taken_webhook_port_is_a_message(
    env: Env, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    env.human.commit("forge settings", {"gitopsbot.yaml": FORGE_SETTINGS})
    monkeypatch.setenv("GITOPSBOT_CACHE", str(env.tmp / "cli-cache"))
    monkeypatch.setenv("TEST_RUN_FORGE_TOKEN", "forge-token-canary")
    monkeypatch.setenv("TEST_RUN_HOOK_SECRET", HOOK_SECRET)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        listen = f"127.0.0.1:{taken.getsockname()[1]}"
        assert main(["run", "--fleet-url", env.url, "--webhook-listen", listen]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"gitopsbot run: --webhook-listen {listen}: ") and "Traceback" not in err


def test_any_bot_error_is_one_line_for_run_and_status(
    env: Env, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from gitopsbot.commands import run as run_command
    from gitopsbot.commands import status as status_command
    from gitopsbot.errors import GitUnavailable, KubeFailed

    monkeypatch.setenv("GITOPSBOT_CACHE", str(env.tmp / "cli-cache"))

    def fails(*args: object) -> int:
        raise KubeFailed("the API server said no")

    def git_gone(*args: object) -> int:
        raise GitUnavailable("fetch: connection refused")

    monkeypatch.setattr(run_command, "run_once", fails)  # an error no command path expected
    assert main(["run", "--fleet-url", env.url, "--once"]) == 2
    assert capsys.readouterr().err == "gitopsbot run: the API server said no\n"
    monkeypatch.setattr(status_command, "show", git_gone)  # e.g. while --watch refreshes
    assert main(["status", "--fleet-url", env.url]) == 2
    assert capsys.readouterr().err == "gitopsbot status: fetch: connection refused\n"


def test_workers_must_be_positive(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--fleet-url", env.url, "--once", "--workers", "0"]) == 2  # bad options
    assert "--workers 0: give 1 or more" in capsys.readouterr().err


def test_the_loop_runs_clusters_side_by_side_on_one_shared_mirror(env: Env, tmp_path: Path) -> None:
    bot = app.build_bot(
        app.RunOptions(fleet_url=env.url, workers=3, cache=tmp_path / "cache", push=False)
    )
    try:
        assert isinstance(bot.reconciler.repo, SharedRepo)
        assert bot.reconciler.store._repo is bot.reconciler.repo  # one mirror, one lock
        assert bot.scheduler.workers == 3
    finally:
        bot.close()


def test_the_drift_thread_reads_the_fleet_the_passes_parsed(
    env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The drift thread asks for the fleet at each check instant (every few seconds at 1,000
    clusters): it takes the passes' parse of the head, not a parse of its own each time (#29:
    the whole fleet parsed every few seconds was most of an idle replica's CPU)."""
    own: list[object] = []

    def counted(tree: Any) -> Any:
        own.append(tree)
        return load_fleet(tree)

    monkeypatch.setattr(drift_app, "load_fleet", counted)
    bot = app.build_bot(app.RunOptions(fleet_url=env.url, cache=tmp_path / "cache", push=False))
    try:
        assert bot.drift is not None
        bot.reconciler.repo.fetch()
        for _ in range(3):
            assert set(bot.drift._specs()) == {"lab"}
        head = bot.reconciler.repo.head("main")
        assert head is not None
        bot.reconciler.fleet_at(head)  # a pass asking for the same head
        assert bot.reconciler.fleet_parses == 1 and own == []
    finally:
        bot.close()


def test_no_helm_anywhere_is_exit_1_at_start_and_says_where_it_looked(
    env: Env, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GITOPSBOT_CACHE", str(env.tmp / "cli-cache"))
    monkeypatch.delenv("GITOPSBOT_HELM")
    monkeypatch.setenv("PATH", str(env.tmp / "empty-bin"))
    assert main(["run", "--fleet-url", env.url, "--once"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("gitopsbot run: helm not found: no --helm, no GITOPSBOT_HELM")
    assert str(env.tmp / "empty-bin") in err and "--download-binaries" in err
    assert not (env.tmp / "cli-cache" / "bin").exists()  # nothing was downloaded
