"""Structured logs (docs/logging.md): JSON lines that parse and name the cluster, operation and
step of the pass that emitted them; no value left behind between passes or threads; the
readable text a long `run` prints at INFO (passes and step transitions); a secret resolved for
a cluster never reaches a log line; `gitopsbot run --once --log-format json` in a process."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from gitopsbot.adapters import logs
from gitopsbot.adapters.redaction import KnownSecrets
from gitopsbot.adapters.secrets import SecretResolver
from gitopsbot.bot import log_context
from gitopsbot.bot.announcer import Announcer
from gitopsbot.bot.progress_log import ProgressLog
from gitopsbot.bot.reconciler import PassResult, Reconciler
from gitopsbot.bot.scheduler import Scheduler
from gitopsbot.bot.steps.executor import Executor
from gitopsbot.core.records.journal import OperationStatus, StepState
from gitopsbot.errors import HelmError
from tests.executor.conftest import Env, fleet_files, git
from tests.executor.test_reconciler_scheduler import WallClock
from tests.executor.test_reconciler_upgrade import drive

REPO_ROOT = Path(__file__).resolve().parents[2]
RFC3339_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
CANARY = "canary-log-secret-5e1d07-do-not-leak"
ENV_CREDENTIALS = {
    "clusters/lab/credentials.yaml": "secrets:\n  agent.enrollToken:\n    env: TEST_LOG_CANARY\n"
}


@dataclass
class Captured:
    stream: io.StringIO

    def lines(self) -> list[str]:
        return [ln for ln in self.stream.getvalue().splitlines() if ln]

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(ln) for ln in self.lines()]


def _capture(fmt: str, level: int, known: KnownSecrets | None = None) -> Iterator[Captured]:
    """A handler as `gitopsbot run` installs it (formatter + pass context) on gitopsbot's
    loggers, at ``level``."""
    stream = io.StringIO()
    handler = logs.handler(
        fmt,
        stream=stream,
        filters=[log_context.RecordFields()],
        known=known if known is not None else KnownSecrets(),
    )
    logger = logging.getLogger("gitopsbot")
    before = logger.level
    logger.setLevel(level)
    logger.addHandler(handler)
    try:
        yield Captured(stream)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(before)


@pytest.fixture
def json_log() -> Iterator[Captured]:
    yield from _capture("json", logging.DEBUG)


@pytest.fixture
def text_log() -> Iterator[Captured]:
    yield from _capture("text", logging.INFO)


def _told(rec: Reconciler) -> Reconciler:
    progress = ProgressLog()
    rec.announcer = Announcer([progress], [progress])
    return rec


def _log_inside_steps(rec: Reconciler, env: Env) -> None:
    """Each step's execution logs a line of its own (as helm's adapter does): it carries the
    pass's context, not an ``extra``."""
    real = rec.executor_for
    inner = logging.getLogger("gitopsbot.adapters.test_step")

    class Logging(Executor):
        def run(self, step, journal, spec, **kwargs):  # type: ignore[no-untyped-def]
            inner.info("running %s", step.name)
            return super().run(step, journal, spec, **kwargs)

    executor = real(None)  # type: ignore[arg-type]  # the env's one executor
    logging_executor = Logging(
        cluster=executor.cluster, helm=executor.helm, secrets=executor.secrets
    )
    rec.executor_for = lambda spec: logging_executor


# -- JSON ---------------------------------------------------------------------------------


