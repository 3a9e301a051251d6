"""Ctrl-C (docs/commands.md, "Interrupts"), with real signals sent to real subprocesses
(``python -m gitopsbot ...`` in a session of its own, SIGINT at its default handler whatever
pytest's parent did with it) and, in this process, to pygit2's callbacks.

- one SIGINT stops the demo promptly wherever it is (the main thread inside a Git transfer,
  the bot's threads inside a rollout): exit 130, no "Exception ignored", no traceback, and
  every process it started gone;
- a second SIGINT forces when the first's stop is slow (a pass blocked on a silent forge);
- ``run`` stops at a step boundary, says so, exits 0 as docs/commands.md's table says, and
  the next ``run --once`` carries on without repeating a step that took effect;
- ``status --watch`` exits 0; ``plan`` and ``sandbox up --foreground`` exit 130 with one line;
- a pygit2 callback stops its transfer once the interrupt is asked for, and the handler never
  raises inside a callback (where pygit2 would drop the KeyboardInterrupt).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pygit2
import pytest

from gitopsbot.adapters import interrupts
from gitopsbot.adapters.git import GitRepo, GitSettings
from gitopsbot.errors import GitInterrupted
from tests.sandbox.test_sandbox_run_bot import _env, cli, git, journal, port_open
from tests.test_exit_codes import CHARTS, TOKEN, Ctx, set_repository, set_version

ROOT = Path(__file__).resolve().parents[1]
PROMPT = 20.0  # seconds from SIGINT to exit that count as prompt (the demo stops a sandbox)

# slow: each test runs the command line, a Git remote or real helm in subprocesses (seconds)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc for processes"),
]


# -- a subprocess to interrupt --------------------------------------------------------------


def _default_sigint() -> None:
    # A child inherits SIG_IGN from a parent that ignores SIGINT (a background job): the
    # command must see the signal as a terminal's Ctrl-C delivers it.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@dataclass
class Child:
    """``gitopsbot ARGS`` with its stdout and stderr collected line by line."""

    proc: subprocess.Popen[str]
    out: list[str] = field(default_factory=list)
    err: list[str] = field(default_factory=list)
    changed: threading.Condition = field(default_factory=threading.Condition)
    readers: list[threading.Thread] = field(default_factory=list)

    @classmethod
    def start(cls, *args: str, env: dict[str, str], cwd: Path = ROOT) -> Child:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gitopsbot", *args],
            cwd=cwd,
            env={**env, "PYTHONUNBUFFERED": "1"},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            preexec_fn=_default_sigint,
        )
        child = cls(proc)
        assert proc.stdout is not None and proc.stderr is not None
        for stream, lines in ((proc.stdout, child.out), (proc.stderr, child.err)):
            reader = threading.Thread(target=child._read, args=(stream, lines), daemon=True)
            reader.start()
            child.readers.append(reader)
        return child

    def _read(self, stream: object, lines: list[str]) -> None:
        for line in stream:  # type: ignore[attr-defined]
            with self.changed:
                lines.append(line)
                self.changed.notify_all()

    @property
    def stdout(self) -> str:
        return "".join(self.out)

    @property
    def stderr(self) -> str:
        return "".join(self.err)

    def wait_for(self, pattern: str, *, stream: str = "out", timeout: float = 180.0) -> None:
        """Until a line of ``stream`` matches ``pattern`` (a regex)."""
        lines = self.out if stream == "out" else self.err
        deadline = time.monotonic() + timeout
        with self.changed:
            while not any(re.search(pattern, line) for line in lines):
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    pytest.fail(
                        f"{pattern!r} not seen on std{stream} (exit {self.proc.poll()})\n"
                        f"stdout: {self.stdout[-3000:]}\nstderr: {self.stderr[-3000:]}"
                    )
                self.changed.wait(min(left, 0.5))

    def interrupt(self) -> None:
        os.kill(self.proc.pid, signal.SIGINT)

    def exit_within(self, seconds: float) -> int:
        """The exit status, once the process ended and its output was read to the end (the
        readers may still hold its last lines when ``wait`` returns)."""
        try:
            status = self.proc.wait(timeout=seconds)
            for reader in self.readers:
                reader.join(10)
            return status
        except subprocess.TimeoutExpired:
            pytest.fail(
                f"still running {seconds:.0f}s after SIGINT\n"
                f"stdout: {self.stdout[-3000:]}\nstderr: {self.stderr[-3000:]}"
            )

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        time.sleep(0.1)  # the readers take the last lines


@pytest.fixture
def children() -> Iterator[list[Child]]:
    started: list[Child] = []
    yield started
    for child in started:
        child.kill()


# -- processes ------------------------------------------------------------------------------


def _stat(pid: int) -> tuple[int, str, int] | None:
    """(parent pid, state, start time) of ``pid``, None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()  # after "pid (comm)"
    return int(fields[1]), fields[0], int(fields[19])


