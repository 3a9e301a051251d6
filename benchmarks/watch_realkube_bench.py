"""Benchmark (#29 item 2): N idle release watches (``adapters.release_watch``) against the real
control plane tier (kube-apiserver and etcd built by tests/realkube/build.sh into
``~/.cache/gitopsbot/realkube/<version>``): how long until all are healthy, the requests that
took, then over an idle window the requests, the CPU time of this process, its peak RSS and
the watches' threads. No release exists, so the window is what idle costs.

    python benchmarks/watch_realkube_bench.py [--clusters 1000] [--idle-seconds 150]
                                              [--built ~/.cache/gitopsbot/realkube/<version>]
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="N idle release watches on a real API server")
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--idle-seconds", type=float, default=150.0)
    parser.add_argument("--built", type=Path, default=None)
    args = parser.parse_args(argv)

    from gitopsbot.adapters.kube_request import configuration_from_kubeconfig
    from gitopsbot.adapters.release_watch import ReleaseWatches
    from gitopsbot.sandbox.controlplane import ControlPlane, ControlPlaneBinaries

    built = args.built or max((Path.home() / ".cache/gitopsbot/realkube").glob("v*"), default=None)
    if built is None:
        sys.stderr.write("no real control plane built: run tests/realkube/build.sh\n")
        return 1
    tmp = Path(tempfile.mkdtemp())
    plane = ControlPlane(ControlPlaneBinaries.in_dir(built), tmp / "plane")
    plane.start()
    try:
        kubeconfig = plane.write_kubeconfig(tmp / "kubeconfig", namespace="default")
        configuration = configuration_from_kubeconfig(kubeconfig)
        watches = ReleaseWatches(lambda spec: None)  # type: ignore[arg-type,return-value]
        names = [f"tf-{i:04d}" for i in range(args.clusters)]
        begin = time.monotonic()
        for name in names:
            watches.watch(name, configuration, "default", name)
        while not all(watches.healthy(n) for n in names) and time.monotonic() - begin < 300:
            time.sleep(0.2)
        healthy = sum(watches.healthy(n) for n in names)
        started, took = watches.requests, time.monotonic() - begin
        cpu = time.process_time()
        time.sleep(args.idle_seconds)
        idle, cpu = watches.requests - started, time.process_time() - cpu
        threads = watches.threads()
        watches.close()
    finally:
        plane.stop()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{args.clusters} release watches on a real kube-apiserver ({built.name}): "
          f"{healthy} healthy after {took:.1f} s, {started} requests to start; then "
          f"{args.idle_seconds:g} s idle: {idle} requests, {cpu:.2f} s CPU "
          f"({100 * cpu / args.idle_seconds:.2f} % of a core); peak RSS {rss:.0f} MB "
          f"(the whole process); {threads} threads")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
