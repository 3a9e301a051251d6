"""Layering: the pure core stays pure, and vendor libraries stop at the adapters.

Aspects: core/ imports no I/O, clock, environment or vendor module; pygit2, kubernetes, httpx,
waitress and subprocess are imported only under adapters/ (and the sandbox, which *is* the
outside world, may run subprocesses and servers but not the bot's vendor clients); bot/ never
imports an adapter; no production module imports the test fakes.
"""

from __future__ import annotations

import ast
import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "gitopsbot"

CORE_FORBIDDEN = {
    "os",
    "sys",
    "io",
    "socket",
    "subprocess",
    "time",
    "threading",
    "asyncio",
    "logging",
    "pathlib",
    "shutil",
    "tempfile",
    "random",
    "urllib",
    "http",
    "select",
    "signal",
    "pygit2",
    "kubernetes",
    "httpx",
    "apscheduler",
    "requests",
    "gitopsbot.adapters",
    "gitopsbot.bot",
    "gitopsbot.sandbox",
    "gitopsbot.settings",
    "gitopsbot.app",
}
VENDOR = {"pygit2", "kubernetes", "httpx", "subprocess", "waitress", "prometheus_client"}
VENDOR |= {"jwt", "cryptography"}  # a GitHub App's JWT and key (adapters/forge/github_app.py)
VENDOR |= {"jinja2"}  # the fleet page's templates (adapters/fleet_page.py)
# datetime is allowed in core for types and arithmetic, never for reading the clock.
CLOCK_CALLS = {"now", "utcnow", "today", "time", "monotonic", "perf_counter"}


def _modules(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if ".venv" not in p.parts)


@functools.cache  # several tests walk every module: parse each once per process
def _imports(path: Path) -> frozenset[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return frozenset(names)


def _hits(imported: frozenset[str], banned: set[str]) -> set[str]:
    return {m for m in imported for b in banned if m == b or m.startswith(b + ".")}


def _rel(path: Path) -> str:
    return path.relative_to(PACKAGE.parent).as_posix()


@pytest.mark.parametrize("path", _modules(PACKAGE / "core"), ids=_rel)
def test_core_imports_no_io(path: Path) -> None:
    assert not _hits(_imports(path), CORE_FORBIDDEN), f"{_rel(path)} imports I/O into core"


@pytest.mark.parametrize("path", _modules(PACKAGE / "core"), ids=_rel)
def test_core_reads_no_clock_or_environment(path: Path) -> None:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in CLOCK_CALLS:
            base = node.value
            name = base.id if isinstance(base, ast.Name) else getattr(base, "attr", "")
            assert name not in {"datetime", "date", "time"}, (
                f"{_rel(path)}:{node.lineno} reads the clock ({name}.{node.attr})"
            )
        if isinstance(node, ast.Name) and node.id in {"open", "input", "print"}:
            assert not isinstance(getattr(node, "ctx", None), ast.Store)
            pytest.fail(f"{_rel(path)}:{node.lineno} uses {node.id}()")


def test_vendor_libraries_only_in_adapters() -> None:
    offenders = []
    for path in _modules(PACKAGE):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith("adapters/"):
            continue
        hits = _hits(_imports(path), VENDOR)
        if rel.startswith("sandbox/"):
            hits -= {"subprocess"}  # the sandbox stands in for the world: servers, git, helm
            # ... and for GitHub, which verifies an app's JWT
            hits = {h for h in hits if h.split(".")[0] not in {"jwt", "cryptography"}}
        if hits:
            offenders.append(f"{rel}: {sorted(hits)}")
    assert not offenders, "vendor imports outside adapters/:\n" + "\n".join(offenders)


def test_bot_never_imports_an_adapter() -> None:
    offenders = [
        _rel(p)
        for p in _modules(PACKAGE / "bot")
        if _hits(_imports(p), {"gitopsbot.adapters", "gitopsbot.sandbox"})
    ]
    assert not offenders, offenders


def test_no_production_module_imports_the_fakes() -> None:
    offenders = [
        _rel(p)
        for p in _modules(PACKAGE)
        if p.relative_to(PACKAGE).parts[0] != "testing"
        and _hits(_imports(p), {"gitopsbot.testing"})
    ]
    assert not offenders, offenders


def test_no_grab_bag_modules() -> None:
    bad = [_rel(p) for p in _modules(PACKAGE) if p.stem in {"utils", "helpers", "common", "misc"}]
    assert not bad, bad


def test_checker_catches_a_violation(tmp_path: Path) -> None:
    # The check itself must be able to fail.
    bad = tmp_path / "bad.py"
    bad.write_text("import subprocess\nfrom httpx import Client\n")
    assert _hits(_imports(bad), VENDOR) == {"subprocess", "httpx"}


# -- import-linter contracts (pyproject.toml, [tool.importlinter]) ---------------------------

ROOT = PACKAGE.parent


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("lint-imports")
    return subprocess.run(
        [str(exe), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def test_import_linter_contracts_are_kept() -> None:
    done = _lint_imports(ROOT)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "BROKEN" not in done.stdout and "KEPT" in done.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("core/notices/happenings.py", "import gitopsbot.bot.announcer", "layers"),
        ("commands/status.py", "import gitopsbot.adapters.git", "composition root"),
        ("app/bot.py", "import gitopsbot.sandbox.story", "never imports the sandbox"),
        ("sandbox/story.py", "import gitopsbot.adapters.helm", "wired by gitopsbot.app"),
    ],
)
def test_import_linter_catches_a_violation(
    tmp_path: Path, module: str, line: str, contract: str
) -> None:
    # The contracts must be able to fail: a copy of the package with one forbidden import.
    copy = tmp_path / "gitopsbot"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / module
    target.write_text(target.read_text() + f"\n{line}  # noqa\n")
    done = _lint_imports(tmp_path)
    assert done.returncode != 0, done.stdout[-2000:]
    _, _, broken = done.stdout.partition("Broken contracts")
    assert contract in broken, done.stdout[-3000:]