def descendants(pid: int) -> dict[int, int]:
    """Every process under ``pid`` now: pid -> start time (a reused pid is another one)."""
    parents: dict[int, list[int]] = {}
    starts: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (st := _stat(int(entry.name))) is not None:
            parents.setdefault(st[0], []).append(int(entry.name))
            starts[int(entry.name)] = st[2]
    found: dict[int, int] = {}
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found[child] = starts[child]
            todo.append(child)
    return found


class Spawned:
    """Every process seen under ``pid`` while it runs (sampled every 50 ms)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.seen: dict[int, int] = {}
        self._done = threading.Event()
        self._worker = threading.Thread(target=self._sample, daemon=True)
        self._worker.start()

    def _sample(self) -> None:
        while not self._done.is_set() and _stat(self.pid) is not None:
            self.seen.update(descendants(self.pid))
            self._done.wait(0.05)

    def stop(self) -> dict[int, int]:
        self._done.set()
        self._worker.join()
        return self.seen


def survivors(processes: dict[int, int], within: float = 10.0) -> list[str]:
    """Those of ``processes`` still running after ``within`` seconds, with their commands."""
    deadline = time.monotonic() + within
    while True:
        left = []
        for pid, start in processes.items():
            st = _stat(pid)
            if st is not None and st[2] == start and st[1] != "Z":
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                except OSError:
                    continue
                left.append(f"{pid}: {cmd.decode(errors='replace')[:200]}")
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def group_alive(pgid: int, within: float = 10.0) -> list[str]:
    """The processes of group ``pgid`` still running after ``within`` seconds, with their
    state and command, as ``survivors`` counts them: a zombie runs nothing (an orphan waits
    there for init to reap it, later under load). ``killpg(pgid, 0)``, which this replaces,
    counted zombies too and said nothing of who was left when it failed (once, in CI)."""
    deadline = time.monotonic() + within
    while True:
        left = []
        for entry in Path("/proc").iterdir():
            try:
                text = (entry / "stat").read_text() if entry.name.isdigit() else ""
            except OSError:
                continue
            fields = text.rsplit(")", 1)[1].split() if text else []
            if fields and int(fields[2]) == pgid and fields[0] != "Z":
                try:
                    cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
                except OSError:
                    continue
                left.append(f"{entry.name} {fields[0]}: {cmd.decode(errors='replace')[:200]}")
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def assert_clean(stderr: str) -> None:
    assert "Exception ignored" not in stderr, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]


@dataclass
class Silent:
    """A server that takes connections and never answers: its ``url``, and ``reached``, set
    once a connection came (the command under test is blocked on it, past its start-up)."""

    url: str
    reached: threading.Event

    def wait_reached(self, child: Child, timeout: float = 60) -> None:
        if not self.reached.wait(timeout):
            pytest.fail(f"no connection to {self.url} within {timeout:.0f}s\n{child.stderr}")


@pytest.fixture
def silent_server() -> Iterator[Silent]:
    """A ``Silent`` server on 127.0.0.1."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    taken: list[socket.socket] = []
    stop = threading.Event()
    reached = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                taken.append(server.accept()[0])
            except OSError:
                continue
            reached.set()

    worker = threading.Thread(target=accept, daemon=True)
    worker.start()
    try:
        yield Silent(f"http://127.0.0.1:{server.getsockname()[1]}", reached)
    finally:
        stop.set()
        worker.join()
        for conn in taken:
            conn.close()
        server.close()


