"""Benchmark (#29 item 2): what idle clusters cost, and the drift burst.

1. The idle check. N clusters (default 100) on one sandbox API emulator in this process, over
   real HTTP through ``KubeCluster``: each a release of two revisions whose Secrets hold a
   record of the sandbox chart's size (``examples/charts/tensor-fusion-<version>``: its
   templates, CRDs and files, and a manifest as large, gzipped as helm stores it). Per idle
   minute each cluster is looked at once (``MANUAL_CHECK``): before, a full list of its
   release Secrets (``HelmStorage.releases``, what ``helm.status`` read); now the metadata
   list (``HelmStorage.mark``), the records read only when the mark changed (never, idle).
   Bytes and requests are counted at the client; the wall time of a whole round too. In
   alternating rounds (load on the machine falls on both).
   Then the watch (``adapters.release_watch``): the same N releases watched (one list and
   one watch request each, on one event-loop thread), a change made to one release, and the
   requests counted over an idle window (``--watch-seconds``), scaled to a minute; plus the
   safety net's metadata list of each cluster every MANUAL_CHECK_WATCHED (10 min).
2. The drift burst. N clusters, 13 API requests each per check (``bot.drift``): before, all
   at the interval's instant; now each at its offset (``core.drift.schedule``). Prints the
   requests in the busiest second of one interval, from the schedule.

    python benchmarks/idle_bench.py [--clusters 100] [--rounds 3] [--interval 3600]
                                    [--pad-kb 0] [--watch-seconds 15]
"""

from __future__ import annotations

import argparse
import base64
import gzip
import json
import os
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "examples" / "charts" / "tensor-fusion-1.8.7"
NS = "default"
DRIFT_REQUESTS = 13  # API requests of one cluster's drift check (docs/drift.md)


def chart_record(release: str, revision: int, pad_kb: int = 0) -> dict[str, Any]:
    """A release record as helm stores it: the chart's files and a manifest (``pad_kb`` more
    of it, incompressible: a larger chart's, e.g. TensorFusion's own with its CRDs)."""
    templates, files = [], []
    for path in sorted(CHART.rglob("*")):
        if not path.is_file():
            continue
        entry = {"name": str(path.relative_to(CHART)), "data": base64.b64encode(path.read_bytes())}
        (templates if "templates" in path.parts else files).append(
            {**entry, "data": entry["data"].decode()}
        )
    manifest = "\n---\n".join(base64.b64decode(t["data"]).decode("utf-8", "replace")
                              for t in templates)  # fmt: skip
    manifest += base64.b64encode(os.urandom(pad_kb * 768)).decode()
    return {
        "name": release,
        "namespace": NS,
        "version": revision,
        "info": {"status": "deployed" if revision == 2 else "superseded",
                 "description": "Upgrade complete", "last_deployed": "2026-12-01T10:00:00Z"},
        "chart": {"metadata": {"name": "tensor-fusion", "version": "1.8.7"},
                  "templates": templates, "files": files},
        "config": {"cluster": {"name": release}},
        "manifest": manifest,
    }  # fmt: skip


def release_secret(record: dict[str, Any]) -> dict[str, Any]:
    packed = base64.b64encode(gzip.compress(json.dumps(record).encode(), 9))
    name, revision = record["name"], record["version"]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "helm.sh/release.v1",
        "metadata": {
            "name": f"sh.helm.release.v1.{name}.v{revision}",
            "namespace": NS,
            "labels": {"owner": "helm", "name": name, "status": record["info"]["status"],
                       "version": str(revision), "modifiedAt": "1764583200"},
        },
        "data": {"release": base64.b64encode(packed).decode()},
    }  # fmt: skip


class Counted:
    """Requests and response bytes through ``adapters.kube``'s one way out."""

    def __init__(self) -> None:
        self.requests = 0
        self.bytes = 0

    def wrap(self, send: Callable[..., Any]) -> Callable[..., Any]:
        counter = self

        class Response:
            def __init__(self, inner: Any) -> None:
                self._inner = inner
                self.status = inner.status
                self.headers = inner.headers

            def read(self) -> bytes:
                data: bytes = self._inner.read() or b""
                counter.bytes += len(data)
                return data

        def counted(*args: Any, **kwargs: Any) -> Any:
            counter.requests += 1
            return Response(send(*args, **kwargs))

        return counted


def idle_watches(
    api: Any, tmp: Path, kube: Any, names: Sequence[str], seconds: float
) -> tuple[int, int, float, int]:
    """N releases watched: requests to start, requests over ``seconds`` idle, how long one
    revision took to be reported, and the watches' threads."""
    import threading

    from gitopsbot.adapters.kube_request import configuration_from_kubeconfig
    from gitopsbot.adapters.release_watch import ReleaseWatches

    seen = threading.Event()
    watches = ReleaseWatches(lambda spec: None, on_change=lambda c: seen.set())  # type: ignore[arg-type,return-value]
    configuration = configuration_from_kubeconfig(api.write_kubeconfig(tmp / "watch-kubeconfig"))
    try:
        for name in names:
            watches.watch(name, configuration, NS, name)
        deadline = time.monotonic() + 60
        while not all(watches.healthy(n) for n in names) and time.monotonic() < deadline:
            time.sleep(0.05)
        started = watches.requests
        time.sleep(seconds)  # idle: nothing written
        idle = watches.requests - started
        begin = time.perf_counter()
        kube.create(release_secret(chart_record(names[0], 3)))
        seen.wait(30)
        reported = time.perf_counter() - begin
        return started, idle, reported, watches.threads()
    finally:
        watches.close()