def test_json_lines_name_cluster_operation_and_step_during_a_pass(
    env: Env, json_log: Captured
) -> None:
    rec = _told(env.reconciler())
    _log_inside_steps(rec, env)
    json_log.stream.seek(0)
    json_log.stream.truncate()  # what building the reconciler logged (outside any pass)
    rec.reconcile("lab")
    env.merge_pr(7, "lab: hv:2", fleet_files("1.1.0", "hv:2"))
    journal = drive(env, rec)
    assert journal.status is OperationStatus.SUCCEEDED, journal.failure

    records = json_log.records()
    assert len(records) > 20
    for r in records:
        assert list(r)[:4] == ["time", "level", "logger", "message"], r
        assert RFC3339_UTC.match(r["time"]), r["time"]
        assert r["level"] in {"DEBUG", "INFO", "WARNING", "ERROR"}
        # Every line was emitted during a pass of lab: all three fields, on every one.
        assert r["cluster"] == "lab", r
        assert "operation" in r and "step" in r, r
    inside = [r for r in records if r["logger"] == "gitopsbot.adapters.test_step"]
    assert {r["step"] for r in inside} >= {"helm-upgrade"}
    assert all(r["operation"] == journal.op_id for r in inside)
    assert all(r["message"] == f"running {r['step']}" for r in inside)
    started = [r for r in records if r["message"] == "pass started"]
    assert started and all(r["operation"] is None and r["step"] is None for r in started[:1])
    transitions = [r for r in records if r["logger"] == "gitopsbot.progress" and r["step"]]
    assert any("step helm-upgrade succeeded" in r["message"] for r in transitions)
    assert all(r["operation"] == journal.op_id for r in transitions)
    # Outside a pass nothing is named.
    logging.getLogger("gitopsbot.test").warning("after the passes")
    last = json_log.records()[-1]
    assert last["message"] == "after the passes" and "cluster" not in last


def test_an_exception_is_one_exc_field(json_log: Captured) -> None:
    with log_context.pass_of("lab"):
        try:
            raise HelmError("helm upgrade failed: timed out\nsecond line")
        except HelmError:
            logging.getLogger("gitopsbot.test").exception("step failed")
    (line,) = json_log.lines()
    record = json.loads(line)
    assert record["message"] == "step failed" and record["cluster"] == "lab"
    assert record["exc"].startswith("Traceback") and "second line" in record["exc"]
    assert "exc_info" not in record


# -- no leak between passes and threads ---------------------------------------------------


def test_two_clusters_side_by_side_on_two_threads_keep_their_own_fields(
    json_log: Captured,
) -> None:
    both = threading.Barrier(2, timeout=10)
    log = logging.getLogger("gitopsbot.test")
    done = threading.Event()
    passes: list[str] = []

    def reconcile(cluster: str) -> PassResult:
        seen_at_start = log_context.current()
        log_context.note(operation=f"op-{cluster}")
        both.wait()  # both passes are in flight now
        log_context.note(step=f"step-{cluster}")
        log.info("working %s %s", cluster, seen_at_start)
        both.wait()
        passes.append(cluster)
        if len(passes) == 2:
            done.set()
        return PassResult(cluster, "idle")

    scheduler = Scheduler(reconcile=reconcile, clock=WallClock(), interval_seconds=3600, workers=2)
    scheduler.set_clusters(["east", "west"])
    scheduler.start()
    try:
        assert done.wait(20)
    finally:
        scheduler.shutdown(wait=True, timeout=20)
    working = [r for r in json_log.records() if r["message"].startswith("working")]
    assert len(working) == 2
    for r in working:
        cluster = r["message"].split()[1]
        assert (r["cluster"], r["operation"], r["step"]) == (
            cluster,
            f"op-{cluster}",
            f"step-{cluster}",
        )
        # Each pass started with nothing of another: operation and step empty.
        assert "'operation': ''" in r["message"] and f"'cluster': '{cluster}'" in r["message"]