def _base_env(tmp_path: Path) -> dict[str, str]:
    drop = {"GITOPSBOT_FORGE_TOKEN", "GITOPSBOT_LOG_FORMAT", "GITOPSBOT_CHARTS", "KUBECONFIG"}
    base = {k: v for k, v in os.environ.items() if k not in drop}
    base["GITOPSBOT_CACHE"] = str(tmp_path / "cache")
    return base


# -- the demo -------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "where",
    [
        # The proposer's clone, fetch and push run in the main thread: its pygit2 callbacks
        # are where the first Ctrl-C used to be swallowed.
        pytest.param(r"proposer: checking", id="main-thread-git-transfer"),
        # The bot's threads mid-rollout: helm done, pool switches and their records in Git.
        pytest.param(r"pool/shared/hypervisor: rolling", id="rollout"),
    ],
)
def test_one_sigint_stops_the_demo_and_everything_it_started(
    where: str, tmp_path: Path, binaries: dict[str, Path], children: list[Child]
) -> None:
    demo = Child.start("demo", "--state-dir", str(tmp_path / "demo"), env=_base_env(tmp_path))
    children.append(demo)
    started = Spawned(demo.proc.pid)  # helm, kubectl, git and its http-backend come and go
    demo.wait_for(where)
    ports = json.loads((tmp_path / "demo" / "sandbox" / "sandbox.json").read_text())["ports"]
    assert ports and all(port_open(p) for p in ports)
    began = time.monotonic()
    demo.interrupt()
    code = demo.exit_within(PROMPT)
    took = time.monotonic() - began
    assert code == 130, demo.stderr[-3000:]
    assert took < PROMPT
    assert_clean(demo.stderr)
    assert "stopping everything it started (Ctrl-C again to force)" in demo.stderr
    assert "interrupted; everything it started is stopped" in demo.stderr
    said = [ln for ln in demo.stderr.splitlines() if ln.startswith("gitopsbot demo: interr")]
    assert len(said) == 1, demo.stderr  # said once
    assert survivors(started.stop()) == []
    assert group_alive(demo.proc.pid) == []  # its process group is empty (a zombie is dead)
    assert not [p for p in ports if port_open(p)]


# -- a second SIGINT forces -----------------------------------------------------------------


@pytest.mark.timeout(120)
def test_a_second_sigint_forces_when_the_first_stop_is_slow(
    tmp_path: Path, binaries: dict[str, Path], silent_server: Silent, children: list[Child]
) -> None:
    """``propose``'s loop stops after its running pass; that pass waits on a forge that never
    answers, so the first Ctrl-C only says it is stopping; the second exits at once."""
    ctx = Ctx(tmp_path, _base_env(tmp_path), binaries)
    fleet = ctx.fleet(silent_server.url, set_version("1.8.0"))  # 1.8.7 is there to propose
    propose = Child.start(
        *("propose", "--fleet", str(fleet), "--chart-dir", str(CHARTS)),
        env={**ctx.base, "GITOPSBOT_FORGE_TOKEN": TOKEN},
    )
    children.append(propose)
    propose.wait_for(r"a pass every \d+s \(Ctrl-C to stop\)")
    silent_server.wait_reached(propose)  # into the pass: its pull request waits on the forge
    propose.interrupt()
    propose.wait_for(r"stopping after the running pass \(Ctrl-C again to force\)", stream="err")
    time.sleep(1.5)
    assert propose.proc.poll() is None, "the first SIGINT was to wait for the pass"
    began = time.monotonic()
    propose.interrupt()
    assert propose.exit_within(5) == 130
    assert time.monotonic() - began < 5
    assert "SIGINT again: forced exit" in propose.stderr
    assert_clean(propose.stderr)


