"""The Go-built tiers (the real control plane, the real Gitea, the real OCI registry): built
the first time a test of the tier needs one, never at collection (``pytest --collect-only``
starts nothing).

``.ci/run`` builds both before pytest, so in CI the fixtures only find the cached binaries. A
developer's first real-tier test builds them (minutes, cold): outside that test's timeout, and
under the build scripts' own lock, so pytest-xdist workers that ask at once build once.
Where the build cannot happen (no Go, a failed build) the tier's tests are skipped with the
reason, or fail when ``GITOPSBOT_<TIER>=require`` (CI).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


class GoTier:
    """One tier: its build script, the env variable that makes it required, and what the
    build left (or why it could not), asked for once per process."""

    def __init__(self, name: str, script: Path, check: Callable[[Path], Any]) -> None:
        self.name = name
        self.script = script
        self.check = check  # the build's directory -> what the fixture needs, or a str reason
        self.result: Any = None

    @property
    def required(self) -> bool:
        return os.environ.get(f"GITOPSBOT_{self.name.upper()}", "") == "require"

    def built(self, request: pytest.FixtureRequest) -> Any:
        """What the build left; or skips (fails when required) with the reason."""
        if self.result is None:
            self.result = _outside_timeout(request, self._build)
        if isinstance(self.result, str):
            if self.required:
                pytest.fail(f"{self.name} required but unavailable: {self.result}")
            pytest.skip(f"{self.name}: {self.result}")
        return self.result

    def _build(self) -> Any:
        sys.stderr.write(f"\n{self.name}: building or reusing ({self.script.parent.name})\n")
        done = subprocess.run(["bash", str(self.script)], capture_output=True, text=True)
        if done.returncode != 0:
            return f"{self.script.relative_to(ROOT)} failed: {done.stderr.strip()[-800:]}"
        return self.check(Path(done.stdout.strip().splitlines()[-1]))

    def summary(self) -> str | None:
        """The terminal summary's line: whether the tier ran (a skip is never silent)."""
        if self.result is None:
            return None
        if isinstance(self.result, str):
            return f"{self.name} tier NOT run: {self.result} (see docs/testing.md)"
        return f"{self.name} tier available: {self.result_dir}"

    @property
    def result_dir(self) -> str:
        apiserver = getattr(self.result, "apiserver", None)  # ControlPlaneBinaries
        return str(apiserver.parent if apiserver is not None else self.result)


def _outside_timeout(request: pytest.FixtureRequest, build: Callable[[], Any]) -> Any:
    """``build()`` with the asking test's pytest-timeout timer stopped: a cold Go build takes
    longer than any test may, and is not the test's time."""
    item = request.node
    hooks = item.config.pluginmanager.hook
    timing = hasattr(hooks, "pytest_timeout_cancel_timer")
    if timing:
        hooks.pytest_timeout_cancel_timer(item=item)
    try:
        return build()
    finally:
        if timing:
            import pytest_timeout  # type: ignore[import-untyped]

            settings = pytest_timeout._get_item_settings(item)
            if settings.timeout:
                hooks.pytest_timeout_set_timer(item=item, settings=settings)


def _control_plane_binaries(built: Path) -> Any:
    from gitopsbot.sandbox.controlplane import ControlPlaneBinaries, ControlPlaneError

    try:
        return ControlPlaneBinaries.in_dir(built)
    except ControlPlaneError as e:
        return str(e)


def _gitea_dir(built: Path) -> Path | str:
    if not os.access(built / "gitea", os.X_OK):
        return f"{built}/gitea: missing after tests/realgitea/build.sh"
    return built


def _registry_dir(built: Path) -> Path | str:
    if not os.access(built / "registry", os.X_OK):
        return f"{built}/registry: missing after tests/realregistry/build.sh"
    return built


REALKUBE = GoTier("realkube", ROOT / "tests" / "realkube" / "build.sh", _control_plane_binaries)
REALGITEA = GoTier("realgitea", ROOT / "tests" / "realgitea" / "build.sh", _gitea_dir)
REALREGISTRY = GoTier("realregistry", ROOT / "tests" / "realregistry" / "build.sh", _registry_dir)
TIERS = (REALKUBE, REALGITEA, REALREGISTRY)


def summaries() -> dict[str, str]:
    """This process's line per tier it asked for (a pytest-xdist worker sends them on)."""
    return {t.name: line for t in TIERS if (line := t.summary()) is not None}