def test_a_pool_thread_keeps_nothing_after_a_pass_also_a_failed_one(json_log: Captured) -> None:
    log = logging.getLogger("gitopsbot.test")

    def a_pass(cluster: str, fail: bool) -> dict[str, str]:
        with log_context.pass_of(cluster):
            log_context.note(operation=f"op-{cluster}", step="helm-upgrade")
            log.info("inside %s", cluster)
            if fail:
                raise HelmError("boom")
        return log_context.current()

    def outside() -> dict[str, str]:
        log_context.note(operation="set outside a pass", step="ignored")
        log.info("between passes")
        return log_context.current()

    with ThreadPoolExecutor(max_workers=1) as pool:  # one thread: every task on it
        assert pool.submit(a_pass, "east", False).result() == {}
        with pytest.raises(HelmError):
            pool.submit(a_pass, "west", True).result()
        assert pool.submit(outside).result() == {}
        assert pool.submit(a_pass, "north", False).result() == {}
    records = json_log.records()
    assert [r.get("cluster") for r in records] == ["east", "west", None, "north"]
    assert records[3]["operation"] == "op-north" and "operation" not in records[2]


# -- text at the default level of `run` ---------------------------------------------------


def test_text_at_info_tells_passes_and_step_transitions(env: Env, text_log: Captured) -> None:
    rec = _told(env.reconciler())
    rec.reconcile("lab")  # baseline
    rec.reconcile("lab")  # idle: the first after a change, at INFO
    rec.reconcile("lab")  # idle again: DEBUG, not shown
    rec.reconcile("lab")
    env.merge_pr(7, "lab: hv:2", fleet_files("1.1.0", "hv:2"))
    journal = drive(env, rec)
    assert journal.status is OperationStatus.SUCCEEDED
    rec.reconcile("lab")  # idle: the first after the operation, at INFO
    rec.reconcile("lab")
    lines = text_log.lines()
    text = "\n".join(lines)
    stamp = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"
    assert re.search(rf"^{stamp} INFO lab progress: pass started$", text, re.M), text
    assert re.search(rf"^{stamp} INFO lab progress: pass finished: baseline .*\(\d+\.\d s\)$",
                     text, re.M), text  # fmt: skip
    idle = [ln for ln in lines if "pass finished: idle" in ln]
    assert len(idle) == 2, idle  # after the baseline, and after the operation: not each poll
    op = journal.op_id
    for transition in (
        f"INFO lab op={op} step=helm-upgrade progress: upgrade {op}: step helm-upgrade started",
        f"INFO lab op={op} step=helm-upgrade progress: upgrade {op}: step helm-upgrade succeeded",
        f"INFO lab op={op} progress: upgrade {op} succeeded",
    ):
        assert any(ln.split(" ", 1)[1].startswith(transition) for ln in lines), (
            transition,
            text,
        )
    assert re.search(rf"INFO lab op={op} progress: pass finished: succeeded ", text), text


def test_a_warning_happening_is_a_warning_line(env: Env, text_log: Captured) -> None:
    rec = _told(env.reconciler())
    rec.reconcile("lab")
    env.merge_pr(7, "lab: hv:2", fleet_files("1.1.0", "hv:2"))
    env.helm.fail("upgrade", HelmError("helm upgrade: rendered manifests are invalid"), times=9)
    for _ in range(8):
        rec.reconcile("lab")
        env.world.tick()
        env.clock.t += timedelta(minutes=1)
    assert re.search(r" WARNING lab op=\S+ step=helm-upgrade progress: .*step helm-upgrade failed",
                     "\n".join(text_log.lines())), text_log.lines()  # fmt: skip


# -- secrets --------------------------------------------------------------------------------


