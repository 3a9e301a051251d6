"""Benchmark (issue 5 part 8): what the bot adds to a pool rollout, and how fast it reacts to
a merge. Everything runs in this process, in the sandbox, on the real clock.

1. **Rollout overhead.** A 3-pool sandbox (``--nodes`` per pool; default 67, about 200 GPU
   nodes), batchPercentage 10, batchInterval ``--interval``. The bot applies the
   1.8.0 → 1.8.7 upgrade from a merged pull request and rolls the three pools one after the
   other (maxParallelPools 1); its pool time runs from the pass that opened the first pool's
   switch to the pass that recorded the last pool done. The baseline is the same rollout
   driven by an ideal operator in the same process: the hypervisor image changes with every
   switch closed, then each pool's switch is opened by a direct Store write, watched every
   10 ms until synced at 100 % (R14), and closed; the pools one after the other. Prints
   both, the ratio (target ≤ 1.05) and the arithmetic minimum
   ((ceil(100 / batch%) - 1) × interval per pool).
2. **Merge-to-first-action latency.** From the merge (the forge's "merged" webhook, or the
   ``git push`` alone when polling) of a change to an idle cluster, to the pass that took
   the merge in and recorded it on the state branch: with the webhook receiver (target
   < 1 s), and with polling only (bounded by ``pollInterval``; ``--poll``). A merge that
   lands while a pass runs waits for that pass (a step, e.g. a helm upgrade, is not
   interrupted).

    python benchmarks/rollout_bench.py [--nodes 67] [--interval 3] [--poll 1] [--samples 3]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gitopsbot.bot.reconciler import PassResult
from gitopsbot.core.records.journal import Journal, OperationKind, OperationStatus, PhaseState
from gitopsbot.sandbox.forges.base import LocalForge
from gitopsbot.sandbox.story import StoryOptions, StoryWorld, git
from gitopsbot.sandbox.story_bot import BotRunner
from gitopsbot.sandbox.story_fleet import CLUSTER
from gitopsbot.sandbox.story_waits import finished_op, state_reader, wait_for

TF = "tensor-fusion.ai/v1"
TFC = "tensor-fusion"
POLICY = "nodePoolRollingUpdatePolicy"


def _wait(cond: Callable[[], bool], timeout: float, what: str, step: float = 0.01) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(step)


# ----------------------------------------------------------------------- rollout overhead


class PoolTimes:
    """Monotonic times of the passes that opened each pool and saw it finished (the journal
    keeps whole seconds only)."""

    def __init__(self) -> None:
        self.opened: dict[str, float] = {}
        self.done: dict[str, float] = {}

    def __call__(self, result: PassResult, journal: Journal | None) -> None:
        if journal is None or journal.kind is not OperationKind.UPGRADE:
            return
        now = time.monotonic()
        for step in journal.steps:
            if not step.pool:
                continue
            if journal.phase(step.name).state is not PhaseState.PENDING:
                self.opened.setdefault(step.pool, now)
            if step.state.finished:
                self.done.setdefault(step.pool, now)


def bot_rollout(world: StoryWorld, pools: list[str]) -> tuple[float, list[float]]:
    """The bot applies the proposal; returns (pool time, per-pool times), measured from the
    pass that opened a pool's switch to the pass that recorded it done."""
    times = PoolTimes()
    bot = BotRunner(world, on_pass=times).start()
    try:
        proposal = world.propose()
        world.merge(proposal.number)
        done = wait_for(world, finished_op(OperationKind.UPGRADE), what="the upgrade", timeout=900)
    finally:
        bot.stop()
    if done.status is not OperationStatus.SUCCEEDED:
        raise SystemExit(f"the upgrade failed: {done.failure}")
    per_pool = [times.done[p] - times.opened[p] for p in pools]
    return times.done[pools[-1]] - times.opened[pools[0]], per_pool


def _set_pools(store: Any, change: Callable[[dict[str, Any]], None]) -> None:
    tfc = store.get(TF, "TensorFusionCluster", None, TFC)
    pools = tfc["spec"]["gpuPools"]
    for pool in pools:
        change(pool)
    store.patch_merge(
        TF, "TensorFusionCluster", None, TFC, {"spec": {"gpuPools": pools}}, manager="bench"
    )


def _switch(store: Any, name: str, on: bool) -> None:
    def change(pool: dict[str, Any]) -> None:
        if pool["name"] == name:
            pool["specTemplate"]["nodeManagerConfig"][POLICY]["autoUpdateHypervisor"] = on

    _set_pools(store, change)