def busiest_second(times: Sequence[float]) -> int:
    return max(Counter(int(t) for t in times).values())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Bytes and requests of N idle clusters per minute (full list of the "
        "release Secrets vs the metadata list), and the drift burst (all at once vs spread)."
    )
    parser.add_argument("--clusters", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--interval", type=float, default=3600.0, help="drift.interval")
    parser.add_argument(
        "--pad-kb", type=int, default=0,
        help="grow each record by this much (the sandbox chart's is small; TensorFusion's "
        "own release Secrets are hundreds of KB)",
    )  # fmt: skip
    parser.add_argument("--watch-seconds", type=float, default=15.0,
                        help="the idle window the watches are counted over")  # fmt: skip
    args = parser.parse_args(argv)

    from gitopsbot.adapters import kube_request as kube_module
    from gitopsbot.adapters.helm_storage import HelmStorage
    from gitopsbot.adapters.kube import KubeCluster, RetryPolicy
    from gitopsbot.adapters.release_watch import WATCH_SECONDS
    from gitopsbot.core.drift import schedule as drift_schedule
    from gitopsbot.sandbox.apiserver import ApiServer

    names = [f"tf-{i:03d}" for i in range(args.clusters)]
    with tempfile.TemporaryDirectory() as tmp, ApiServer() as api:
        kube = KubeCluster.from_kubeconfig(
            api.write_kubeconfig(Path(tmp) / "kubeconfig"), retry=RetryPolicy(attempts=1)
        )
        one = release_secret(chart_record("x", 2, args.pad_kb))
        record_kb = len(one["data"]["release"]) / 1024
        for name in names:
            for revision in (1, 2):
                kube.create(release_secret(chart_record(name, revision, args.pad_kb)))
        storage = HelmStorage(kube)
        counted = Counted()
        kube_module.send = counted.wrap(kube_module.send)  # type: ignore[assignment]
        ways: dict[str, Callable[[str], Any]] = {
            "before: full list": lambda n: storage.releases(n, NS),
            "now: metadata list": lambda n: storage.mark(n, NS),
        }
        figures: dict[str, list[tuple[int, int, float]]] = {w: [] for w in ways}
        for _ in range(args.rounds):
            for way, read in ways.items():
                counted.requests = counted.bytes = 0
                start = time.perf_counter()
                for name in names:  # one idle minute: each cluster looked at once
                    read(name)
                figures[way].append((counted.requests, counted.bytes, time.perf_counter() - start))
        watched = idle_watches(api, Path(tmp), kube, names, args.watch_seconds)
        kube.close()

    print(f"{args.clusters} idle clusters, one emulator over HTTP; each release: 2 revisions, "
          f"{record_kb:.0f} KB per Secret's data.release; per idle minute:")  # fmt: skip
    rows = {}
    for way, runs in figures.items():
        requests = runs[0][0]
        kb = statistics.median(b for _, b, _ in runs) / 1024
        seconds = statistics.median(s for _, _, s in runs)
        rows[way] = (requests, kb, seconds)
        print(f"  {way:20s} {requests:5d} requests  {kb:10.1f} KB  {seconds:7.3f} s")
    (_, kb_old, s_old), (_, kb_new, s_new) = rows.values()
    print(f"  ratio before/now: bytes {kb_old / kb_new:.0f}x, time {s_old / s_new:.1f}x")

    started, idle, reported, threads = watched
    n = len(names)
    # per minute: what the idle window counted, each watch's resume every WATCH_SECONDS,
    # and the safety net's metadata list of each cluster every 10 minutes
    resumes, net = n * 60 / WATCH_SECONDS, n / 10
    per_minute = idle * 60 / args.watch_seconds + resumes + net
    print(f"  {'now: watch':20s} {per_minute:5.0f} requests/min: {idle} in "
          f"{args.watch_seconds:g} s idle + {resumes:.1f} resumes + {net:.0f} safety-net "
          f"lists (to start: {started}, a list and a watch each); a revision reported "
          f"in {reported * 1000:.0f} ms; {threads} threads for {n} watches")  # fmt: skip
    full, meta = rows["before: full list"][0], rows["now: metadata list"][0]
    print(f"  requests per idle minute, ratio: full list / watch {full / per_minute:.1f}x, "
          f"metadata list / watch {meta / per_minute:.1f}x")  # fmt: skip

    interval = args.interval
    start = 1_800_000_000.0
    at_once = [start] * len(names)
    spread = list(
        drift_schedule.plan(names, {}, interval=interval, now=start, not_before=start).values()
    )
    before = busiest_second(at_once) * DRIFT_REQUESTS
    now = busiest_second(spread) * DRIFT_REQUESTS
    print(f"drift, {len(names)} clusters, interval {interval:g} s, {DRIFT_REQUESTS} requests "
          f"per check: busiest second before {before} requests (every check at once), now "
          f"{now} (each at its offset); ratio {before / now:.0f}x")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
