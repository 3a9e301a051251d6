"""Benchmark (issue 13 item 6): how long the bot takes from a merge to "controller ready",
against the same steps typed by hand, and how fast it reacts to a merge. Everything runs in
this process, in the sandbox (rollout_bench's StoryWorld and BotRunner), on the real clock,
with the helm 4 and kubectl binaries the bot uses and the sandbox's kubeconfig.

1. **Merge → controller ready.** Each round changes the controller's CPU request in the
   cluster's values (the controller Deployment's pod template changes, so helm makes a new
   revision and the Deployment rolls). A bot round merges that change as a pull request and
   times from the merge (the forge's "merged" webhook) to the moment the bot's journal records
   the controller-ready step SUCCEEDED (the state branch push returned; the journal keeps
   whole seconds only, so the time is taken in the process). A by-hand round times the page's
   steps as subprocesses, from the first one's start to ``kubectl rollout status`` returning:
   ``helm get values``, ``kubectl apply --server-side --force-conflicts -f crds/``,
   ``helm upgrade -f values.yaml``, ``kubectl rollout status``; then it puts the release
   back to the fleet's values (not timed) so the bot's next round starts from Git. Bot and
   by-hand rounds alternate (``--rounds`` of each), so load on the machine falls on both.
   Every round is checked: the helm revision went up and the Deployment's generation was
   observed. Prints p50/p95 of each, their ratios (target <= 1.3), and where the bot's
   time goes (merge → first record → each step's record).
2. **Merge → first action with a webhook**, p50/p95 over ``--samples`` merges: quiet, then
   with a second process spinning on one core (``--skip-load`` leaves that out). Target: p95
   < 1 s under load. rollout_bench's merge latency code.
3. ``--rollout``: rollout_bench's rollout overhead at ``--poll 5`` (target <= 1.03).

    python benchmarks/apply_bench.py [--rounds 5] [--samples 20] [--skip-load] [--rollout]
    python benchmarks/apply_bench.py --quick   # 1 round, 3 samples
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import rollout_bench as rb  # the sibling script: its waits and merge latency code

from gitopsbot.bot.reconciler import PassResult
from gitopsbot.core.operations.operation import operation_id
from gitopsbot.core.records.journal import Journal, OperationStatus, StepState
from gitopsbot.sandbox.environment import DEFAULT_CHARTS
from gitopsbot.sandbox.story import StoryOptions, StoryWorld, git
from gitopsbot.sandbox.story_bot import BotRunner
from gitopsbot.sandbox.story_fleet import CLUSTER
from gitopsbot.sandbox.story_waits import state_reader

READY = "controller-ready"


def pct(values: Sequence[float], q: float) -> float:
    """The q-th percentile (inclusive method; a single value is every percentile)."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def p50_p95(values: Sequence[float]) -> str:
    return f"p50 {pct(values, 50):6.2f} s  p95 {pct(values, 95):6.2f} s"


# ------------------------------------------------------------------ the bot's step clock


class StepClock:
    """Monotonic times at which the journal of one operation recorded each step finished,
    and when the merge was first recorded as seen. Fed by every journal save (wrapped) and
    every pass's end, whichever sees it first."""

    def __init__(self) -> None:
        self.op_id = ""
        self.sha = ""
        self.seen_at: float | None = None
        self.done: dict[str, float] = {}
        self.states: dict[str, StepState] = {}
        # When the record of controller-ready reached the remote: with the next transition's
        # push (the first pool's opening), since only pool changes follow it (#13).
        self.pushed_ready: float | None = None
        self.bot: BotRunner | None = None

    def expect(self, sha: str) -> None:
        self.sha, self.op_id = sha, operation_id(CLUSTER, sha)
        self.seen_at, self.done, self.states = None, {}, {}
        self.pushed_ready = None

    def note(self, journal: Journal | None) -> None:
        now = time.monotonic()
        if journal is None or not self.op_id or journal.op_id != self.op_id:
            return
        if self.seen_at is None:
            self.seen_at = now
        for step in journal.steps:
            if step.state.finished and step.name not in self.done:
                self.done[step.name] = now
                self.states[step.name] = step.state

    def watch(self, bot: BotRunner) -> None:
        """Wrap the bot's journal store's ``save``: a step's record is timed when pushed."""
        self.bot = bot
        store = bot.store
        save = store.save

        def timed_save(journal: Journal, *args: Any, **kwargs: Any) -> str:
            sha = save(journal, *args, **kwargs)
            self.note(journal)
            return sha

        setattr(store, "save", timed_save)  # noqa: B010  (an instance attribute on purpose)
        flush = store.flush

        def timed_flush() -> None:
            flush()
            if READY in self.done and self.pushed_ready is None and not store.unpushed:
                self.pushed_ready = time.monotonic()

        setattr(store, "flush", timed_flush)  # noqa: B010  (every push goes through it)

    def __call__(self, result: PassResult, journal: Journal | None) -> None:
        bot = self.bot
        due = bot is not None and self.seen_at is None and bool(self.sha)
        if due and bot is not None and bot.store.seen(CLUSTER) == self.sha:
            self.seen_at = time.monotonic()
        self.note(journal)

    def ready(self) -> float | None:
        return self.done.get(READY)


