"""The real Gitea itself: it is the release pinned in tests/realgitea/go.mod, the bot's token
has only the scopes docs/forges.md lists, and the server ends when the process that started
it is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
from pathlib import Path

import pytest

from tests.forge.realgitea_harness import RealGiteaSite

pytestmark = [pytest.mark.realgitea, pytest.mark.slow]

GO_MOD = Path(__file__).resolve().parents[1] / "realgitea" / "go.mod"


def _pinned_version() -> str:
    for line in GO_MOD.read_text().splitlines():
        parts = line.split()
        if parts[:3] == ["replace", "gitea.dev", "=>"]:
            return parts[4].removeprefix("v")
    raise AssertionError("go.mod replaces no gitea.dev")


def test_it_is_the_pinned_release(real_gitea_site: RealGiteaSite) -> None:
    assert real_gitea_site.gitea.api("GET", "/version")["version"] == _pinned_version()


def test_the_bots_token_has_only_the_documented_scopes(real_gitea_site: RealGiteaSite) -> None:
    gitea = real_gitea_site.gitea
    with pytest.raises(urllib.error.HTTPError) as err:
        gitea.api("GET", "/user", token=real_gitea_site.tokens["gitopsbot"])
    assert err.value.code == 403  # read:user is not among them


CHILD = """
import sys, time
from pathlib import Path
from gitopsbot.sandbox.realgitea import RealGitea
gitea = RealGitea(Path(sys.argv[1]), Path(sys.argv[2])).start()
print(gitea.port, flush=True)
time.sleep(600)
"""


def test_it_ends_when_the_starter_is_killed(real_gitea_site: RealGiteaSite, tmp_path: Path) -> None:
    gitea_dir = real_gitea_site.gitea.gitea_dir
    work = tmp_path / "g"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(gitea_dir), str(work)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert int(child.stdout.readline())
        pids = _pids_under(work)
        assert len(pids) == 1, pids  # gitea web
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and _alive(pids):
        time.sleep(0.2)
    assert not _alive(pids), "gitea outlived the killed test process"


def _pids_under(work_dir: Path) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        # gitea itself: its binary first, our work dir among its arguments (not the shim).
        if argv and argv[0].endswith(b"/gitea") and str(work_dir).encode() in b" ".join(argv):
            found.append(int(proc.name))
    return found


def _alive(pids: list[int]) -> bool:
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        if Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z":
            return True
    return False
