"""`gitopsbot demo`: the story plays to the end, prints where to look, and leaves nothing
running (no thread, no listening port) — and refuses to empty a directory it did not make.

The test plays the story without the maintenance window wait (``window_lead_seconds=None``);
the window hold itself is asserted in test_story.py.
"""

from __future__ import annotations

import io
import socket
import threading
import time
from pathlib import Path

import pytest

from gitopsbot.cli import main as cli_main
from gitopsbot.sandbox.story import StoryError, StoryOptions, StoryWorld
from gitopsbot.sandbox.story_demo import plan_summary, play


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.slow
def test_demo_story_runs_to_the_end_and_leaves_nothing_running(tmp_path: Path) -> None:
    before = set(threading.enumerate())
    out = io.StringIO()
    ports: set[int] = set()
    bodies: list[str] = []

    def remember(world: StoryWorld) -> None:  # called with everything still up
        assert world.sandbox is not None and world.sandbox.state is not None
        assert world.forge is not None
        bodies.append(world.forge.pull(1).body)
        ports.update(world.sandbox.state.ports)
        for service in world.sandbox.services.values():
            ports.add(int(service.url.rsplit(":", 1)[1].split("/")[0]))
        assert all(_listening(p) for p in ports)

    code = play(
        StoryOptions(state_dir=tmp_path / "demo", window_lead_seconds=None), out=out, keep=remember
    )
    text = out.getvalue()
    assert code == 0, text
    for expected in (
        "pull request #1 opened",
        "helm-upgrade: succeeded",
        "pool/shared/hypervisor: succeeded",
        "pool/pool-2/hypervisor: succeeded",
        # batches and progress, one line per batch (docs/progress.md)
        "pool/shared/hypervisor: rolling 0% · batch 1/2 of 2 nodes · 0/3 nodes done · progress 0%",
        "batch 2/2 of 2 nodes · 3/3 nodes done · progress 100%",
        "verify: succeeded",
        "rollback: succeeded — revision 1 was not rendered by the bot",
        # The chart of the upgrade that replaces helm rollback: revision 1 was installed by
        # hand, so no archive was recorded to compare it with, and the record says so (#30).
        "no chart archive was recorded when revision 1 was applied",
        "rollback succeeded; hypervisors now: 6 on 2.13.0",
        "where to look:",
        "log origin/gitopsbot/state",
        "status gitopsbot/apply",
    ):
        assert expected in text, f"{expected!r} missing from:\n{text}"
    # The plan's whole summary is shown, its deployed/target table to its last row (it was
    # cut after the table's header).
    summary = plan_summary(bodies[0])
    rows = [line for line in summary if line.startswith("| ")]
    assert any(r.startswith("| chart | 1.8.0 | 1.8.7 |") for r in rows), summary
    assert any(r.startswith("| app |") for r in rows), summary
    for line in summary:
        assert f"    | {line}"[:150] in text, f"{line!r} missing from:\n{text}"
    assert len(ports) == 4  # API server, chart repository, Git remote, local GitHub
    assert not [p for p in ports if _listening(p)]
    deadline = time.monotonic() + 10
    while True:
        left = [t for t in threading.enumerate() if t not in before and t.is_alive()]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert not left, f"threads still running: {[t.name for t in left]}"


def test_demo_refuses_a_directory_it_did_not_make(tmp_path: Path) -> None:
    (tmp_path / "precious.txt").write_text("keep me\n")
    with pytest.raises(StoryError, match="not empty and not a story directory"):
        StoryWorld(StoryOptions(state_dir=tmp_path)).start()
    assert (tmp_path / "precious.txt").read_text() == "keep me\n"


def test_demo_command_reports_the_refusal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "precious.txt").write_text("keep me\n")
    assert cli_main(["demo", "--state-dir", str(tmp_path)]) == 2  # bad options
    out = capsys.readouterr()
    assert "not empty and not a story directory" in out.err
    assert out.out == ""  # refused before anything starts, or says it is starting
    assert (tmp_path / "precious.txt").exists()
