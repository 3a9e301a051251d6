"""HelmCli with a stand-in helm that logs its calls: what helm is told to run as the
post-renderer, and how often ``helm version`` runs (#13).

Covers: an upgrade with a policy makes helm 3 (``--post-renderer <python>`` plus args) and
helm 4 (the ``postrenderer/v1`` plugin) run ``python -m gitopsbot.post_render``, and that
process, run as helm would, rewrites the manifests while importing no client library nor the
command line; ``helm version`` runs once per binary for any number of HelmCli objects,
``version``/``major`` reads and upgrades, also when threads ask at once; a binary replaced in
place is asked again; a failed ``helm version`` is not remembered.

The real helm 3 and helm 4 runs of the post-renderer are in test_helm_cli.py.
"""

from __future__ import annotations

import json
import stat
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from gitopsbot.adapters.helm import PLUGIN_NAME, HelmCli
from gitopsbot.core.fleet.model import PoolPolicy, RolloutPolicy
from gitopsbot.errors import HelmFailed
from gitopsbot.ports.helm import ChartRef, UpgradeRequest
from tests.executor.adapters.test_postrender import STREAM

POLICY = RolloutPolicy(pools=(PoolPolicy(name="shared", batch_percentage=10),))
HEAVY = ("kubernetes", "httpx", "pygit2", "apscheduler", "gitopsbot.cli", "gitopsbot.commands")

# A stand-in helm: logs each call as a JSON line; ``version`` answers VERSION (after a pause,
# so that threads asking at once overlap); ``history`` knows the one release an ``upgrade``
# made; ``upgrade`` runs the post-renderer as helm 3 (executable + --post-renderer-args) or
# helm 4 (plugin.yaml in $HELM_PLUGINS) does, on STREAM, with Python's import log on.
FAKE_HELM = """#!{python}
import json, os, subprocess, sys, time
VERSION = {version!r}
LOG = {log!r}
STATE = LOG + ".release"
argv = sys.argv[1:]
entry = {{"argv": argv}}
if argv[0] == "version":
    time.sleep(0.2)
    if VERSION == "fail":
        with open(LOG, "a") as f:
            f.write(json.dumps(entry) + "\\n")
        sys.stderr.write("Error: broken\\n")
        sys.exit(1)
    print(VERSION)
elif argv[0] == "history":
    if not os.path.exists(STATE):
        sys.stderr.write("Error: release: not found\\n")
        sys.exit(1)
    print(open(STATE).read())
elif argv[0] == "upgrade":
    sys.stdin.read()
    renderer = argv[argv.index("--post-renderer") + 1]
    extra = [a.split("=", 1)[1] for a in argv if a.startswith("--post-renderer-args=")]
    if VERSION.startswith("v4."):
        plugin = os.path.join(os.environ["HELM_PLUGINS"], renderer, "plugin.yaml")
        command = json.load(open(plugin))["runtimeConfig"]["platformCommand"][0]
        cmd = [command["command"], *command["args"], *extra]
    else:
        cmd = [renderer, *extra]
    env = dict(os.environ, PYTHONPROFILEIMPORTTIME="1")
    done = subprocess.run(cmd, input={stream!r}, capture_output=True, text=True, env=env)
    imports = [
        line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines()
        if line.startswith("import time:") and "imported package" not in line
    ]
    entry.update(renderer=cmd, code=done.returncode, stdout=done.stdout, imports=imports)
    with open(STATE, "w") as f:
        json.dump([{{"revision": 1, "status": "deployed", "chart": "tensor-fusion-1.8.7",
                    "app_version": "2.17.0", "description": "d"}}], f)
with open(LOG, "a") as f:
    f.write(json.dumps(entry) + "\\n")
"""


def _fake_helm(path: Path, version: str, log: Path) -> Path:
    path.write_text(
        FAKE_HELM.format(python=sys.executable, version=version, log=str(log), stream=STREAM)
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _calls(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def _verbs(log: Path) -> list[str]:
    return [c["argv"][0] for c in _calls(log)]


@pytest.mark.parametrize("version", ["v3.18.0", "v4.1.4"])
def test_upgrade_runs_the_fast_post_render_entry(version: str, tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    helm = HelmCli(_fake_helm(tmp_path / "helm", version, log), home=tmp_path / "home")
    info = helm.upgrade(UpgradeRequest(
        release="tf", namespace="default", chart=ChartRef(path=str(tmp_path / "chart")),
        version="1.8.7", values={}, description="d", post_render_policy=POLICY,
    ))  # fmt: skip
    assert info.revision == 1
    (upgrade,) = [c for c in _calls(log) if c["argv"][0] == "upgrade"]
    assert upgrade["renderer"][:3] == [sys.executable, "-m", "gitopsbot.post_render"]
    assert upgrade["renderer"][3] == "--policy"
    if version.startswith("v4."):
        assert upgrade["argv"][upgrade["argv"].index("--post-renderer") + 1] == PLUGIN_NAME
    assert upgrade["code"] == 0
    assert "autoUpdateHypervisor: false" in upgrade["stdout"]
    imported = upgrade["imports"]
    assert "gitopsbot.core.charts.postrender" in imported  # (-m runs the entry itself as __main__)
    assert [m for m in imported if m.split(".")[0] in HEAVY or m.startswith(HEAVY)] == []
    assert _verbs(log).count("version") == 1


def test_helm_version_runs_once_per_binary(tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    binary = _fake_helm(tmp_path / "helm", "v4.1.4", log)
    first = HelmCli(binary, home=tmp_path / "a")
    second = HelmCli(binary, home=tmp_path / "b")  # another cluster, same helm
    assert [first.version, first.major, second.version, second.major] == [
        "v4.1.4", 4, "v4.1.4", 4,
    ]  # fmt: skip
    assert _verbs(log) == ["version"]


def test_helm_version_found_on_path_is_the_same_binary(tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    binary = _fake_helm(tmp_path / "helm", "v3.18.0", log)
    by_path = HelmCli(binary, home=tmp_path / "a")
    by_name = HelmCli("helm", home=tmp_path / "b", environ={"PATH": str(tmp_path)})
    assert (by_path.major, by_name.major) == (3, 3)
    assert _verbs(log) == ["version"]


def test_threads_asking_at_once_run_helm_version_once(tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    binary = _fake_helm(tmp_path / "helm", "v3.18.0", log)
    clis = [HelmCli(binary, home=tmp_path / f"h{i}") for i in range(6)]
    start = threading.Barrier(len(clis))
    majors: list[int] = []

    def ask(cli: HelmCli) -> None:
        start.wait()
        majors.append(cli.major)

    threads = [threading.Thread(target=ask, args=(cli,)) for cli in clis]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert majors == [3] * len(clis)
    assert _verbs(log) == ["version"]


def test_a_binary_replaced_in_place_is_asked_again(tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    binary = _fake_helm(tmp_path / "helm", "v3.18.0", log)
    helm = HelmCli(binary, home=tmp_path / "home")
    assert helm.major == 3
    _fake_helm(tmp_path / "helm.new", "v4.1.4", log).replace(binary)  # a new inode
    assert helm.major == 4
    assert _verbs(log) == ["version", "version"]


def test_a_failed_helm_version_is_not_remembered(tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    binary = _fake_helm(tmp_path / "helm", "fail", log)
    helm = HelmCli(binary, home=tmp_path / "home")
    for _ in range(2):
        with pytest.raises(HelmFailed, match="helm version"):
            helm.version  # noqa: B018 - the property runs helm
    assert _verbs(log) == ["version", "version"]