# -- run: at a step boundary ----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_run_stops_at_a_step_boundary_and_the_next_run_carries_on(
    tmp_path: Path, binaries: dict[str, Path], children: list[Child]
) -> None:
    """docs/sandbox.md's sequence (tests/sandbox/test_sandbox_run_bot.py): a merged chart bump,
    then the long-running ``run``, interrupted once the upgrade is under way."""
    (tmp_path / "home").mkdir()
    state_dir = tmp_path / "sbx"
    up = cli(
        tmp_path,
        *("sandbox", "up", "--state-dir", str(state_dir), "--pools", "2"),
        *("--chart-version", "1.8.0"),
    )
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        state = json.loads((state_dir / "sandbox.json").read_text())
        fleet_url, password = state["services"]["git"], state["credentials"]["git_password"]
        token = {"GITOPSBOT_GIT_TOKEN": password}
        where = ("--download-binaries", "--fleet-url", fleet_url, "--kubeconfig")
        where += (state["kubeconfig"],)
        first = cli(tmp_path, "run", "--once", *where, **token)
        assert first.returncode == 0 and "sandbox: baseline" in first.stdout, first.stderr

        clone = tmp_path / "fleet"
        user = state["credentials"]["git_username"]
        authed = fleet_url.replace("http://", f"http://{user}:{password}@", 1)
        git(tmp_path, "clone", "--quiet", authed, str(clone), cwd=tmp_path)
        release = clone / "clusters" / "sandbox" / "release.yaml"
        text = release.read_text()
        assert "  version: 1.8.0\n" in text
        release.write_text(text.replace("  version: 1.8.0\n", "  version: 1.8.7\n"))
        rollout = clone / "clusters" / "sandbox" / "rollout.yaml"
        rollout.write_text(rollout.read_text() + 'acknowledgements:\n  R4: "keeps 2.13.0"\n')
        git(tmp_path, "commit", "--quiet", "-am", "tensor-fusion 1.8.7", cwd=clone)
        git(tmp_path, "push", "--quiet", "origin", "main", cwd=clone)

        run = Child.start("run", *where, env=_env(tmp_path, **token), cwd=tmp_path)
        children.append(run)
        run.wait_for(r"\(Ctrl-C to stop\)")
        run.wait_for(r"helm-upgrade (started|succeeded)", stream="err")  # under way
        run.interrupt()
        code = run.exit_within(120)
        assert code == 0, run.stderr[-3000:]  # docs/commands.md: stopped cleanly
        assert_clean(run.stderr)
        assert (
            "gitopsbot run: SIGINT: stopping at the next step boundary: the running passes "
            "record their step first (Ctrl-C again to force)"
        ) in run.stdout
        assert "gitopsbot run: SIGINT: stopped cleanly at a step boundary" in run.stdout
        stopped = journal(tmp_path, clone)
        assert stopped["kind"] == "upgrade" and stopped["status"] == "running", stopped
        done_then = [s["name"] for s in stopped["steps"] if s["state"] == "succeeded"]
        assert "backup" in done_then

        for _ in range(10):  # run --once rounds until the upgrade has finished
            again = cli(tmp_path, "run", "--once", *where, **token)
            assert again.returncode == 0, again.stdout + again.stderr
            j = journal(tmp_path, clone)
            if j["status"] in ("succeeded", "failed"):
                break
        assert j["status"] == "succeeded", j
        # No step that had taken effect ran again: one upgrade revision in helm's history,
        # and one "succeeded" record per step on the state branch.
        history = subprocess.run(
            [str(binaries["helm4"]), "history", "-n", state["namespace"], state["release"],
             "-o", "json"],
            env=_env(tmp_path, KUBECONFIG=state["kubeconfig"]),
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout  # fmt: skip
        assert [r["revision"] for r in json.loads(history)] == [1, 2], history
        log = git(tmp_path, "log", "--format=%s", "origin/state", cwd=clone)
        for name in done_then:
            assert len(re.findall(rf"^sandbox: {re.escape(name)} succeeded", log, re.M)) <= 1, log
    finally:
        down = cli(tmp_path, "sandbox", "down", "--state-dir", str(state_dir))
        assert down.returncode == 0, down.stdout + down.stderr
    assert not [p for p in state.get("ports", []) if port_open(p)]


# -- status --watch, plan, sandbox up --foreground ------------------------------------------


@pytest.mark.timeout(120)
def test_status_watch_exits_0(
    tmp_path: Path, binaries: dict[str, Path], children: list[Child]
) -> None:
    ctx = Ctx(tmp_path, _base_env(tmp_path), binaries)
    fleet = ctx.fleet()
    watch = Child.start("status", "--fleet", str(fleet), "--watch", "--interval", "1", env=ctx.base)
    children.append(watch)
    watch.wait_for(r"^state: ")
    time.sleep(1.5)  # a refresh (a fetch) or the wait between two
    watch.interrupt()
    assert watch.exit_within(5) == 0, watch.stderr
    assert_clean(watch.stderr)
    assert watch.stderr == ""


@pytest.mark.timeout(120)
def test_plan_exits_130_with_one_line(
    tmp_path: Path, binaries: dict[str, Path], silent_server: Silent, children: list[Child]
) -> None:
    """Blocked reading a chart repository that never answers."""
    ctx = Ctx(tmp_path, _base_env(tmp_path), binaries)
    files = tmp_path / "files"
    fleet = ctx.fleet(edit=set_repository(silent_server.url))
    git(tmp_path, "clone", "--quiet", str(fleet), str(files), cwd=tmp_path)
    plan = Child.start("plan", "--cluster", "staging", "--fleet", str(files), env=ctx.base)
    children.append(plan)
    silent_server.wait_reached(plan)  # past start-up: waiting on the chart repository
    assert plan.proc.poll() is None, plan.stderr
    plan.interrupt()
    assert plan.exit_within(5) == 130, plan.stderr
    assert plan.stderr.strip() == "gitopsbot plan: interrupted"


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_sandbox_up_foreground_exits_130_and_stops_it(
    tmp_path: Path, binaries: dict[str, Path], children: list[Child]
) -> None:
    state_dir = tmp_path / "sbx"
    up = Child.start(
        "sandbox", "up", "--foreground", "--state-dir", str(state_dir), env=_base_env(tmp_path)
    )
    children.append(up)
    up.wait_for(r"gitopsbot sandbox down")
    state = json.loads((state_dir / "sandbox.json").read_text())
    started = descendants(up.proc.pid)
    up.interrupt()
    assert up.exit_within(PROMPT) == 130, up.stderr
    assert up.stderr.strip().splitlines()[-1] == "gitopsbot sandbox: interrupted"
    assert_clean(up.stderr)
    assert not [p for p in state["ports"] if port_open(p)]
    assert survivors(started) == []


# -- pygit2's callbacks, in this process ----------------------------------------------------


@pytest.fixture
def bare_repo(tmp_path: Path) -> str:
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull}
    for args in (
        ["init", "--quiet", "-b", "main"],
        ["-c", "user.name=t", "-c", "user.email=t@e", "commit", "--quiet", "--allow-empty",
         "-m", "one"],
        ["clone", "--quiet", "--bare", str(work), str(tmp_path / "fleet.git")],
    ):  # fmt: skip
        subprocess.run(["git", *args], cwd=work, env=env, check=True, capture_output=True)
    return f"file://{tmp_path / 'fleet.git'}"


