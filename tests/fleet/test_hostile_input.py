"""Hostile and careless input in a fleet repository (issue 11): each case is one edit of the
example fleet and the one located message it must give, never a traceback or a hang.

The table runs through ``fleetrepo.load_fleet`` (what ``gitopsbot validate`` and the bot
read); symbolic links need a real directory and a real Git commit, so they have their own
tests below. Every case must answer within a second: the alias bomb is 387 million nodes
once expanded.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gitopsbot.adapters.gitrefs import GitRefTree
from gitopsbot.adapters.localfiles import DirectoryTree
from gitopsbot.core.rollouts import windows
from gitopsbot.errors import FleetError
from gitopsbot.fleetrepo import find_cluster, load_cluster, load_fleet
from tests.fleet.fleet_testing import EXAMPLE, MemoryTree, alias_bomb

S = "clusters/staging/"


def _rollout_with(cron: str) -> str:
    text = (EXAMPLE / "clusters/staging/rollout.yaml").read_text()
    assert '"0 8 * * 1-5"' in text
    return text.replace('"0 8 * * 1-5"', f'"{cron}"', 1)


def _line_of(path: str, needle: str) -> int:
    text = (EXAMPLE / path).read_text()
    return next(i for i, ln in enumerate(text.splitlines(), 1) if needle in ln)


def _approve(where: str, value: str) -> tuple[str, int]:
    """The staging rollout.yaml with ``approve: <value>`` in pool inference ("pool") or at
    the top ("top"), and the line it is on."""
    text = (EXAMPLE / "clusters/staging/rollout.yaml").read_text()
    anchor = "    nodes: 2\n" if where == "pool" else "onFailure: revert-pr\n"
    indent = "    " if where == "pool" else ""
    text = text.replace(anchor, f"{anchor}{indent}approve: {value}\n", 1)
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if "approve:" in ln)
    return text, line


@dataclass(frozen=True)
class Case:
    id: str
    files: dict[str, bytes | str | None]  # path -> new content (None: removed)
    expected: str  # the whole rendered problem, or its start when it ends with "…"


CASES = [
    Case(
        "alias-bomb",
        {S + "values.yaml": alias_bomb()},
        S + "values.yaml:6:32: alias *e expands the document past 500000 nodes "
        "(an alias bomb? limits.maxNodes in gitopsbot.yaml)",
    ),
    Case(
        "recursive-alias",
        {S + "values.yaml": "a: &a [1, *a]\n"},
        S + "values.yaml:1:11: alias *a refers to its own anchor (a recursive document)",
    ),
    Case(
        "deep-nesting-50000-brackets",
        {S + "values.yaml": "a: " + "[" * 50_000 + "]" * 50_000 + "\n"},
        S + "values.yaml:1:1003: nested deeper than 100 levels (limits.maxDepth in gitopsbot.yaml)",
    ),
    Case(
        "deep-nesting-block",
        {
            S + "values.yaml": "".join("  " * i + f"k{i}:\n" for i in range(120))
            + "  " * 120
            + "x\n"
        },
        S
        + "values.yaml:101:201: nested deeper than 100 levels (limits.maxDepth in gitopsbot.yaml)",
    ),
    Case(
        "five-megabytes",
        {S + "values.yaml": "a: " + "x" * (5 << 20) + "\n"},
        S + "values.yaml: 5242884 bytes: larger than the 1048576 bytes a file may have "
        "(limits.maxBytes in gitopsbot.yaml)",
    ),
    Case(
        "limits-from-settings",
        {
            "gitopsbot.yaml": (EXAMPLE / "gitopsbot.yaml").read_text()
            + "limits:\n  maxAliases: 1\n",
            S + "values.yaml": (EXAMPLE / (S + "values.yaml")).read_text()
            + "x: &x 1\ny: [*x, *x]\n",
        },
        S + "values.yaml:…",
    ),
    Case(
        "limits-out-of-range",
        {"gitopsbot.yaml": "limits:\n  maxDepth: 5000\n"},
        "gitopsbot.yaml:2:13: limits.maxDepth: 5000 is outside 2..250",
    ),
    Case(
        "binary-file",
        {S + "values.yaml": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"},
        S + "values.yaml:3:1: a binary file, not YAML text (a NUL byte)",
    ),
    Case(
        "utf16",
        {S + "values.yaml": "a: 1\n".encode("utf-16")},
        S + "values.yaml:1:1: not UTF-8 text (a UTF-16 byte order mark)",
    ),
    Case(
        "latin1",
        {S + "release.yaml": b"environment: staging\nkubeContext: caf\xe9\n"},
        S + "release.yaml:2:17: not UTF-8 text",
    ),
    Case(
        "control-character",
        {S + "values.yaml": "a: 1\nb: bell\x07\n"},
        S + "values.yaml:2:8: malformed YAML: control characters are not allowed",
    ),
    Case(
        "cluster-dir-dotdot",
        {"clusters/..x/release.yaml": (EXAMPLE / (S + "release.yaml")).read_text()},
        "clusters/..x: cluster directory name must be a DNS-1123 label (lowercase letters, "
        "digits, '-')",
    ),
    Case(
        "cluster-dir-upper",
        {"clusters/UPPER/release.yaml": (EXAMPLE / (S + "release.yaml")).read_text()},
        "clusters/UPPER: cluster directory name must be a DNS-1123 label (lowercase letters, "
        "digits, '-')",
    ),
    Case(
        "cron-never-fires",
        {S + "rollout.yaml": _rollout_with("0 0 30 2 *")},
        f"{S}rollout.yaml:{_line_of(S + 'rollout.yaml', '0 8 * * 1-5')}:13: "
        "pools.inference.maintenanceWindow.cron: '0 0 30 2 *' never fires: no date matches it "
        "(check day-of-month against month, e.g. there is no 30 February)",
    ),
    # croniter wraps a high-low range around where cron(8) refuses it (issue 28 item 10).
    Case(
        "cron-range-backwards",
        {S + "rollout.yaml": _rollout_with("1-0 * * * *")},
        f"{S}rollout.yaml:{_line_of(S + 'rollout.yaml', '0 8 * * 1-5')}:13: "
        "pools.inference.maintenanceWindow.cron: '1-0 * * * *': the range 1-0 of the minute "
        "field runs backwards (write ranges low-high; a range across midnight or the week's "
        "end is two, e.g. hours '22-23,0-2')",
    ),
    Case(
        "cron-weekdays-backwards",
        {S + "rollout.yaml": _rollout_with("0 22 * * fri-mon")},
        f"{S}rollout.yaml:{_line_of(S + 'rollout.yaml', '0 8 * * 1-5')}:13: "
        "pools.inference.maintenanceWindow.cron: '0 22 * * fri-mon': the range fri-mon of the "
        "day-of-week field runs backwards (write ranges low-high; a range across midnight or "
        "the week's end is two, e.g. hours '22-23,0-2')",
    ),
]


# Approval in Git (issue 28 item 10): bound to an operation id of this cluster.
_APPROVE_CASES = [
    (
        "approve-not-an-operation-id",
        "pool",
        "3f1c2a9b7d10",
        "pools.inference.approve: expected an operation id such as lab-3f1c2a9b7d10 "
        "(<cluster>-<first 12 hex digits of the merge commit>), got '3f1c2a9b7d10' (copy the "
        "operation id from `gitopsbot status` or the bot's comment on the request)",
    ),
    (
        "approve-another-clusters-operation",
        "top",
        "production-3f1c2a9b7d10",
        "approve: 'production-3f1c2a9b7d10' is an operation of cluster 'production', not of "
        "'staging' (copy the operation id from `gitopsbot status` or the bot's comment on the "
        "request)",
    ),
    (
        "approve-not-a-string",
        "pool",
        "true",
        "pools.inference.approve: expected a string, got boolean (quote it)",
    ),
]
for _id, _where, _value, _message in _APPROVE_CASES:
    _text, _line = _approve(_where, _value)
    _col = 14 if _where == "pool" else 10
    CASES.append(
        Case(_id, {S + "rollout.yaml": _text}, f"{S}rollout.yaml:{_line}:{_col}: {_message}")
    )


def _tree(example_files: dict[str, str], case: Case) -> MemoryTree:
    files: dict[str, bytes | str] = dict(example_files)
    for path, content in case.files.items():
        if content is None:
            files.pop(path, None)
        else:
            files[path] = content
    return MemoryTree(files)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_input_gives_one_located_message(case: Case, example_files: dict[str, str]) -> None:
    tree = _tree(example_files, case)
    start = time.perf_counter()
    with pytest.raises(FleetError) as info:
        load_fleet(tree)
    assert time.perf_counter() - start < 1.0 + 2.0 * (case.id == "five-megabytes")
    rendered = [str(p) for p in info.value.problems]
    if case.expected.endswith("…"):
        assert any(r.startswith(case.expected[:-1]) for r in rendered), rendered
    else:
        assert case.expected in rendered, rendered


def test_both_bad_cluster_names_are_reported_together(example_files: dict[str, str]) -> None:
    release = (EXAMPLE / (S + "release.yaml")).read_text()
    files: dict[str, bytes | str] = dict(example_files)
    files["clusters/..x/release.yaml"] = release
    files["clusters/UPPER/release.yaml"] = release
    with pytest.raises(FleetError) as info:
        load_fleet(MemoryTree(files))
    named = {p.file for p in info.value.problems if "DNS-1123" in p.message}
    assert named == {"clusters/..x", "clusters/UPPER"}


def test_a_bomb_in_one_cluster_leaves_the_others_readable(example_files: dict[str, str]) -> None:
    files: dict[str, bytes | str] = dict(example_files)
    files[S + "values.yaml"] = alias_bomb()
    tree = MemoryTree(files)
    assert load_cluster(tree, "production").name == "production"
    with pytest.raises(FleetError, match="alias bomb"):
        find_cluster(tree, "staging")


# -- symbolic links: never followed, refused by name ---------------------------------------------


def _fleet_copy(root: Path) -> Path:
    for path in EXAMPLE.rglob("*"):
        if path.is_file():
            target = root / path.relative_to(EXAMPLE)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
    return root


def _symlinked(root: Path) -> Path:
    fleet = _fleet_copy(root)
    values = fleet / "clusters/staging/values.yaml"
    values.unlink()
    values.symlink_to("/etc/passwd")
    (fleet / "clusters/mirror").symlink_to("staging")
    return fleet


SYMLINK_MESSAGES = {
    "clusters/staging/values.yaml: a symlink is not allowed here (commit the file itself)",
    "clusters/mirror: a symlink is not allowed here (commit the file itself)",
}


def test_symlinks_in_a_directory_are_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(FleetError) as info:
        load_fleet(DirectoryTree(_symlinked(tmp_path)))
    rendered = {str(p) for p in info.value.problems}
    assert rendered >= SYMLINK_MESSAGES, rendered
    assert not any("missing" in r or "expected a mapping" in r for r in rendered), rendered


def test_symlinks_in_a_git_commit_are_refused_by_name(tmp_path: Path) -> None:
    fleet = _symlinked(tmp_path / "repo")
    git = ["git", "-C", str(fleet), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "symlinks"], check=True)
    with pytest.raises(FleetError) as info:
        load_fleet(GitRefTree(fleet, "HEAD"))
    rendered = {str(p) for p in info.value.problems}
    assert rendered >= SYMLINK_MESSAGES, rendered


# -- a window that was validated never raises at run time ---------------------------------------


def test_a_window_croniter_cannot_place_is_closed_not_an_exception() -> None:
    # Not loadable (the loader refuses it, above); built by hand to show the run-time side.
    window = windows.Window("0 0 30 2 *", timedelta(hours=1), UTC)
    now = datetime(2026, 3, 1, tzinfo=UTC)
    assert windows.is_open(window, now) is False
    assert windows.closes_at(window, now) is None
    assert windows.next_open(window, now) == now + timedelta(days=365)


def test_the_example_loads_after_all_this(tree_with: Callable[..., MemoryTree]) -> None:
    assert sorted(load_fleet(tree_with({})).clusters) == ["production", "staging"]
