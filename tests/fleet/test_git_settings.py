"""``git.sshKey`` in gitopsbot.yaml: accepted as a file or env reference (never key
material), refused with file, line and field otherwise."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from gitopsbot.core.fleet.model import GitAccessSettings, SecretRef
from gitopsbot.errors import FleetError
from gitopsbot.fleetrepo import load_fleet
from tests.fleet.fleet_testing import MemoryTree

Tree = Callable[..., MemoryTree]


def settings_with(example: str, git_section: str) -> str:
    return example.rstrip("\n") + "\n" + git_section


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        (
            "git:\n  sshKey:\n    file: /etc/gitopsbot/deploy_key\n",
            SecretRef("gitopsbot.yaml:LINE: git.sshKey", "file", "/etc/gitopsbot/deploy_key"),
        ),
        (
            "git:\n  sshKey:\n    env: GITOPSBOT_DEPLOY_KEY_FILE\n",
            SecretRef("gitopsbot.yaml:LINE: git.sshKey", "env", "GITOPSBOT_DEPLOY_KEY_FILE"),
        ),
    ],
    ids=["file", "env"],
)
def test_ssh_key_reference_accepted(
    section: str, expected: SecretRef, example_files: dict[str, str], tree_with: Tree
) -> None:
    text = settings_with(example_files["gitopsbot.yaml"], section)
    fleet = load_fleet(tree_with({"gitopsbot.yaml": text}))
    # The ref is labelled with the file and the line of its source (what messages name).
    line = len(text.splitlines())
    label = expected.values_path.replace("LINE", str(line))
    assert fleet.settings.git == GitAccessSettings(ssh_key=replace(expected, values_path=label))


def test_absent_git_section_means_no_key(tree_with: Tree) -> None:
    assert load_fleet(tree_with({})).settings.git.ssh_key is None


@pytest.mark.parametrize(
    ("section", "field", "message"),
    [
        (
            "git:\n  sshKey:\n    kubernetesSecret: {name: k, key: id}\n",
            "git.sshKey",
            "file on the bot's machine",
        ),
        ("git:\n  sshKey:\n    file: /k\n    env: K\n", "git.sshKey", "exactly one source"),
        ("git:\n  sshKey:\n    env: not a var\n", "git.sshKey.env", "environment variable name"),
        ("git:\n  sshKey: /home/bot/.ssh/id_ed25519\n", "git.sshKey", "mapping"),
        ("git:\n  sshkey:\n    file: /k\n", "git.sshkey", "unknown"),
    ],
    ids=["kubernetes-secret", "two-sources", "bad-env-name", "plain-string", "typo"],
)
def test_bad_ssh_key_is_located(
    section: str, field: str, message: str, example_files: dict[str, str], tree_with: Tree
) -> None:
    text = settings_with(example_files["gitopsbot.yaml"], section)
    with pytest.raises(FleetError) as info:
        load_fleet(tree_with({"gitopsbot.yaml": text}))
    line = len(example_files["gitopsbot.yaml"].rstrip("\n").splitlines()) + 2
    problems = [p for p in info.value.problems if p.file == "gitopsbot.yaml"]
    assert any(
        p.field == field and message in (p.message + p.hint).lower() and p.line in (line, line + 1)
        for p in problems
    ), str(info.value)


def test_key_material_is_refused_not_echoed(example_files: dict[str, str], tree_with: Tree) -> None:
    # Built in pieces so secret scanners do not mistake the canary for a real key.
    canary = "-----BEGIN OPENSSH " + "PRIVATE KEY-----canary-b3BlbnNzaC1rZXktdjE"
    text = settings_with(example_files["gitopsbot.yaml"], f"git:\n  sshKey: '{canary}'\n")
    with pytest.raises(FleetError) as info:
        load_fleet(tree_with({"gitopsbot.yaml": text}))
    assert "git.sshKey" in str(info.value)
    assert "canary" not in str(info.value)
