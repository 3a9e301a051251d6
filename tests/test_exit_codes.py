"""Every exit status of docs/commands.md's "Exit statuses" table, run as a real subprocess
(``python -m gitopsbot ...``) and held to the code the table gives.

The table drives the test: each row is one parametrized case, looked up in ``CASES`` by its
command and case text, and the code asserted is the table's. A row whose case names an
existing test (``(test: path::name)``) is held by that test instead (a sandbox or a whole
demo: minutes, not seconds); the reference must name a test that exists. A row without a
case here, or a case here without a row, fails ``test_every_row_has_a_case``.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gitopsbot.sandbox.forges.github import GitHubForge

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "commands.md"
EXAMPLES = ROOT / "examples" / "fleet"
CHARTS = ROOT / "examples" / "charts" / "repo"
TOKEN = "exit-codes-forge-token"
CLOSED = "http://127.0.0.1:9"  # nothing listens on the discard port: connection refused
REF = re.compile(r"\s*\(test: (?P<path>[^:()]+)::(?P<name>\w+)\)\s*")

# slow: each test runs the command line, a Git remote or real helm in subprocesses (seconds)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


# -- the table ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    command: str
    case: str  # without its (test: ...) reference
    code: int
    ref: tuple[str, str] | None  # (path, test name) holding this row, if not run here

    @property
    def key(self) -> str:
        return f"{self.command}: {self.case}"


def table_rows() -> list[Row]:
    text = DOCS.read_text(encoding="utf-8")
    section = text.split("\n## Exit statuses\n", 1)[1].split("\n## ", 1)[0]
    rows: list[Row] = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) != 3 or not cells[2].isdigit():
            continue
        command, case, code = cells
        found = REF.search(case)
        ref = (found["path"], found["name"]) if found else None
        rows.append(Row(command.strip("`"), REF.sub(" ", case).strip(), int(code), ref))
    return rows


ROWS = table_rows()


# -- running the command --------------------------------------------------------------------


@dataclass
class Call:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)  # on top of the base environment
    drop: tuple[str, ...] = ()  # removed from it
    stdin: str = ""
    # Long-running: start, wait for this text on stdout, then send ``signal``.
    wait_for: str = ""
    signal: int = 0


@dataclass
class Ctx:
    tmp: Path
    base: dict[str, str]
    binaries: dict[str, Path]

    def fleet(self, forge_url: str = CLOSED, edit: Callable[[Path], None] | None = None) -> Path:
        """examples/fleet as a Git repository: ``tmp/work`` (a working copy) and the bare
        ``tmp/fleet.git`` it pushes to; returns the bare one."""
        work = self.tmp / "work"
        shutil.copytree(EXAMPLES, work)
        settings = work / "gitopsbot.yaml"
        settings.write_text(
            settings.read_text().replace("url: https://api.github.com", f"url: {forge_url}")
        )
        if edit is not None:
            edit(work)
        git("init", "--quiet", "-b", "main", cwd=work)
        commit(work, "the fleet")
        git("clone", "--quiet", "--bare", str(work), str(self.tmp / "fleet.git"), cwd=self.tmp)
        git("remote", "add", "origin", str(self.tmp / "fleet.git"), cwd=work)
        return self.tmp / "fleet.git"

    def tools(self) -> dict[str, str]:
        return {
            "GITOPSBOT_FORGE_TOKEN": TOKEN,
            "GITOPSBOT_HELM": str(self.binaries["helm4"]),
            "GITOPSBOT_KUBECTL": str(self.binaries["kubectl"]),
        }

    def run(self, call: Call) -> subprocess.CompletedProcess[str]:
        environ = {k: v for k, v in {**self.base, **call.env}.items() if k not in call.drop}
        argv = [sys.executable, "-m", "gitopsbot", *call.argv]
        if not call.wait_for:
            return subprocess.run(
                argv, cwd=ROOT, env=environ, input=call.stdin, capture_output=True, text=True,
                timeout=90,
            )  # fmt: skip
        proc = subprocess.Popen(
            argv, cwd=ROOT, env=environ, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert proc.stdout is not None
            seen = []
            for line in proc.stdout:  # until the command says it has started (or exits)
                seen.append(line)
                if call.wait_for in line:
                    proc.send_signal(call.signal)
                    break
            out, err = proc.communicate(timeout=90)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        return subprocess.CompletedProcess(argv, proc.returncode, "".join(seen) + out, err)


def git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def commit(work: Path, message: str) -> None:
    git("add", "-A", cwd=work)
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", message, cwd=work)


def set_version(version: str, cluster: str = "staging") -> Callable[[Path], None]:
    def edit(work: Path) -> None:
        release = work / "clusters" / cluster / "release.yaml"
        text = re.sub(r"version: \S+", f"version: {version}", release.read_text(), count=1)
        release.write_text(text)

    return edit


def set_repository(url: str) -> Callable[[Path], None]:
    def edit(work: Path) -> None:
        for release in (work / "clusters").glob("*/release.yaml"):
            text = release.read_text().replace("https://download.tensor-fusion.ai", url)
            release.write_text(text)

    return edit


def plain_copy(ctx: Ctx, edit: Callable[[Path], None] | None = None) -> str:
    """examples/fleet as files on disk (validate and plan read the working tree)."""
    where = ctx.tmp / "files"
    shutil.copytree(EXAMPLES, where)
    if edit is not None:
        edit(where)
    return str(where)


# -- the cases, by row ----------------------------------------------------------------------

Case = Callable[[Ctx], Call]
CASES: dict[str, Case] = {}


def case(key: str) -> Callable[[Case], Case]:
    def register(fn: Case) -> Case:
        assert key not in CASES, key
        CASES[key] = fn
        return fn

    return register


@case(
    "any: usage error: unknown command or option, a required option missing, a value "
    "argparse refuses (`--log-format xml`)"
)
def _usage(ctx: Ctx) -> Call:
    return Call(["--log-format", "xml", "validate", str(EXAMPLES)])


@case("any: `GITOPSBOT_LOG_FORMAT` neither `text` nor `json`")
def _log_format_env(ctx: Ctx) -> Call:
    return Call(["validate", str(EXAMPLES)], env={"GITOPSBOT_LOG_FORMAT": "xml"})


@case("validate: clean (warnings allowed)")
def _validate_clean(ctx: Ctx) -> Call:
    return Call(["validate", str(EXAMPLES)])


@case("validate: a problem in the fleet files (no `gitopsbot.yaml`)")
def _validate_problem(ctx: Ctx) -> Call:
    (ctx.tmp / "empty").mkdir()
    return Call(["validate", str(ctx.tmp / "empty")])


@case("validate: a deny (`CHART-NOT-IN-INDEX` with `--chart-dir`)")
def _validate_deny(ctx: Ctx) -> Call:
    return Call(["validate", plain_copy(ctx, set_version("9.9.9")), "--chart-dir", str(CHARTS)])


@case("plan: plan printed (a denied one too, without `--check`)")
def _plan_printed(ctx: Ctx) -> Call:
    fleet = plain_copy(ctx, set_version("9.9.9"))
    return Call(["plan", "--cluster", "staging", "--fleet", fleet, "--chart-dir", str(CHARTS)])


@case("plan: `--check` and the plan is denied or needs acknowledgement")
def _plan_check(ctx: Ctx) -> Call:
    fleet = plain_copy(ctx, set_version("9.9.9"))
    argv = ["plan", "--cluster", "staging", "--fleet", fleet, "--chart-dir", str(CHARTS)]
    return Call([*argv, "--check"])


@case("plan: bad fleet files or policy (a `--cluster` not in the fleet)")
def _plan_bad_fleet(ctx: Ctx) -> Call:
    return Call(["plan", "--cluster", "nope", "--fleet", str(EXAMPLES), "--chart-dir", str(CHARTS)])


@case("plan: the chart repository unavailable")
def _plan_unavailable(ctx: Ctx) -> Call:
    fleet = plain_copy(ctx, set_repository(CLOSED))
    return Call(["plan", "--cluster", "staging", "--fleet", fleet])


@pytest.fixture
def forge() -> Iterator[GitHubForge]:
    server = GitHubForge(token=TOKEN, owner="example-org", repo="gpu-fleet", page_size=100)
    server.start()
    try:
        yield server
    finally:
        server.stop()


FORGE: list[GitHubForge] = []  # the running local GitHub of the current case


@case("propose: `--once`: the pass done")
def _propose_done(ctx: Ctx) -> Call:
    fleet = ctx.fleet(FORGE[0].api_url)
    argv = ["propose", "--once", "--fleet", str(fleet), "--chart-dir", str(CHARTS)]
    return Call(argv, env={"GITOPSBOT_FORGE_TOKEN": TOKEN})


@case("propose: the forge token's environment variable unset")
def _propose_no_token(ctx: Ctx) -> Call:
    fleet = ctx.fleet()
    return Call(["propose", "--once", "--fleet", str(fleet), "--chart-dir", str(CHARTS)])


@case("propose: `--fleet` a working copy, not a bare repository")
def _propose_working_copy(ctx: Ctx) -> Call:
    ctx.fleet()
    return Call(["propose", "--once", "--git-only", "--fleet", str(ctx.tmp / "work")])


@case("propose: Git unavailable")
def _propose_git(ctx: Ctx) -> Call:
    return Call(["propose", "--once", "--fleet-url", f"{CLOSED}/fleet.git"])


@case("propose: `--once`: the forge unavailable, a proposal not opened")
def _propose_forge_down(ctx: Ctx) -> Call:
    fleet = ctx.fleet(CLOSED, set_version("1.8.0"))  # 1.8.7 is there to propose
    argv = ["propose", "--once", "--fleet", str(fleet), "--chart-dir", str(CHARTS)]
    return Call(argv, env={"GITOPSBOT_FORGE_TOKEN": TOKEN})


def _pull_request(ctx: Ctx, version: str) -> tuple[Path, int]:
    """A branch changing staging to ``version``, pushed, and its pull request."""
    fleet = ctx.fleet(FORGE[0].api_url)
    work = ctx.tmp / "work"
    git("checkout", "--quiet", "-b", "bump", cwd=work)
    set_version(version)(work)
    commit(work, f"staging to {version}")
    git("push", "--quiet", "origin", "bump", cwd=work)
    pr = FORGE[0].new_pull(head="bump", base="main", title=f"staging {version}", body="by hand")
    return fleet, pr.number


@case("comment: plan posted")
def _comment_posted(ctx: Ctx) -> Call:
    fleet, number = _pull_request(ctx, "1.8.0")
    argv = ["comment", "--cluster", "staging", "--pr", str(number), "--fleet", str(fleet)]
    return Call([*argv, "--chart-dir", str(CHARTS)], env={"GITOPSBOT_FORGE_TOKEN": TOKEN})


@case("comment: `--check` and the plan is not allowed")
def _comment_check(ctx: Ctx) -> Call:
    fleet, number = _pull_request(ctx, "9.9.9")
    argv = ["comment", "--cluster", "staging", "--pr", str(number), "--fleet", str(fleet)]
    argv += ["--chart-dir", str(CHARTS), "--check"]
    return Call(argv, env={"GITOPSBOT_FORGE_TOKEN": TOKEN})


@case("comment: the forge token's environment variable unset")
def _comment_no_token(ctx: Ctx) -> Call:
    fleet = ctx.fleet()
    argv = ["comment", "--cluster", "staging", "--pr", "1", "--fleet", str(fleet)]
    return Call([*argv, "--chart-dir", str(CHARTS)])


@case("comment: Git unavailable")
def _comment_git(ctx: Ctx) -> Call:
    return Call(["comment", "--cluster", "staging", "--pr", "1", "--fleet-url", f"{CLOSED}/f.git"])


@case("run: `--once`: every cluster idle or waiting")
def _run_once(ctx: Ctx) -> Call:
    fleet = ctx.fleet()
    return Call(["run", "--fleet", str(fleet), "--once", "--no-push"], env=ctx.tools())


@case("run: SIGTERM or SIGINT: stopped cleanly at a step boundary")
def _run_stopped(ctx: Ctx) -> Call:
    fleet = ctx.fleet()
    return Call(
        ["run", "--fleet", str(fleet), "--no-push"],
        env={**ctx.tools(), "PYTHONUNBUFFERED": "1"},
        wait_for="(Ctrl-C to stop)",
        signal=signal.SIGTERM,
    )


@case("run: bad options (`--workers 0`, `--once` with `--leases-namespace`)")
def _run_bad_options(ctx: Ctx) -> Call:
    fleet = ctx.fleet()
    return Call(["run", "--fleet", str(fleet), "--once", "--workers", "0"], env=ctx.tools())


@case("run: the forge token's environment variable unset (`GITOPSBOT_FORGE_TOKEN`)")
def _run_no_token(ctx: Ctx) -> Call:
    fleet = ctx.fleet()
    tools = {k: v for k, v in ctx.tools().items() if k != "GITOPSBOT_FORGE_TOKEN"}
    return Call(["run", "--fleet", str(fleet), "--once", "--no-push"], env=tools)


@case("run: helm or kubectl not found")
def _run_no_helm(ctx: Ctx) -> Call:
    fleet = ctx.fleet()
    (ctx.tmp / "empty-bin").mkdir()
    return Call(
        ["run", "--fleet", str(fleet), "--once", "--no-push"],
        env={"GITOPSBOT_FORGE_TOKEN": TOKEN, "PATH": str(ctx.tmp / "empty-bin")},
    )


@case("run: `--fleet` not a Git repository")
def _run_not_a_repository(ctx: Ctx) -> Call:
    return Call(["run", "--fleet", str(ctx.tmp), "--once"], env=ctx.tools())


@case("run: `--cluster` not in the fleet")
def _run_unknown_cluster(ctx: Ctx) -> Call:
    fleet = ctx.fleet()
    return Call(["run", "--fleet", str(fleet), "--once", "--cluster", "nope"], env=ctx.tools())


TAKEN: list[socket.socket] = []  # a listening socket held for the current case


@case("run: a `--webhook-listen` or `--metrics-listen` port that cannot be bound")
def _run_port_taken(ctx: Ctx) -> Call:
    fleet = ctx.fleet()
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    TAKEN.append(taken)
    listen = f"127.0.0.1:{taken.getsockname()[1]}"
    return Call(["run", "--fleet", str(fleet), "--metrics-listen", listen], env=ctx.tools())


@case("run: Git unavailable at start")
def _run_git(ctx: Ctx) -> Call:
    return Call(["run", "--fleet-url", f"{CLOSED}/fleet.git", "--once"], env=ctx.tools())


@case("run: `--once`: a cluster's pass fails (its cluster unreachable or its kubeconfig unusable)")
def _run_pass_fails(ctx: Ctx) -> Call:
    fleet = ctx.fleet()
    argv = ["run", "--fleet", str(fleet), "--once", "--no-push"]
    argv += ["--kubeconfig", str(ctx.tmp / "no-such-kubeconfig")]
    baseline = ctx.run(Call(argv, env=ctx.tools()))  # the baseline pass reads Git only
    assert baseline.returncode == 0, baseline.stderr
    work = ctx.tmp / "work"
    set_version("1.8.0")(work)  # a merged change: the next pass needs the cluster
    commit(work, "staging to 1.8.0")
    git("push", "--quiet", "origin", "main", cwd=work)
    return Call(argv, env=ctx.tools())


@case("status: printed")
def _status_printed(ctx: Ctx) -> Call:
    return Call(["status", "--fleet", str(ctx.fleet())])


@case("status: `--cluster` with no record on the state branch")
def _status_unknown(ctx: Ctx) -> Call:
    return Call(["status", "--fleet", str(ctx.fleet()), "--cluster", "nope"])


@case("status: `--fleet` not a Git repository")
def _status_not_a_repository(ctx: Ctx) -> Call:
    return Call(["status", "--fleet", str(ctx.tmp)])


@case("status: Git unavailable")
def _status_git(ctx: Ctx) -> Call:
    return Call(["status", "--fleet-url", f"{CLOSED}/fleet.git"])


@case("drift: a `--cluster` not in the fleet")
def _drift_unknown(ctx: Ctx) -> Call:
    return Call(["drift", "--fleet", str(ctx.fleet()), "--cluster", "nope"], env=ctx.tools())


@case("drift: Git unavailable")
def _drift_git(ctx: Ctx) -> Call:
    return Call(["drift", "--fleet-url", f"{CLOSED}/fleet.git"], env=ctx.tools())


@case("drift: a cluster not checked (its kubeconfig unusable)")
def _drift_not_checked(ctx: Ctx) -> Call:
    fleet = str(ctx.fleet())
    argv = ["drift", "--fleet", fleet, "--kubeconfig", str(ctx.tmp / "no-such-kubeconfig")]
    return Call(argv, env=ctx.tools())


@case("demo: a step failed or the sandbox could not start (the bot's helm missing)")
def _demo_failed(ctx: Ctx) -> Call:
    missing = str(ctx.tmp / "no-helm")
    return Call(["demo", "--state-dir", str(ctx.tmp / "demo")], env={"GITOPSBOT_HELM": missing})


@case("demo: `--nodes` below 1")
def _demo_nodes(ctx: Ctx) -> Call:
    return Call(["demo", "--nodes", "0", "--state-dir", str(ctx.tmp / "demo")])


@case(
    "demo: `--state-dir` not empty and not made by an earlier demo: refused before anything starts"
)
def _demo_state_dir(ctx: Ctx) -> Call:
    (ctx.tmp / "precious.txt").write_text("keep me\n")
    return Call(["demo", "--state-dir", str(ctx.tmp)])


@case("demo: interrupted (Ctrl-C, SIGTERM)")
def _demo_interrupted(ctx: Ctx) -> Call:
    return Call(
        ["demo", "--state-dir", str(ctx.tmp / "demo")],
        env={"PYTHONUNBUFFERED": "1"},
        wait_for="starting the sandbox",
        signal=signal.SIGINT,
    )


@case("sandbox: `up`: bad options (`--pools 0`)")
def _sandbox_bad_options(ctx: Ctx) -> Call:
    return Call(["sandbox", "up", "--state-dir", str(ctx.tmp / "sbx"), "--pools", "0"])


@case("sandbox: `down`: nothing running (a second `down`)")
def _sandbox_down(ctx: Ctx) -> Call:
    return Call(["sandbox", "down", "--state-dir", str(ctx.tmp / "sbx")])


@case("tools: every tool asked for is in the cache: paths printed")
def _tools_printed(ctx: Ctx) -> Call:
    return Call(["tools"], env={"GITOPSBOT_CACHE": str(ctx.binaries["helm4"].parents[3])})


@case("tools: a tool not fetched yet, without `--fetch`")
def _tools_missing(ctx: Ctx) -> Call:
    return Call(["tools", "--shell", "kubectl"])  # the base environment's cache is empty


@case("tools: bad options (an unknown tool name)")
def _tools_unknown(ctx: Ctx) -> Call:
    return Call(["tools", "helm2"])


@case("tools: `--fetch` and the fetch fails")
def _tools_fetch_fails(ctx: Ctx) -> Call:
    # pip finds nothing: no index, and an empty directory for --find-links (no network used).
    (ctx.tmp / "no-wheels").mkdir()
    pip = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(ctx.tmp / "no-wheels")}
    return Call(["tools", "--fetch", "kubectl"], env={**pip, "PIP_CONFIG_FILE": os.devnull})


POLICY = (
    '{"format": "gitopsbot.post-render/v1", "pools": [{"name": "shared", "batchPercentage": 10, '
    '"batchIntervalSeconds": 120, "maxDurationSeconds": 7200}]}'
)


@case("post-render: manifests written")
def _post_render_ok(ctx: Ctx) -> Call:
    (ctx.tmp / "policy.json").write_text(POLICY)
    manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n"
    return Call(["post-render", "--policy", str(ctx.tmp / "policy.json")], stdin=manifest)


@case("post-render: the manifests or the policy file cannot be understood")
def _post_render_bad(ctx: Ctx) -> Call:
    (ctx.tmp / "policy.json").write_text("{not json")
    return Call(["post-render", "--policy", str(ctx.tmp / "policy.json")])


@case("post-render: the policy file cannot be read")
def _post_render_unreadable(ctx: Ctx) -> Call:
    return Call(["post-render", "--policy", str(ctx.tmp / "no-such-policy.json")])


# -- the tests ------------------------------------------------------------------------------


def test_every_row_has_a_case() -> None:
    assert len(ROWS) >= 30, "the Exit statuses table of docs/commands.md was not found"
    keys = [r.key for r in ROWS]
    assert len(keys) == len(set(keys)), "a row appears twice"
    held = {r.key for r in ROWS if r.ref is None}
    assert sorted(held - set(CASES)) == [], "rows of the table with no case in this test"
    assert sorted(set(CASES) - held) == [], "cases here with no row (or a referenced row)"
    for row in ROWS:
        if row.ref is not None:
            path, name = row.ref
            source = ROOT / path
            assert source.is_file(), f"{row.key}: {path} does not exist"
            assert re.search(rf"^def {name}\(", source.read_text(), re.M), (
                f"{row.key}: no test {name} in {path}"
            )


@pytest.mark.parametrize(
    "row", [r for r in ROWS if r.ref is None], ids=[r.key for r in ROWS if r.ref is None]
)
def test_exit_status(
    row: Row,
    tmp_path: Path,
    binaries: dict[str, Path],
    forge: GitHubForge,
) -> None:
    make = CASES.get(row.key)
    assert make is not None, f"no case for the row {row.key!r}"
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in {"GITOPSBOT_FORGE_TOKEN", "GITOPSBOT_LOG_FORMAT", "GITOPSBOT_CHARTS"}
        and k not in {"GITOPSBOT_HELM", "GITOPSBOT_KUBECTL", "KUBECONFIG"}
    }
    base["GITOPSBOT_CACHE"] = str(tmp_path / "cache")
    ctx = Ctx(tmp_path, base, binaries)
    FORGE[:] = [forge]
    try:
        done = ctx.run(make(ctx))
    finally:
        while TAKEN:
            TAKEN.pop().close()
    assert done.returncode == row.code, (
        f"{row.key}: exit {done.returncode}, the table says {row.code}\n"
        f"stdout: {done.stdout[-2000:]}\nstderr: {done.stderr[-2000:]}"
    )
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    if row.command == "demo" and row.code == 2:  # refused before anything starts
        assert done.stdout == "", done.stdout
        assert "starting the sandbox" not in done.stderr