@pytest.fixture
def installed() -> Iterator[None]:
    undo = interrupts.install("test")
    try:
        yield
    finally:
        undo()


def _sigint_here() -> None:
    """A real SIGINT to this process, taken by the handler before this returns."""
    os.kill(os.getpid(), signal.SIGINT)
    for _ in range(1000):  # bytecodes: the handler runs at one of them
        pass


def test_a_callback_stops_the_transfer_once_interrupted(
    tmp_path: Path, bare_repo: str, installed: None
) -> None:
    with pytest.raises(KeyboardInterrupt):
        _sigint_here()  # outside pygit2: raised at once
    assert interrupts.aborted()
    repo = GitRepo(GitSettings(url=bare_repo, mirror_dir=tmp_path / "mirror"))
    with pytest.raises(KeyboardInterrupt):  # the main thread: the command exits 130
        repo.fetch()
    assert repo.head("main") is None  # stopped before the refs were updated
    raised: list[BaseException] = []

    def in_a_thread() -> None:
        try:
            repo.fetch()
        except BaseException as e:  # noqa: BLE001 - the test looks at what it is
            raised.append(e)

    worker = threading.Thread(target=in_a_thread)
    worker.start()
    worker.join()
    assert [type(e) for e in raised] == [GitInterrupted]  # a bot thread's pass ends with it


