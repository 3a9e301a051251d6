"""What ``sandbox up`` prints: how to point kubectl, helm, git and the bot at the sandbox."""

from __future__ import annotations

import shlex
from pathlib import Path
from urllib.parse import urlsplit

from gitopsbot.sandbox.environment import FORGE_TOKEN_FILE, SandboxState
from gitopsbot.sandbox.fleet_services import OWNER, REPO


def connection_help(state: SandboxState) -> str:
    """What ``up`` prints: how to point kubectl and helm at the sandbox.

    Every indented line is a command that works as printed, in this order, in a new shell
    with ``gitopsbot`` on PATH (tests/test_tools_command.py runs them); the other lines say
    what they are.
    """
    q = shlex.quote
    lines = [
        f"sandbox ready: Kubernetes API {state.apiserver_url}, "
        f"chart repository {state.chart_repo_url}",
        f"tensor-fusion {state.chart_version} installed as release {state.release} "
        f"in namespace {state.namespace}",
        "",
        "in a shell (helm and kubectl: the pinned ones, `gitopsbot tools`):",
        f"  {TOOLS_ON_PATH}",
        f"  export KUBECONFIG={q(state.kubeconfig)}",
        "  kubectl get tensorfusionclusters,gpupools,gpunodes",
        f"  helm -n {q(state.namespace)} list",
        # --force-update: a later sandbox's repository has another port, same name.
        f"  helm repo add --force-update sandbox {q(state.chart_repo_url)}",
    ]
    creds = state.credentials
    git_url, forge_url = state.services.get("git"), state.services.get("github")
    if git_url and creds.get("git_password"):
        authed = _with_userinfo(git_url, creds["git_username"], creds["git_password"])
        lines += [
            "",
            f"fleet repository (made for this sandbox, tensor-fusion {state.chart_version}): "
            f"{git_url}",
            f"git user {creds['git_username']}, password {creds['git_password']} (sandbox only)",
            f"  git clone {q(authed)}",
        ]
    if forge_url and creds.get("forge_token"):
        lines += [
            f"GitHub-compatible forge API: {forge_url} (repository {OWNER}/{REPO})",
            f"token {creds['forge_token']} (sandbox only; in "
            f"{Path(state.state_dir) / FORGE_TOKEN_FILE}, which the fleet's gitopsbot.yaml names)",
        ]
    if git_url and creds.get("git_password"):
        lines += [
            "",
            "run the bot against it (docs/sandbox.md, 'Run the bot against the sandbox'):",
            f"  export GITOPSBOT_GIT_TOKEN={q(creds['git_password'])}",
            f"  gitopsbot run --once --download-binaries --fleet-url {q(git_url)} "
            f"--kubeconfig {q(state.kubeconfig)}",
            f"  gitopsbot status --fleet-url {q(git_url)}",
        ]
    for name, url in sorted(state.services.items()):
        if name not in ("git", "github") or not creds:
            lines.append(f"{name}: {url}")
    lines += [
        "",
        "stop it with:",
        f"  gitopsbot sandbox down --state-dir {q(str(state.state_dir))}",
    ]
    return "\n".join(lines)


# Puts the pinned helm 4 (as ``helm``) and kubectl on PATH, fetching kubectl if the sandbox
# did not need it; the demo's --keep prints the same line.
TOOLS_ON_PATH = 'eval "$(gitopsbot tools --fetch --shell helm4 kubectl)"'


def _with_userinfo(url: str, user: str, password: str) -> str:
    parts = urlsplit(url)
    return parts._replace(netloc=f"{user}:{password}@{parts.netloc}").geturl()
