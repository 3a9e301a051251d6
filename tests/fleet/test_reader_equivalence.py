"""The one YAML reader changes no meaning: for the example clusters and for a cluster carrying
the real chart's full values.yaml, the loader gives exactly what the ruamel-based loader gave
before it (``core/fleet_loading.py`` at the parent of the commit that split it, read with
``git show``): the same values, value for value and type for type, the same location for
every values path, the same release, rollout, credentials and smoke test."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from types import ModuleType
from typing import Any

import pytest

from gitopsbot.core.fleet import assembly
from tests.fleet.fleet_testing import EXAMPLE, ROOT

SPLIT_COMMIT = "e5cbf9d"
NEWER = "canary-smoke.yaml"  # a cluster file the old loader did not know
REAL_VALUES = ROOT.parent / "shared" / "tensor-fusion" / "chart-1.8.7" / "values.yaml"


@pytest.fixture(scope="module")
def old(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    done = subprocess.run(
        ["git", "show", f"{SPLIT_COMMIT}^:gitopsbot/core/fleet_loading.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"the loader before the reader is not in this clone: {done.stderr.strip()}")
    path = tmp_path_factory.mktemp("old") / "old_fleet_loading.py"
    # The modules it imports have since moved into core's packages (#31): same code, new place.
    # (The old names are spelled in pieces so that no rewrite of imports touches them.)
    old_core = "gitopsbot" + ".core"
    moved = done.stdout.replace(
        f"from {old_core} import secrets", "from gitopsbot.core.fleet import secrets"
    ).replace(f"from {old_core}.model import", "from gitopsbot.core.fleet.model import")
    path.write_text(moved)
    spec = importlib.util.spec_from_file_location("old_fleet_loading", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["old_fleet_loading"] = module
    spec.loader.exec_module(module)
    return module


def _typed(value: Any) -> Any:
    """The value with every scalar's type beside it (1 == True in Python, not in YAML)."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    return (type(value).__name__, value)


def _clusters() -> dict[str, dict[str, str]]:
    base = EXAMPLE / "clusters"
    out = {
        c: {p.name: p.read_text() for p in (base / c).iterdir()} for c in ("staging", "production")
    }
    if REAL_VALUES.is_file():
        out["real-values"] = {**out["staging"], "values.yaml": REAL_VALUES.read_text()}
    return out


@pytest.mark.parametrize("name", sorted(_clusters()))
def test_the_reader_gives_what_the_old_loader_gave(old: ModuleType, name: str) -> None:
    files = _clusters()[name]
    # canary-smoke.yaml (issue 18) came after the old loader, which refuses unknown files.
    before = old.parse_cluster("c", {k: v for k, v in files.items() if k != NEWER})
    after = assembly.parse_cluster("c", files)
    assert _typed(after.values) == _typed(before.values)
    assert dict(after.values_locations) == dict(before.values_locations)
    # Where credentials.yaml's references are written (issue 15) came after the old loader.
    newer = {k: v for k, v in after.locations.items() if not k.startswith("credentials.yaml:")}
    assert newer == before.locations
    assert (after.release, after.environment, after.rollout) == (
        before.release,
        before.environment,
        before.rollout,
    )
    after_files = tuple(f for f in after.files if f != f"clusters/c/{NEWER}")
    assert (after.credentials, after.smoke_test, after_files) == (
        before.credentials,
        before.smoke_test,
        before.files,
    )
