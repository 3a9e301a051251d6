"""The post-renderer helm runs starts without the rest of the bot (#13).

Covers: importing ``gitopsbot.post_render`` (what ``python -m gitopsbot.post_render`` runs)
loads ``core.postrender``'s own imports and the standard library, and nothing else: no
kubernetes client, httpx, pygit2, apscheduler, no command line or other command; the fast
entry and ``gitopsbot post-render`` give the same output, messages and exit codes (0, 1, 2,
and argparse's 2 without ``--policy``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gitopsbot.core.postrender import encode_policy
from tests.executor.adapters.test_postrender import POLICY, STREAM

# Run in a fresh interpreter: this test process has imported everything already.
PROBE = """
import json, sys
start = set(sys.modules)
import gitopsbot.core.postrender
core = set(sys.modules)
import gitopsbot.post_render
print(json.dumps({"start": sorted(start), "core": sorted(core), "entry": sorted(sys.modules)}))
"""

HEAVY = ("kubernetes", "httpx", "httpcore", "pygit2", "apscheduler", "urllib3", "requests")
OTHER_GITOPSBOT = (
    "gitopsbot.cli",
    "gitopsbot.commands",
    "gitopsbot.app",
    "gitopsbot.adapters",
    "gitopsbot.bot",
    "gitopsbot.sandbox",
    "gitopsbot.settings",
)
# ruamel: the rewrite's round-trip YAML. yaml (PyYAML): core.postrender -> core.model ->
# core.yaml_bounds (YamlLimits), about 10 ms, with its libyaml extension's Cython runtime
# (cython_runtime, _cython_<version>); the only third-party modules allowed.
THIRD_PARTY_ALLOWED = {"ruamel", "yaml", "_ruamel_yaml", "cython_runtime"}


def _top(name: str) -> str:
    return name.split(".")[0]


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


@pytest.fixture(scope="module")
def loaded() -> dict[str, set[str]]:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    return {k: set(v) for k, v in json.loads(done.stdout).items()}


def test_entry_imports_no_client_library(loaded: dict[str, set[str]]) -> None:
    heavy = sorted(m for m in loaded["entry"] if _under(m, HEAVY))
    assert heavy == []


def test_entry_imports_no_other_part_of_gitopsbot(loaded: dict[str, set[str]]) -> None:
    ours = {m for m in loaded["entry"] if _top(m) == "gitopsbot"}
    assert not [m for m in ours if _under(m, OTHER_GITOPSBOT)]
    # The package, the entry, and the pure core the rewrite needs.
    assert ours - {"gitopsbot", "gitopsbot.post_render"} <= {
        m for m in ours if _under(m, ("gitopsbot.core",))
    }
    assert "gitopsbot.core.postrender" in ours


def test_entry_adds_only_the_standard_library_to_core_postrender(
    loaded: dict[str, set[str]],
) -> None:
    added = loaded["entry"] - loaded["core"] - {"gitopsbot.post_render"}
    assert sorted(m for m in added if _top(m) not in sys.stdlib_module_names) == []


def test_third_party_packages_are_those_core_postrender_needs(
    loaded: dict[str, set[str]],
) -> None:
    started = {_top(m) for m in loaded["start"]}
    third = {
        _top(m)
        for m in loaded["entry"]
        if _top(m) not in sys.stdlib_module_names and _top(m) != "gitopsbot"
    } - started  # what site/the editable install loaded before any import of ours
    third = {m for m in third if not m.startswith("_cython_")}
    assert third <= THIRD_PARTY_ALLOWED, sorted(third - THIRD_PARTY_ALLOWED)
    assert "ruamel" in third


OLD = [sys.executable, "-m", "gitopsbot", "post-render"]
NEW = [sys.executable, "-m", "gitopsbot.post_render"]


def _both(args: list[str], stdin: str) -> tuple[subprocess.CompletedProcess[str], ...]:
    return tuple(
        subprocess.run(entry + args, input=stdin, capture_output=True, text=True, check=False)
        for entry in (OLD, NEW)
    )


def test_fast_entry_rewrites_like_the_command(tmp_path: Path) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(encode_policy(POLICY), encoding="utf-8")
    old, new = _both(["--policy", str(policy)], STREAM)
    assert new.returncode == old.returncode == 0, new.stderr
    assert new.stdout == old.stdout
    assert "autoUpdateHypervisor: false" in new.stdout
    assert new.stderr == old.stderr
    assert "pool 'unlisted' has no Git policy" in new.stderr


@pytest.mark.parametrize(
    ("content", "code", "message"),
    [
        pytest.param("{}", 1, ": format", id="policy-not-understood"),
        pytest.param(None, 2, "cannot read", id="policy-unreadable"),
    ],
)
def test_fast_entry_fails_like_the_command(
    tmp_path: Path, content: str | None, code: int, message: str
) -> None:
    policy = tmp_path / "policy.json"
    if content is not None:
        policy.write_text(content, encoding="utf-8")
    old, new = _both(["--policy", str(policy)], STREAM)
    assert (new.returncode, old.returncode) == (code, code)
    assert new.stderr == old.stderr
    assert "gitopsbot post-render: " in new.stderr and message in new.stderr
    assert new.stdout == old.stdout == ""


def test_fast_entry_requires_the_policy_option() -> None:
    _, new = _both([], STREAM)
    assert new.returncode == 2
    assert "the following arguments are required: --policy" in new.stderr
    assert new.stderr.startswith("usage: gitopsbot post-render")