def _synced(store: Any, pool: str) -> bool:
    gp = store.get(TF, "GPUPool", None, f"{TFC}-{pool}")
    status = (gp or {}).get("status", {}).get("componentStatus", {})
    return bool(status.get("hypervisorConfigSynced")) and (
        status.get("hypervisorUpdateProgress") == 100
    )


def _recorded(store: Any, pools: list[str], image: str) -> bool:
    """The controller saw the new template (GPUPool spec = template) and is not synced."""
    for pool in pools:
        gp = store.get(TF, "GPUPool", None, f"{TFC}-{pool}") or {}
        hv = gp.get("spec", {}).get("componentConfig", {}).get("hypervisor", {})
        if hv.get("image") != image or _synced(store, pool):
            return False
    return True


def baseline_rollout(world: StoryWorld, pools: list[str]) -> tuple[float, list[float]]:
    """An ideal operator: new image with switches closed, then each pool opened and watched."""
    store = world.store()
    image = "tensorfusion/tensor-fusion-hypervisor:2.16.0-bench"

    def new_image(pool: dict[str, Any]) -> None:
        pool["specTemplate"]["nodeManagerConfig"][POLICY]["autoUpdateHypervisor"] = False
        pool["specTemplate"]["componentConfig"]["hypervisor"]["image"] = image

    _set_pools(store, new_image)
    _wait(lambda: _recorded(store, pools, image), 120, "the controller to record the hashes")
    per_pool = []
    start = time.monotonic()
    for pool in pools:
        t0 = time.monotonic()
        _switch(store, pool, True)
        _wait(lambda p=pool: _synced(store, p), 900, f"pool {pool} to sync")  # type: ignore[misc]
        per_pool.append(time.monotonic() - t0)
        _switch(store, pool, False)
    total = time.monotonic() - start
    images = {i for imgs in world.hypervisor_images().values() for i in imgs}
    if images != {image}:
        raise SystemExit(f"baseline rollout incomplete: {sorted(images)}")
    return total, per_pool


def rollout_overhead(args: argparse.Namespace, work: Path) -> None:
    options = StoryOptions(
        state_dir=work / "rollout",
        pools=3,
        nodes=args.nodes,
        window_lead_seconds=None,
        batch_percentage=10,
        batch_interval=f"{args.interval}s",
        poll_interval=f"{args.poll}s",
        hypervisor_ready_delay=0.0,
        stall_timeout="10m",
    )
    world = StoryWorld(options)
    print(f"rollout: 3 pools x {args.nodes} GPU nodes, batch 10 %, interval {args.interval} s")
    try:
        world.start()
        assert world.fleet is not None
        pools = list(world.fleet.pools)
        bot_total, bot_pools = bot_rollout(world, pools)
        base_total, base_pools = baseline_rollout(world, pools)
    finally:
        world.stop()
    minimum = (math.ceil(100 / 10) - 1) * args.interval
    for pool, b, o in zip(pools, bot_pools, base_pools, strict=True):
        print(f"  pool {pool:7}: bot {b:6.2f} s   ideal operator {o:6.2f} s   minimum {minimum} s")
    print(
        f"  three pools: bot {bot_total:.2f} s, ideal operator {base_total:.2f} s, "
        f"arithmetic minimum {3 * minimum} s"
    )
    print(
        f"  ratio bot / ideal operator = {bot_total / base_total:.3f} (target <= 1.05); "
        f"added {(bot_total - base_total) / 3:.2f} s per pool"
    )


# ------------------------------------------------------------------------- merge latency


class FirstAction:
    """Notes when the bot's pass first records a given watched-branch commit as seen."""

    def __init__(self) -> None:
        self.target = ""
        self.at: float | None = None
        self.bot: BotRunner | None = None

    def expect(self, sha: str) -> None:
        self.target, self.at = sha, None

    def taken(self) -> float | None:
        return self.at

    def __call__(self, result: PassResult, journal: Journal | None) -> None:
        bot = self.bot
        if not self.target or self.at is not None or bot is None:
            return
        if bot.store.seen(CLUSTER) == self.target:
            self.at = time.monotonic()


