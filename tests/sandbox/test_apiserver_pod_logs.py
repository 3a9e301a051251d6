"""The emulator's ``pods/{name}/log`` (gitopsbot/sandbox/apiserver/pod_logs.py): the text of
the ``sandbox.gitopsbot.io/log.<container>`` annotation as text/plain, filtered by sinceTime,
sinceSeconds and tailLines; the real server's 400s and 404; real kubectl's ``logs``."""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gitopsbot.sandbox.apiserver import ApiServer
from gitopsbot.sandbox.apiserver.pod_logs import log_annotation, select_lines

Run = Callable[..., subprocess.CompletedProcess[str]]

LOG = (
    "2026-12-04T10:00:00Z INFO starting\n"
    "2026-12-04T10:00:10Z INFO connected to TensorFusion console as agent a-1\n"
)


def _pod(name: str, containers: list[str], logs: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "annotations": {log_annotation(c): text for c, text in logs.items()},
        },
        "spec": {"containers": [{"name": c, "image": "busybox:1"} for c in containers]},
    }


def _get(api: ApiServer, path: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(api.url + path, timeout=10) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read().decode()
    except urllib.error.HTTPError as e:
        body = json.loads(e.read())
        return e.code, e.headers["Content-Type"], body["message"]


def test_log_endpoint(apiserver: ApiServer) -> None:
    apiserver.store.create(_pod("one", ["agent"], {"agent": LOG}))
    apiserver.store.create(_pod("two", ["a", "b"], {"b": LOG}))
    base = "/api/v1/namespaces/default/pods"
    assert _get(apiserver, f"{base}/one/log") == (200, "text/plain", LOG)
    assert _get(apiserver, f"{base}/one/log?container=agent&tailLines=1&timestamps=false") == (
        200, "text/plain", LOG.splitlines(keepends=True)[1],
    )  # fmt: skip
    since = f"{base}/one/log?sinceTime=2026-12-04T10:00:05Z"
    assert _get(apiserver, since)[2] == LOG.splitlines(keepends=True)[1]
    assert _get(apiserver, f"{base}/one/log?sinceSeconds=60")[2] == ""  # 2026-12-04 is past
    assert _get(apiserver, f"{base}/two/log?container=b")[2] == LOG
    assert _get(apiserver, f"{base}/two/log?container=a")[2] == ""
    assert _get(apiserver, f"{base}/two/log") == (
        400, "application/json",
        "a container name must be specified for pod two, choose one of: [a b]",
    )  # fmt: skip
    assert _get(apiserver, f"{base}/two/log?container=c") == (
        400, "application/json", "container c is not valid for pod two",
    )  # fmt: skip
    assert _get(apiserver, f"{base}/gone/log")[0] == 404
    assert _get(apiserver, f"{base}/one/log?tailLines=x")[0] == 400


def test_since_seconds_counts_from_now() -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    old = (now - timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    new = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    text = f"{old} INFO old\n{new} INFO new\ncontinued\n"
    got = select_lines(text, since=now - timedelta(seconds=60), tail_lines=None)
    assert got == f"{new} INFO new\ncontinued\n"


@pytest.mark.slow
def test_kubectl_logs(apiserver: ApiServer, run: Run) -> None:
    apiserver.store.create(_pod("one", ["agent", "main"], {"agent": LOG}))
    out = run("kubectl", "-n", "default", "logs", "one", "-c", "agent", "--tail=1").stdout
    assert out == LOG.splitlines(keepends=True)[1]
    failed = run("kubectl", "-n", "default", "logs", "one", "-c", "nope", check=False)
    assert failed.returncode != 0 and "container nope is not valid for pod one" in failed.stderr
