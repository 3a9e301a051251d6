"""The post-renderer helm runs starts without the rest of the bot (#13).

Covers: importing ``gitopsbot.post_render`` (what ``python -m gitopsbot.post_render`` runs)
loads ``core.charts.postrender``'s own imports and the standard library, and nothing else: no
kubernetes client, httpx, pygit2, apscheduler, no command line or other command; neither
the import nor the run of ``python -m gitopsbot.post_render`` (its ``-X importtime`` list)
loads ``core.fleet.model``, ``core.fleet.yaml_bounds`` or PyYAML (``yaml``); the fast entry and
``gitopsbot post-render`` give the same output, messages and exit codes (0, 1, 2, and
argparse's 2 without ``--policy``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gitopsbot.core.charts.postrender import encode_policy
from tests.executor.adapters.test_postrender import POLICY, STREAM

pytestmark = pytest.mark.slow  # the post-renderer in subprocesses (docs/testing.md)

# Run in a fresh interpreter: this test process has imported everything already.
PROBE = """
import json, sys
start = set(sys.modules)
import gitopsbot.core.charts.postrender
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
# The bot's vocabulary and PyYAML (core.model -> core.yaml_bounds -> yaml, about 25 ms of
# start): the post-renderer reads its policy with core.postrender.decode_policy_document.
NOT_FOR_THE_POST_RENDERER = (
    "gitopsbot.core.fleet.model",
    "gitopsbot.core.fleet.yaml_bounds",
    "yaml",
    "_yaml",
)
# ruamel: the rewrite's round-trip YAML, with its extension's Cython runtime
# (cython_runtime, _cython_<version>); the only third-party modules allowed.
THIRD_PARTY_ALLOWED = {"ruamel", "_ruamel_yaml", "cython_runtime"}

OLD = [sys.executable, "-m", "gitopsbot", "post-render"]
NEW = [sys.executable, "-m", "gitopsbot.post_render"]


def _top(name: str) -> str:
    return name.split(".")[0]


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


@pytest.fixture(scope="module")
def loaded() -> dict[str, set[str]]:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    return {k: set(v) for k, v in json.loads(done.stdout).items()}


@pytest.fixture(scope="module")
def imported_by_the_process(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """Every module ``python -m gitopsbot.post_render --policy FILE`` imports while it
    rewrites STREAM, lazy imports inside functions included (``-X importtime``)."""
    policy = tmp_path_factory.mktemp("start") / "policy.json"
    policy.write_text(encode_policy(POLICY), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *NEW[1:], "--policy", str(policy)],
        input=STREAM, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "autoUpdateHypervisor: false" in done.stdout
    rows = [line.split("|") for line in done.stderr.splitlines()]
    return {
        row[2].strip()
        for row in rows
        if len(row) == 3 and row[0].startswith("import time:") and "[us]" not in row[0]
    }


def test_entry_imports_neither_the_model_nor_pyyaml(loaded: dict[str, set[str]]) -> None:
    assert sorted(m for m in loaded["entry"] if _under(m, NOT_FOR_THE_POST_RENDERER)) == []


def test_post_render_process_imports_neither_the_model_nor_pyyaml(
    imported_by_the_process: set[str],
) -> None:
    assert "gitopsbot.core.charts.postrender" in imported_by_the_process  # the list is read right
    assert "ruamel.yaml" in imported_by_the_process
    found = sorted(m for m in imported_by_the_process if _under(m, NOT_FOR_THE_POST_RENDERER))
    assert found == []


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
    assert "gitopsbot.core.charts.postrender" in ours


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
