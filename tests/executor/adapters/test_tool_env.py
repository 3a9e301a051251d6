"""The environment helm and kubectl get: an allow-list (no forge token reaches them), exec
credential plugin variables passed, KUBECONFIG only without --kubeconfig, private dirs win;
their kube flags: each only where given, the context under the tool's own flag."""

from __future__ import annotations

from gitopsbot.adapters.tool_env import cluster_flags, tool_environment

ENVIRON = {
    "PATH": "/usr/bin",
    "HOME": "/home/bot",
    "GITHUB_TOKEN": "ghp_canary",
    "GITOPSBOT_WEBHOOK_SECRET": "canary",
    "AWS_PROFILE": "fleet",
    "KUBECONFIG": "/etc/kube/config",
    "HELM_PLUGINS": "/home/bot/.local/share/helm/plugins",
}


def test_allow_list() -> None:
    env = tool_environment(ENVIRON, kubeconfig="/k", private={"HELM_PLUGINS": "/private"})
    assert env == {
        "PATH": "/usr/bin",
        "HOME": "/home/bot",
        "AWS_PROFILE": "fleet",
        "HELM_PLUGINS": "/private",
    }


def test_kubeconfig_from_environment_only_without_flag() -> None:
    env = tool_environment(ENVIRON, kubeconfig="", private={})
    assert env["KUBECONFIG"] == "/etc/kube/config"
    assert "GITHUB_TOKEN" not in env


def test_cluster_flags_only_where_given() -> None:
    assert cluster_flags("/k", "prod", context_flag="--kube-context") == [
        "--kubeconfig", "/k", "--kube-context", "prod",
    ]  # fmt: skip
    assert cluster_flags("", "prod", context_flag="--context") == ["--context", "prod"]
    assert cluster_flags("", "", context_flag="--context") == []