def _change_branch(world: StoryWorld, n: int) -> tuple[int, str]:
    """A person's pull request changing the cluster's values (a rollout-only change)."""
    assert world.forge is not None
    h = world.human
    branch = f"tune-{n}"
    git("fetch", "--quiet", "origin", cwd=h)
    git("checkout", "--quiet", "-B", branch, "origin/main", cwd=h)
    values = h / "clusters" / CLUSTER / "values.yaml"
    values.write_text(values.read_text() + f"# tuning {n}\n")
    git("commit", "--quiet", "-am", f"tune {n}", cwd=h)
    git("push", "--quiet", "origin", branch, cwd=h)
    git("checkout", "--quiet", "main", cwd=h)
    pr = world.forge.new_pull(head=branch, base="main", title=f"tune {n}", body="")
    return pr.number, branch


def _wait_idle(world: StoryWorld, timeout: float = 180.0) -> None:
    """Until the cluster's operation (if any) has finished and nothing is queued."""
    reader = state_reader(world)
    deadline = time.monotonic() + timeout
    while True:
        reader.refresh()
        current = reader.current(CLUSTER)
        if (current is None or not current.active) and reader.queued(CLUSTER) is None:
            return
        if time.monotonic() > deadline:
            raise SystemExit("the cluster did not become idle")
        time.sleep(0.2)


def time_merged_webhook(forge: LocalForge) -> list[float]:
    """The moments the forge delivers a webhook from now on (the merged event of a pull
    request merged by push), filled as they happen."""
    moments: list[float] = []
    deliver = forge._deliver

    def timed(url: str, headers: dict[str, str], body: bytes) -> None:
        moments.append(time.monotonic())
        forge._deliver = deliver  # type: ignore[method-assign]
        deliver(url, headers, body)

    forge._deliver = timed  # type: ignore[method-assign]
    return moments


def _merge_latency(world: StoryWorld, bot: BotRunner, probe: FirstAction, n: int) -> float:
    _wait_idle(world)  # a merge to an idle cluster: no pass in the way
    number, _ = _change_branch(world, n)
    assert world.forge is not None
    forge = world.forge
    h = world.human
    git("fetch", "--quiet", "origin", cwd=h)
    git("merge", "--quiet", "--ff-only", "origin/main", cwd=h)
    git("merge", "--quiet", "--no-ff", "-m", f"Merge pull request #{number}", f"tune-{n}", cwd=h)
    probe.expect(git("rev-parse", "HEAD", cwd=h).strip())
    # The forge sees the merge in the push and sends its "merged" webhook, once the push's
    # answer is sent: with a webhook the time runs from that delivery, without from the push.
    hooked = time_merged_webhook(forge) if bot.receiver is not None else None
    git("push", "--quiet", "origin", "main", cwd=h)
    t0 = time.monotonic()
    if hooked is not None:
        _wait(lambda: bool(hooked), 30, f"the merged webhook of #{number}", step=0.001)
        t0 = hooked[0]
    _wait(lambda: probe.taken() is not None, 120, "the bot to take the merge in", step=0.005)
    return (probe.taken() or t0) - t0


def merge_latency(args: argparse.Namespace, work: Path) -> None:
    options = StoryOptions(
        state_dir=work / "latency",
        pools=1,
        nodes=2,
        window_lead_seconds=None,
        poll_interval=f"{args.poll}s",
    )
    world = StoryWorld(options)
    try:
        world.start()
        for webhook in (True, False):
            probe = FirstAction()
            bot = BotRunner(world, webhook=webhook, on_pass=probe, name=f"bot-{webhook}")
            probe.bot = bot
            bot.start()
            try:
                _wait(lambda b=bot: b.store.seen(CLUSTER) is not None, 60, "the baseline")  # type: ignore[misc]
                times = [
                    _merge_latency(world, bot, probe, i + (0 if webhook else 100))
                    for i in range(args.samples)
                ]
            finally:
                bot.stop()
            how = "webhook" if webhook else f"polling every {args.poll} s"
            target = "target < 1 s" if webhook else f"bounded by {args.poll} s + one pass"
            print(
                f"merge -> first action, {how}: mean {statistics.mean(times):.3f} s, "
                f"max {max(times):.3f} s over {len(times)} merges ({target})"
            )
    finally:
        world.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--nodes", type=int, default=67, help="GPU nodes per pool (3 pools)")
    p.add_argument("--interval", type=int, default=3, help="batchInterval in seconds")
    p.add_argument("--poll", type=int, default=1, help="pollInterval in seconds (default 1)")
    p.add_argument("--samples", type=int, default=3, help="merges per latency mode")
    p.add_argument("--skip-rollout", action="store_true")
    p.add_argument("--skip-latency", action="store_true")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="rollout-bench-") as tmp:
        if not args.skip_latency:
            merge_latency(args, Path(tmp))
        if not args.skip_rollout:
            rollout_overhead(args, Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