# ------------------------------------------------------------------------- the sandbox


class Sandbox:
    """What the by-hand rounds and the checks need from the story's world."""

    def __init__(self, world: StoryWorld, work: Path) -> None:
        assert world.sandbox is not None and world.fleet is not None
        self.world = world
        self.env = world.sandbox.helm_env()
        self.kubeconfig = str(world.kubeconfig)
        self.namespace = world.fleet.namespace
        self.release = world.fleet.release
        self.version = world.fleet.chart_version
        self.deployment = f"{self.release}-controller"
        tools = world.tools()
        self.helm, self.kubectl = str(tools.helm), str(tools.kubectl)
        self.versions = f"{tools.helm_version} / kubectl {tools.kubectl_version}"
        chart = work / "chart"  # the chart's crds/ directory, as a person has it
        with tarfile.open(DEFAULT_CHARTS / f"tensor-fusion-{self.version}.tgz") as tgz:
            tgz.extractall(chart, filter="data")
        self.crds = chart / "tensor-fusion" / "crds"
        self.values = work / "values.yaml"
        self.run("helm", "repo", "add", "sandbox", world.chart_repo_url)

    def run(self, tool: str, *args: str) -> str:
        binary = self.helm if tool == "helm" else self.kubectl
        done = subprocess.run(
            [binary, *args, "--kubeconfig", self.kubeconfig],
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        if done.returncode != 0:
            raise SystemExit(f"{tool} {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def revision(self) -> int:
        out = self.run("helm", "status", self.release, "-n", self.namespace, "-o", "yaml")
        return int(yaml.safe_load(out)["version"])

    def generation(self) -> tuple[int, int]:
        d = self.world.store().get("apps/v1", "Deployment", self.namespace, self.deployment)
        assert d is not None, "no controller Deployment"
        return int(d["metadata"].get("generation", 0)), int(
            d.get("status", {}).get("observedGeneration", 0)
        )

    def check_rolled(self, before: tuple[int, tuple[int, int]], what: str) -> None:
        """The helm revision went up, and the Deployment's new generation was observed."""
        revision, (generation, _) = before
        now, (gen, observed) = self.revision(), self.generation()
        if now <= revision or gen <= generation or observed < gen:
            raise SystemExit(
                f"{what}: nothing rolled (revision {revision} -> {now}, "
                f"generation {generation} -> {gen}, observed {observed})"
            )

    def state(self) -> tuple[int, tuple[int, int]]:
        return self.revision(), self.generation()

    def by_hand(self, cpu: str) -> tuple[float, list[tuple[str, float]]]:
        """The page's steps; returns the total and each command's time."""
        ns = ["-n", self.namespace]
        steps: list[tuple[str, float]] = []

        def step(name: str, tool: str, *args: str) -> str:
            t = time.monotonic()
            out = self.run(tool, *args)
            steps.append((name, time.monotonic() - t))
            return out

        t0 = time.monotonic()
        current = step("helm get values", "helm", "get", "values", self.release, *ns, "-o", "yaml")
        values = yaml.safe_load(current) or {}
        values.setdefault("controller", {})["resources"] = {
            "requests": {"cpu": cpu, "memory": "128Mi"}
        }
        self.values.write_text(yaml.safe_dump(values))
        step(
            "kubectl apply crds",
            "kubectl",
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            str(self.crds),
        )
        step(
            "helm upgrade",
            "helm",
            "upgrade",
            self.release,
            "sandbox/tensor-fusion",
            "--version",
            self.version,
            "-f",
            str(self.values),
            *ns,
        )
        step(
            "kubectl rollout status",
            "kubectl",
            "rollout",
            "status",
            f"deploy/{self.deployment}",
            *ns,
            "--timeout=180s",
        )
        total = time.monotonic() - t0
        # Back to the fleet's values (not timed): the bot's next round starts from Git.
        self.values.write_text(current)
        self.run("helm", "upgrade", self.release, "sandbox/tensor-fusion", "--version",
                 self.version, "-f", str(self.values), *ns)  # fmt: skip
        self.run("kubectl", "rollout", "status", f"deploy/{self.deployment}", *ns)
        return total, steps


# ------------------------------------------------------------------- a bot round


def _cpu_branch(world: StoryWorld, n: int, cpu: str) -> int:
    """A person's pull request setting the controller's CPU request."""
    assert world.forge is not None
    h = world.human
    branch = f"cpu-{n}"
    git("fetch", "--quiet", "origin", cwd=h)
    git("checkout", "--quiet", "-B", branch, "origin/main", cwd=h)
    path = h / "clusters" / CLUSTER / "values.yaml"
    values = yaml.safe_load(path.read_text())
    values.setdefault("controller", {})["resources"] = {"requests": {"cpu": cpu, "memory": "128Mi"}}
    path.write_text(yaml.safe_dump(values, sort_keys=False))
    git("commit", "--quiet", "-am", f"controller cpu {cpu}", cwd=h)
    git("push", "--quiet", "origin", branch, cwd=h)
    git("checkout", "--quiet", "main", cwd=h)
    return world.forge.new_pull(head=branch, base="main", title=f"cpu {cpu}", body="").number


def bot_round(world: StoryWorld, sb: Sandbox, n: int, cpu: str) -> tuple[float, list[float], float]:
    """Merge → controller-ready recorded (committed in the bot's mirror); returns it, the
    segments merge → first record → each step finished (backup, crds if any, helm-upgrade,
    controller-ready), and merge → that record on the remote (pushed with the first pool's
    opening)."""
    clock = StepClock()
    bot = BotRunner(world, on_pass=clock, name=f"bot-{n}")
    clock.watch(bot)
    bot.start()
    try:
        rb._wait(lambda: bot.store.seen(CLUSTER) is not None, 60, "the bot's baseline")
        rb._wait_idle(world)
        number = _cpu_branch(world, n, cpu)
        before = sb.state()
        h = world.human
        assert world.forge is not None
        git("fetch", "--quiet", "origin", cwd=h)
        git("merge", "--quiet", "--ff-only", "origin/main", cwd=h)
        git("merge", "--quiet", "--no-ff", "-m", f"Merge pull request #{number}", f"cpu-{n}", cwd=h)
        clock.expect(git("rev-parse", "HEAD", cwd=h).strip())
        # The forge sees the merge in the push and sends its "merged" webhook from there (as
        # GitHub does for a merge pushed by hand): the round is timed from that delivery.
        hooked = rb.time_merged_webhook(world.forge)
        git("push", "--quiet", "origin", "main", cwd=h)
        # The remote runs its push callbacks once the push's answer is sent: wait for them.
        rb._wait(lambda: bool(hooked), 30, f"the merged webhook of #{number}", step=0.001)
        t0 = hooked[0]
        rb._wait(lambda: clock.ready() is not None, 240, "controller-ready", step=0.005)
        if clock.states[READY] is not StepState.SUCCEEDED:
            raise SystemExit(f"round {n}: controller-ready {clock.states[READY]}")
        ready = (clock.ready() or t0) - t0
        sb.check_rolled(before, f"bot round {n}")
        _wait_finished(world, clock.op_id)
    finally:
        bot.stop()
    marks = [clock.seen_at or t0, *sorted(clock.done[s] for s in _up_to_ready(clock))]
    segments = [marks[0] - t0] + [b - a for a, b in itertools.pairwise(marks)]
    return ready, segments, (clock.pushed_ready or t0) - t0


def _up_to_ready(clock: StepClock) -> list[str]:
    upto = clock.done[READY]
    return [s for s, t in clock.done.items() if t <= upto]


def _wait_finished(world: StoryWorld, op_id: str, timeout: float = 240) -> None:
    reader = state_reader(world)
    deadline = time.monotonic() + timeout
    while True:
        reader.refresh()
        j = reader.current(CLUSTER)
        if j is not None and j.op_id == op_id and not j.active:
            if j.status is not OperationStatus.SUCCEEDED:
                raise SystemExit(f"operation {op_id}: {j.status} {j.failure}")
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"operation {op_id} did not finish")
        time.sleep(0.2)


# ------------------------------------------------------------------------- the parts


def controller_ready(args: argparse.Namespace, world: StoryWorld, work: Path) -> None:
    sb = Sandbox(world, work)
    print(f"merge -> controller ready: {args.rounds} bot and {args.rounds} by-hand rounds")
    print(f"  helm {sb.versions}; release {sb.release} in {sb.namespace}")
    bot_times: list[float] = []
    pushed_times: list[float] = []
    hand_times: list[float] = []
    bot_parts: list[list[float]] = []
    hand_parts: dict[str, list[float]] = {}
    for i in range(args.rounds):
        cpu = f"{110 + 2 * i}m"
        ready, segments, pushed = bot_round(world, sb, i, cpu)
        bot_times.append(ready)
        pushed_times.append(pushed)
        bot_parts.append(segments)
        before = sb.state()
        total, steps = sb.by_hand(f"{111 + 2 * i}m")
        sb.check_rolled(before, f"by-hand round {i}")
        hand_times.append(total)
        for name, t in steps:
            hand_parts.setdefault(name, []).append(t)
        print(f"  round {i + 1}: bot {ready:6.2f} s   by hand {total:6.2f} s")
    names = ["merge -> first record", *_segment_names(world)]
    print(f"  bot     : {p50_p95(bot_times)}")
    print(f"  by hand : {p50_p95(hand_times)}")
    r50 = pct(bot_times, 50) / pct(hand_times, 50)
    r95 = pct(bot_times, 95) / pct(hand_times, 95)
    print(f"  ratio bot / by hand: p50 {r50:.2f}, p95 {r95:.2f} (target <= 1.3)")
    print(f"  bot, controller-ready on the remote: {p50_p95(pushed_times)}")
    q50 = pct(pushed_times, 50) / pct(hand_times, 50)
    q95 = pct(pushed_times, 95) / pct(hand_times, 95)
    print(f"    (pushed with the first pool's opening) ratio p50 {q50:.2f}, p95 {q95:.2f}")
    print("  where the bot's time goes (p50 per segment, recorded on the state branch):")
    if all(len(p) == len(bot_parts[0]) for p in bot_parts):
        for k, label in enumerate(names[: len(bot_parts[0])]):
            print(f"    {label:32} {statistics.median(p[k] for p in bot_parts):6.2f} s")
    else:
        print(f"    (rounds differ in steps) {bot_parts}")
    print("  by hand (p50 per command):")
    for name, ts in hand_parts.items():
        print(f"    {name:32} {statistics.median(ts):6.2f} s")


def _segment_names(world: StoryWorld) -> list[str]:
    """The steps of the last operation up to controller-ready, in order, as segments."""
    reader = state_reader(world)
    reader.refresh()
    j = reader.current(CLUSTER)
    steps = [] if j is None else [s.name for s in j.steps]
    upto = steps[: steps.index(READY) + 1] if READY in steps else steps
    return [f"-> {s} recorded" for s in upto]


def _spin() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def first_action(args: argparse.Namespace, world: StoryWorld) -> None:
    modes: list[tuple[str, Callable[[], subprocess.Popen[bytes] | None]]] = [
        ("quiet", lambda: None)
    ]
    if not args.skip_load:
        modes.append(("one core loaded", _spin))
    for label, load in modes:
        probe = rb.FirstAction()
        bot = BotRunner(world, webhook=True, on_pass=probe, name=f"latency-{label[:3]}")
        probe.bot = bot
        spinner = load()
        bot.start()
        try:
            rb._wait(lambda b=bot: b.store.seen(CLUSTER) is not None, 60, "the baseline")  # type: ignore[misc]
            base = 1000 if spinner is None else 2000
            times = [rb._merge_latency(world, bot, probe, base + i) for i in range(args.samples)]
        finally:
            bot.stop()
            if spinner is not None:
                spinner.kill()
                spinner.wait()
        print(
            f"merge -> first action, webhook, {label}: {p50_p95(times)}, max {max(times):.2f} s "
            f"over {len(times)} merges (target p95 < 1 s)"
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--rounds", type=int, default=5, help="bot and by-hand rounds (each)")
    p.add_argument("--samples", type=int, default=20, help="merges per latency mode")
    p.add_argument("--poll", type=int, default=5, help="the bot's pollInterval in seconds")
    p.add_argument("--quick", action="store_true", help="1 round, 3 samples")
    p.add_argument("--skip-load", action="store_true", help="no run with one core loaded")
    p.add_argument("--skip-ready", action="store_true", help="no merge -> controller ready")
    p.add_argument("--skip-latency", action="store_true", help="no merge -> first action")
    p.add_argument("--rollout", action="store_true", help="rollout_bench's overhead at --poll")
    p.add_argument("--nodes", type=int, default=67, help="--rollout: GPU nodes per pool")
    p.add_argument("--interval", type=int, default=3, help="--rollout: batchInterval (s)")
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.samples = 1, 3
    with tempfile.TemporaryDirectory(prefix="apply-bench-") as tmp:
        work = Path(tmp)
        options = StoryOptions(
            state_dir=work / "world",
            pools=1,
            nodes=2,
            window_lead_seconds=None,
            poll_interval=f"{args.poll}s",
        )
        world = StoryWorld(options)
        try:
            world.start()
            if not args.skip_ready:
                controller_ready(args, world, work)
            if not args.skip_latency:
                first_action(args, world)
        finally:
            world.stop()
        if args.rollout:
            rb.rollout_overhead(args, work)
            print(f"  (issue 13's target for the ratio at a {args.poll} s poll: <= 1.03)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
