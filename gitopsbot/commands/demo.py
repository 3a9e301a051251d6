"""`gitopsbot demo`: the whole product in a few minutes, on loopback (docs/demo.md).

Starts the sandbox (Kubernetes API emulator, TensorFusion controller simulator, chart
repository, Git remote, local GitHub), then plays the story of ``gitopsbot.sandbox.story``:
a proposal pull request with its plan, the merge, the upgrade applied pool by pool (one pool
held by its maintenance window), verification, a ``git revert`` and the rollback. Everything
it starts is stopped before it exits, on success, error or Ctrl-C.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import threading
from pathlib import Path
from typing import Any

from gitopsbot import app, settings
from gitopsbot.commands import SUMMARIES
from gitopsbot.errors import GitOpsBotError
from gitopsbot.sandbox.story import (
    GIT_PASSWORD,
    GIT_USER,
    MARKER,
    STATE_BRANCH,
    StoryOptions,
    StoryWorld,
)
from gitopsbot.sandbox.story_demo import play

EPILOG = """\
examples:
  gitopsbot demo                         # about two minutes; leaves nothing running
  gitopsbot demo --keep                  # then keep the sandbox up until Ctrl-C
  gitopsbot demo --state-dir /tmp/demo   # where the sandbox, clones and logs go
  gitopsbot -v demo                      # with the bot's log on stderr

exit status: 0 the story ran to the end, 1 a step of it failed or the sandbox could not start,
2 bad options (--nodes below 1, a --state-dir it did not make and is not empty), 130
interrupted (Ctrl-C or SIGTERM: everything it started is stopped within seconds; a second
Ctrl-C exits at once). --keep: Ctrl-C after the story stops the sandbox, exit 0.
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "demo",
        help=SUMMARIES["demo"],
        description="Start a local sandbox (Kubernetes API emulator, TensorFusion controller "
        "simulator, chart repository, Git remote, local GitHub) and play a whole upgrade: a "
        "proposal pull request with its plan, the merge, the bot's backup, CRDs, helm upgrade, "
        "controller check and batched rollout of two pools (one held by its maintenance window "
        "until it opens), verification, then a git revert and the rollback. Prints where to "
        "look afterwards. See docs/demo.md.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="working directory; one an earlier demo made is emptied first, any other "
        f"non-empty one is refused (default {settings.cache_dir() / 'demo'})",
    )
    p.add_argument(
        "--keep",
        action="store_true",
        help="at the end, keep the sandbox, Git remote and forge up until Ctrl-C",
    )
    p.add_argument("--nodes", type=int, default=3, help="GPU nodes per pool (default 3)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.nodes < 1:
        sys.stderr.write("gitopsbot demo: --nodes must be at least 1\n")
        return 2
    state_dir = (args.state_dir or settings.cache_dir() / "demo").resolve()
    refused = _refuse_state_dir(state_dir)
    if refused:  # before anything starts or says it is starting
        sys.stderr.write(f"gitopsbot demo: --state-dir {state_dir}: {refused}\n")
        return 2
    options = StoryOptions(state_dir=state_dir, nodes=args.nodes)
    # Ctrl-C and SIGTERM (also where a parent shell ignored SIGINT): KeyboardInterrupt at a
    # safe point, Git transfers of the bot's threads stopped; the finally blocks stop the bot
    # and the sandbox. A second one exits at once: the sandbox's servers and helm die with it.
    app.interrupts.install(
        "demo",
        message="stopping everything it started (Ctrl-C again to force)",
        force_message="the sandbox's processes die with it",
    )
    try:
        return play(options, out=sys.stdout, keep=_hold if args.keep else None)
    except KeyboardInterrupt:
        sys.stderr.write("\ngitopsbot demo: interrupted; everything it started is stopped\n")
        return 130
    except GitOpsBotError as e:
        sys.stderr.write(f"gitopsbot demo: {e}\n")
        return 1
    finally:
        sys.stdout.flush()


def _refuse_state_dir(state_dir: Path) -> str:
    """Why the demo may not use ``state_dir`` ("" when it may): it empties only a directory
    an earlier demo made (its marker file), never anything else."""
    if state_dir.exists() and not state_dir.is_dir():
        return "not a directory"
    if state_dir.is_dir() and any(state_dir.iterdir()) and not (state_dir / MARKER).exists():
        return "not empty and not a story directory (give an empty or new one)"
    return ""


def _hold(world: StoryWorld) -> None:
    """--keep: print how to reach everything, then wait for Ctrl-C."""
    assert world.sandbox is not None and world.forge is not None
    authed = world.fleet_url.replace("http://", f"http://{GIT_USER}:{GIT_PASSWORD}@", 1)
    q = shlex.quote
    # Each command works as printed in another shell with gitopsbot on PATH: the first line
    # puts the pinned helm 4 and kubectl there (`gitopsbot tools`).
    print(
        "\nthe sandbox stays up until Ctrl-C (the bot is stopped); in another shell:\n"
        '  eval "$(gitopsbot tools --fetch --shell helm4 kubectl)"\n'
        f"  export KUBECONFIG={q(str(world.kubeconfig))}\n"
        "  kubectl get tensorfusionclusters,gpupools,gpunodes\n"
        "  helm -n tensor-fusion-sys history tensor-fusion-sys\n"
        f"  git clone {q(authed)}   # branches main and {STATE_BRANCH}\n"
        f"  curl -H 'Authorization: token sandbox-forge-token' "
        f"{q(world.forge.api_url + '/repos/acme/fleet/issues/1/comments')}\n",
        flush=True,
    )
    try:
        idle = threading.Event()
        while not idle.wait(0.5):  # short waits: the handler runs once the main thread is back
            pass
    except KeyboardInterrupt:
        app.interrupts.settle()  # the way --keep ends: exit 0
        print("\nstopping the sandbox")