def test_a_secret_resolved_for_a_cluster_never_reaches_a_log_line(env: Env) -> None:
    known = KnownSecrets()
    text_capture = _capture("text", logging.DEBUG, known)
    json_capture = _capture("json", logging.DEBUG, known)
    text_out, json_out = next(text_capture), next(json_capture)
    try:
        rec = _told(env.reconciler())
        base = rec.executor_for(None)  # type: ignore[arg-type]
        resolver = SecretResolver(
            env.cluster,
            environment=lambda name: CANARY if name == "TEST_LOG_CANARY" else None,
            known=known,
        )

        class Leaky(Executor):
            """Stands for an adapter that forgot to redact: the canary in a step's detail."""

            def run(self, step, journal, spec, **kwargs):  # type: ignore[no-untyped-def]
                outcome = super().run(step, journal, spec, **kwargs)
                if step.name == "helm-upgrade":
                    return replace(
                        outcome, state=StepState.FAILED, detail=f"token {CANARY} refused"
                    )
                return outcome

        leaky = Leaky(cluster=base.cluster, helm=base.helm, secrets=resolver)
        rec.executor_for = lambda spec: leaky
        rec.reconcile("lab")
        env.merge_pr(7, "lab: hv:2", {**fleet_files("1.1.0", "hv:2"), **ENV_CREDENTIALS})
        for _ in range(6):
            rec.reconcile("lab")
            env.clock.t += timedelta(minutes=1)
        assert len(known) == 1  # resolved at the upgrade, so known to the formatters
        log = logging.getLogger("gitopsbot.test")
        with log_context.pass_of("lab"):  # an exception message with the secret in it
            try:
                raise HelmError(f"helm: Authorization: Bearer {CANARY}")
            except HelmError:
                log.exception("upgrade failed for %s", CANARY, extra={"token": CANARY})
    finally:
        for capture in (text_capture, json_capture):
            capture.close()
    text = text_out.stream.getvalue()
    raw_json = json_out.stream.getvalue()
    assert "step helm-upgrade failed: token *** refused" in text, text
    assert "Bearer ***" in text and "upgrade failed for ***" in text
    for r in json_out.records():  # still JSON, masked field by field
        assert CANARY not in json.dumps(r)
    assert any(r.get("token") == "***" for r in json_out.records())
    assert CANARY not in text and CANARY not in raw_json


# -- the command line, in a process ------------------------------------------------------


@pytest.fixture
def process_env(env: Env, binaries: dict[str, Path]) -> dict[str, str]:
    environ = {
        **os.environ,
        "GITOPSBOT_CACHE": str(env.tmp / "cli-cache"),
        "GITOPSBOT_HELM": str(binaries["helm4"]),
        "GITOPSBOT_KUBECTL": str(binaries["kubectl"]),
        "PYTHONUNBUFFERED": "1",
    }
    environ.pop("GITOPSBOT_LOG_FORMAT", None)
    return environ