def test_a_graceful_command_lets_transfers_finish(
    tmp_path: Path, bare_repo: str, installed: None
) -> None:
    stop = threading.Event()
    interrupts.install("test", graceful=True, on_first=lambda signum: stop.set())
    _sigint_here()  # no KeyboardInterrupt: the command stops at its next step boundary
    assert stop.is_set() and interrupts.requested() and not interrupts.aborted()
    repo = GitRepo(GitSettings(url=bare_repo, mirror_dir=tmp_path / "mirror"))
    repo.fetch()  # a step's record is pushed before the boundary: transfers go on
    assert repo.head("main") is not None


class _SignalInside(pygit2.RemoteCallbacks):
    """Sends SIGINT from inside libgit2's first progress callback and goes on."""

    def __init__(self, check: bool) -> None:
        super().__init__()
        self.check = check
        self.sent = False
        self.went_on = False

    def transfer_progress(self, stats: object) -> None:
        if not self.sent:
            self.sent = True
            _sigint_here()
            self.went_on = True  # the handler did not raise inside the callback
        if self.check:
            interrupts.check_transfer()


def _mirror(tmp_path: Path, url: str) -> pygit2.Remote:
    repo = pygit2.init_repository(str(tmp_path / "raw"), bare=True)
    return repo.remotes.create("origin", url, "+refs/heads/*:refs/remotes/origin/*")


def test_the_handler_never_raises_inside_a_callback(
    tmp_path: Path, bare_repo: str, installed: None
) -> None:
    callbacks = _SignalInside(check=True)
    with pytest.raises(KeyboardInterrupt):  # through pygit2's own channel, after libgit2
        _mirror(tmp_path, bare_repo).fetch(callbacks=callbacks)
    assert callbacks.sent and callbacks.went_on


def test_an_interrupt_taken_inside_pygit2_is_delivered_once_outside(
    tmp_path: Path, bare_repo: str, installed: None
) -> None:
    """No callback asks (``check=False``): the transfer ends normally, and the interrupt is
    re-delivered to the main thread once it is back in this code."""
    callbacks = _SignalInside(check=False)
    remote = _mirror(tmp_path, bare_repo)
    fetched = False
    with pytest.raises(KeyboardInterrupt):
        remote.fetch(callbacks=callbacks)
        fetched = True
        time.sleep(5)  # the re-delivery comes within REDELIVER_SECONDS
    assert callbacks.went_on and fetched