def _gitopsbot(*args: str, environ: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gitopsbot", *args],
        cwd=REPO_ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


@pytest.mark.slow
def test_run_once_log_format_json_prints_parseable_lines(
    env: Env, process_env: dict[str, str]
) -> None:
    for n, (args, extra) in enumerate(
        (
            (("run", "--fleet-url", env.url, "--once", "--log-format", "json"), {}),
            (("--log-format", "json", "run", "--fleet-url", env.url, "--once"), {}),
            (("run", "--fleet-url", env.url, "--once"), {"GITOPSBOT_LOG_FORMAT": "json"}),
        )
    ):
        # Each run from a fresh start (its baseline pass): there is no cluster to reach here,
        # and an idle pass reads the cluster's release (a cluster it cannot reach fails it).
        if n:
            git("push", "--quiet", "origin", "--delete", "gitopsbot/state", cwd=env.human.path)
        cache = {"GITOPSBOT_CACHE": str(env.tmp / f"cli-cache-{n}")}
        done = _gitopsbot(*args, environ={**process_env, **cache, **extra})
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("lab: ")  # the command's own output, on stdout
        records = [json.loads(line) for line in done.stderr.splitlines() if line]
        assert records, done.stderr
        progress = [r for r in records if r["logger"] == "gitopsbot.progress"]
        assert [r["message"] for r in progress][:1] == ["pass started"], records
        assert any(r["message"].startswith("pass finished: ") for r in progress)
        for r in progress:
            assert r["level"] == "INFO" and r["cluster"] == "lab" and "step" in r
            assert RFC3339_UTC.match(r["time"])


@pytest.mark.slow
def test_run_once_text_by_default_and_a_bad_format_is_refused(
    env: Env, process_env: dict[str, str]
) -> None:
    done = _gitopsbot("run", "--fleet-url", env.url, "--once", environ=process_env)
    assert done.returncode == 0, done.stderr
    assert re.search(r"^\S+Z INFO lab progress: pass started$", done.stderr, re.M), done.stderr
    assert re.search(r"^\S+Z INFO lab progress: pass finished: ", done.stderr, re.M)
    bad = _gitopsbot(
        "run", "--fleet-url", env.url, "--once",
        environ={**process_env, "GITOPSBOT_LOG_FORMAT": "xml"},
    )  # fmt: skip
    assert bad.returncode == 1 and "GITOPSBOT_LOG_FORMAT=xml" in bad.stderr
    wrong = _gitopsbot("run", "--log-format", "xml", "--fleet-url", env.url, environ=process_env)
    assert wrong.returncode == 2 and "invalid choice" in wrong.stderr


# -- the option's two places --------------------------------------------------------------


def test_log_format_is_accepted_before_and_after_the_command() -> None:
    from gitopsbot.cli import build_parser

    parser = build_parser()
    run = ["run", "--fleet-url", "https://git.example/fleet.git"]
    assert parser.parse_args(run).log_format is None  # then $GITOPSBOT_LOG_FORMAT, else text
    assert parser.parse_args(["--log-format", "json", *run]).log_format == "json"
    # As the Helm chart passes it: after the command, among run's own options.
    chart = [*run, "--webhook-listen", "0.0.0.0:8080", "--log-format", "json",
             "--leases-namespace", "bots", "--workers", "8"]  # fmt: skip
    assert parser.parse_args(chart).log_format == "json"
    assert parser.parse_args(["--log-format", "json", *run, "--log-format", "text"]).log_format == (
        "text"
    )
    for command in (["status", "--fleet-url", "u"], ["validate", "."]):
        assert parser.parse_args([*command, "--log-format", "json"]).log_format == "json"


def test_configure_leaves_an_embedder_s_logging_alone_and_undoes_itself() -> None:
    root = logging.getLogger()
    # pytest has its own handlers on the root logger: like basicConfig, nothing is changed.
    assert root.handlers and logs.configure("json", root_level=logging.DEBUG) is None
    theirs, level = list(root.handlers), root.level
    ours_before = logging.getLogger("gitopsbot").level
    for h in theirs:
        root.removeHandler(h)
    try:
        undo = logs.configure("json", root_level=logging.ERROR, levels={"gitopsbot": 20})
        assert undo is not None and root.level == logging.ERROR
        again = logs.configure("text", root_level=logging.WARNING)  # main() called twice
        assert again is not None and len(root.handlers) == 1
        assert isinstance(root.handlers[0].formatter, logs.TextFormatter)
        again()
        undo()
        assert root.handlers == [] and root.level == level
        assert logging.getLogger("gitopsbot").level == ours_before
    finally:
        for h in root.handlers:
            root.removeHandler(h)
        for h in theirs:
            root.addHandler(h)
        root.setLevel(level)


def test_a_pass_that_repeats_the_last_one_is_quiet(caplog: pytest.LogCaptureFixture) -> None:
    # A cluster waiting for its window says so once, not at every poll interval.
    from gitopsbot.bot.progress_log import ProgressLog

    progress = ProgressLog()
    caplog.set_level(logging.INFO, logger="gitopsbot.progress")
    for detail in ("window opens 02:00", "window opens 02:00", "window opens 02:00", "rolling"):
        progress.pass_started("lab")
        progress.pass_finished("lab", action="wait", detail=detail, error="", seconds=0.1)
    shown = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert shown == [
        "pass started",
        "pass finished: wait window opens 02:00 (0.1 s)",
        "pass started",  # not yet known to repeat; from then on quiet until it changes
        "pass finished: wait rolling (0.1 s)",
    ], shown
